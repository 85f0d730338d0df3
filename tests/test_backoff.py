"""The one exponential backoff (tfmesos.common.backoff): the waits each site
had written for itself, now one policy's."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tfmesos.common.backoff import Backoff


def test_each_wait_doubles_from_the_first_up_to_the_cap() -> None:
    backoff = Backoff(1.0, cap=15.0)
    assert [backoff.delay(n) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0]


def test_the_jitter_spreads_each_wait_either_way_even_at_the_cap() -> None:
    backoff = Backoff(1.0, cap=30.0, jitter=0.5)
    assert backoff.delay(0, 0.0) == 0.5
    assert backoff.delay(0, 0.5) == 1.0
    assert backoff.delay(0, 0.999) == pytest.approx(1.499)
    assert backoff.delay(10, 0.0) == 15.0 and backoff.delay(10, 0.999) == pytest.approx(44.97)


def test_the_jitter_draws_as_random_uniform_would() -> None:
    """The hold drew ``uniform(0.5, 1.5)`` from its own seeded generator;
    one ``random()`` from the same seed gives the same spread."""
    backoff = Backoff(1.0, cap=30.0, jitter=0.5)
    ours, theirs = random.Random(7), random.Random(7)
    for n in range(8):
        expected = min(2.0**n, 30.0) * theirs.uniform(0.5, 1.5)
        assert backoff.delay(n, ours.random()) == pytest.approx(expected)


def test_a_client_that_has_tried_for_ever_waits_the_cap() -> None:
    assert Backoff(0.001, cap=15.0).delay(100_000) == 15.0
    assert Backoff(0.001).delay(100_000) == math.inf


def test_without_jitter_the_following_wait_is_the_next_one() -> None:
    backoff = Backoff(2.0, cap=60.0)
    for n in range(10):
        assert backoff.following(backoff.delay(n)) == backoff.delay(n + 1)


def test_following_waits_compound_their_spreads_and_stay_at_the_cap() -> None:
    """The scheduler client's: each wait at least 1.6 times the one before
    (doubled, spread by 0.8 to 1.2), never over the cap, and once there,
    there for good."""
    backoff = Backoff(0.001, cap=0.008, jitter=0.2)
    rng = random.Random(3)
    wait, waits = backoff.first, [backoff.first]
    for _ in range(12):
        wait = backoff.following(wait, rng.random())
        waits.append(wait)
    for before, after in itertools.pairwise(waits):
        assert min(0.008, 1.6 * before) - 1e-12 <= after <= min(0.008, 2.4 * before)
    assert waits[-4:] == [0.008] * 4
    assert backoff.following(0.001, 0.0) == pytest.approx(0.0016)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"first": 0.0},
        {"first": 1.0, "factor": 0.5},
        {"first": 2.0, "cap": 1.0},
        {"first": 1.0, "jitter": 1.0},
        {"first": 1.0, "jitter": -0.1},
    ],
)
def test_a_policy_that_is_no_backoff_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**kwargs)
