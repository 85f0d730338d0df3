"""The launcher's rules alone (tfmesos.launcher.policy): pure functions, no loop."""

from __future__ import annotations

import pytest

from tfmesos.launcher.policy import (
    MAX_ATTEMPTS,
    Action,
    Phase,
    TaskView,
    on_backend_failure,
    on_registered,
    on_task_end,
)


def view(
    phase: Phase = Phase.RUNNING, *, current: bool = True, attempt: int = 1, replica: bool = True
) -> TaskView:
    return TaskView(phase=phase, current=current, attempt=attempt, replica=replica)


@pytest.mark.parametrize("code", [0, 1, None])
def test_before_the_cluster_is_up_an_end_is_retried_until_the_attempts_run_out(
    code: int | None,
) -> None:
    for attempt in range(1, MAX_ATTEMPTS):
        assert on_task_end(view(Phase.STARTING, attempt=attempt), code) is Action.RELAUNCH
    assert on_task_end(view(Phase.STARTING, attempt=MAX_ATTEMPTS), code) is Action.GIVE_UP


@pytest.mark.parametrize("code", [1, 137, None])
def test_after_the_cluster_is_up_a_failure_ends_the_job(code: int | None) -> None:
    assert on_task_end(view(Phase.RUNNING), code) is Action.FAIL_JOB
    assert on_task_end(view(Phase.RUNNING, replica=False), code) is Action.FAIL_JOB


def test_a_replica_exit_0_finishes_the_task_and_a_servers_fails_the_job() -> None:
    assert on_task_end(view(Phase.RUNNING), 0) is Action.FINISH
    assert on_task_end(view(Phase.RUNNING, replica=False), 0) is Action.FAIL_JOB


@pytest.mark.parametrize("phase", list(Phase))
def test_a_superseded_attempt_is_only_stopped(phase: Phase) -> None:
    assert on_task_end(view(phase, current=False), 1) is Action.STOP
    assert on_registered(view(phase, current=False)) is Action.STOP


@pytest.mark.parametrize("code", [0, 1, None])
def test_while_stopping_every_end_is_a_stop(code: int | None) -> None:
    assert on_task_end(view(Phase.STOPPING), code) is Action.STOP


def test_a_task_joins_only_while_the_cluster_is_being_built() -> None:
    assert on_registered(view(Phase.STARTING)) is Action.RUN
    assert on_registered(view(Phase.RUNNING)) is Action.STOP
    assert on_registered(view(Phase.STOPPING)) is Action.STOP


def test_a_backend_failure_while_stopping_does_not_replace_the_verdict() -> None:
    assert on_backend_failure(Phase.STARTING) is Action.FAIL_JOB
    assert on_backend_failure(Phase.RUNNING) is Action.FAIL_JOB
    assert on_backend_failure(Phase.STOPPING) is Action.CARRY_ON


def test_a_server_relaunched_at_its_address_rejoins_the_running_cluster() -> None:
    def relaunched(phase: Phase, current: bool = True) -> TaskView:
        return TaskView(
            phase=phase, current=current, attempt=1, replica=False, relaunched_at_address=True
        )

    assert on_registered(relaunched(Phase.RUNNING)) is Action.REJOIN
    assert on_registered(relaunched(Phase.STARTING)) is Action.RUN
    assert on_registered(relaunched(Phase.STOPPING)) is Action.STOP
    assert on_registered(relaunched(Phase.RUNNING, current=False)) is Action.STOP


# -- who is let in when it dials in (the launcher's admit) ---------------------------


def test_only_a_launched_latest_attempt_is_admitted_while_the_cluster_is_built() -> None:
    from tfmesos.launcher.policy import admits

    assert admits(view(Phase.STARTING), launched=True)
    assert not admits(view(Phase.STARTING), launched=False)  # registered already
    assert not admits(view(Phase.STARTING, current=False), launched=True)  # superseded
    assert not admits(view(Phase.RUNNING), launched=True)  # too late
    assert not admits(view(Phase.STOPPING), launched=True)


def test_a_server_relaunched_at_its_address_is_admitted_while_the_cluster_runs() -> None:
    from tfmesos.launcher.policy import admits

    relaunched = TaskView(
        Phase.RUNNING, current=True, attempt=2, replica=False, relaunched_at_address=True
    )
    assert admits(relaunched, launched=True)
    assert not admits(relaunched, launched=False)
    stopping = TaskView(Phase.STOPPING, True, 2, False, relaunched_at_address=True)
    assert not admits(stopping, launched=True)


def test_a_backends_helper_may_be_admitted_until_the_job_stops() -> None:
    from tfmesos.launcher.policy import admits_helper

    assert admits_helper(Phase.STARTING) and admits_helper(Phase.RUNNING)
    assert not admits_helper(Phase.STOPPING)
