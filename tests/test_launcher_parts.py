"""The launcher package's parts alone (tfmesos.launcher.*): attempts and their
one state-transition method, the cluster message, the relaunch decision, the
verdict's words, the output's prefixes, and the boundary between the loop
that owns a job's state and the launcher that drives it. No process, no loop."""

from __future__ import annotations

import ast
import io
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import NOT_PLACED, TaskEnded
from tfmesos.errors import ClusterStartError, TaskFailure
from tfmesos.launcher import endings, grace, message, relaunch, verdict
from tfmesos.launcher.attempts import Attempt, Attempts, AttemptState, IllegalMove
from tfmesos.launcher.output import OutputRouter, human_size
from tfmesos.launcher.policy import MAX_ATTEMPTS, Action, Phase, TaskView
from tfmesos.rendezvous.reports import Exited

pytestmark = pytest.mark.unit

JOB = ClusterSpec((Job("ps", 1, cmd="true"), Job("worker", 2, cmd="true")), replica=True)


def attempt(name: str = "worker:0", state: AttemptState = AttemptState.PENDING) -> Attempt:
    spec = next(t for t in JOB.tasks() if t.name == name)
    return Attempt(spec, f"{name}.1", 1, b"", False, state)


# -- attempts ----------------------------------------------------------------------


def test_an_attempt_moves_forward_along_the_diagram_and_observers_hear_each_move() -> None:
    moves: list[tuple[str, str]] = []
    task = attempt()
    task.observer = lambda _t, old, new: moves.append((old.value, new.value))
    for state in ("launched", "registered", "running", "finished"):
        task.move(AttemptState(state))
    task.move(AttemptState.FINISHED)  # to where it is: nothing happens
    assert moves == [
        ("pending", "launched"),
        ("launched", "registered"),
        ("registered", "running"),
        ("running", "finished"),
    ]


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (AttemptState.FINISHED, AttemptState.RUNNING),
        (AttemptState.STOPPED, AttemptState.FAILED),
        (AttemptState.FAILED, AttemptState.FINISHED),
        (AttemptState.RUNNING, AttemptState.REGISTERED),
        (AttemptState.PENDING, AttemptState.RUNNING),
        (AttemptState.LAUNCHED, AttemptState.RUNNING),
    ],
)
def test_a_move_the_diagram_does_not_allow_is_refused(
    start: AttemptState, to: AttemptState
) -> None:
    task = attempt(state=start)
    with pytest.raises(IllegalMove, match=f"{start.value} -> {to.value}"):
        task.move(to)
    assert task.state is start


def test_every_state_change_in_the_launcher_goes_through_move() -> None:
    # The state is a read-only property: an assignment anywhere in the
    # package would fail, so that Attempt.move is the one way it changes.
    with pytest.raises(AttributeError):
        attempt().state = AttemptState.RUNNING  # type: ignore[misc]
    package = Path(message.__file__).parent
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    assert not (
                        isinstance(target, ast.Attribute) and target.attr in ("state", "_state")
                    ) or (module.name == "attempts.py"), f"{module.name}:{node.lineno}"


def test_the_table_answers_what_the_loop_waits_on() -> None:
    table = Attempts()
    ps, w0, w1 = (attempt(n, AttemptState.REGISTERED) for n in ("ps:0", "worker:0", "worker:1"))
    for task in (ps, w0, w1):
        table.add(task)
    assert table.all_registered() and table.count(AttemptState.REGISTERED) == 3
    later = Attempt(w1.spec, "worker:1.2", 2, b"", False, AttemptState.LAUNCHED)
    table.add(later)
    assert not table.is_current(w1) and table.is_current(later)
    assert table.waiting(set()) == ["worker:1"] and table.waiting({"worker:1"}) == []
    for task in (w0, later):
        task.move(AttemptState.FINISHED)
    assert table.workers_done() and not table.all_over()
    assert [t.spec.name for t in table.live()] == ["ps:0"]


def test_an_attempt_keeps_only_the_tail_of_its_output() -> None:
    task = attempt()
    task.keep_output(b"x" * 5000 + b"\nlast\n")
    assert len(task.tail) == 4096 and task.tail_lines()[-1] == "last"


# -- the cluster message -----------------------------------------------------------


# -- grace: how long an ending task is waited for ---------------------------------


def test_a_sigkill_is_held_for_its_backends_word_and_is_the_tasks_own_without_it() -> None:
    task = attempt(state=AttemptState.RUNNING)
    killed = Exited(task.task_id, 137, signal.SIGKILL)
    assert grace.after_exit(task, killed, 20.0, now=100.0) == grace.WaitUntil(120.0)
    assert grace.after_exit(task, killed, 0.0, now=100.0) == grace.Over(
        137, verdict.describe_exit(killed), signal.SIGKILL
    )
    task.held_exit, task.deadline = killed, 120.0
    assert grace.at_deadline(task, 119.0, 60.0) == grace.WaitUntil(120.0)  # woken early
    assert grace.at_deadline(task, 120.0, 60.0) == grace.Over(
        137, verdict.describe_exit(killed), signal.SIGKILL
    )
    # The backend's word came, naming no limit: the task's own report stands.
    task.ended = TaskEnded(task.task_id, "TASK_KILLED", 137, "killed", "h")
    assert grace.after_backend_end(task, task.ended) == grace.Over(
        137, verdict.describe_exit(killed), signal.SIGKILL
    )


def test_an_end_heard_only_from_the_backend_waits_for_the_last_output() -> None:
    task = attempt(state=AttemptState.RUNNING)
    ended = TaskEnded(task.task_id, "exited", 0, "exited with status 0", "h")
    task.ended, task.ended_at = ended, 50.0
    # No connection: nothing more can come.
    assert grace.after_backend_end(task, ended) == grace.Over(0, verdict.describe_end(ended))
    task.connection = object()  # type: ignore[assignment]
    assert grace.after_backend_end(task, ended) == grace.WaitUntil(50.0 + grace.DISCONNECT_GRACE)
    task.disconnected = True
    assert grace.after_disconnect(task, now=51.0) == grace.Over(0, verdict.describe_end(ended))


def test_a_lost_connection_waits_for_the_backend_then_says_so() -> None:
    task = attempt(state=AttemptState.RUNNING)
    task.disconnected = True
    assert grace.after_disconnect(task, now=10.0) == grace.WaitUntil(
        10.0 + grace.LOST_CONNECTION_GRACE
    )
    task.deadline = 20.0
    assert grace.at_deadline(task, 20.0, 60.0) == grace.Over(
        None, "lost its connection to the launcher"
    )
    task.move(AttemptState.FAILED)
    assert grace.at_deadline(task, 20.0, 60.0) is None


# -- endings: what an attempt's end means for the job -----------------------------


def _end(task: Attempt, phase: Phase, code: int | None, *, replica: bool = True) -> endings.Ending:
    from tfmesos.testing.fake import FakeBackend

    view = TaskView(phase=phase, current=True, attempt=task.attempt, replica=replica)
    backend = FakeBackend(JOB)
    return endings.end_of(task, view, code, "exited with status 1", backend=backend,
                          server_relaunches=0, max_restarts=0)  # fmt: skip


def test_an_end_before_the_cluster_is_up_is_relaunched_then_given_up() -> None:
    first = attempt(state=AttemptState.LAUNCHED)
    end = _end(first, Phase.STARTING, 1)
    assert (end.action, end.state, end.relaunch, end.error) == (
        Action.RELAUNCH, AttemptState.FAILED, True, None,
    )  # fmt: skip
    assert end.note is not None and f"attempt 2 of {MAX_ATTEMPTS}" in end.note[1]
    last = Attempt(first.spec, "worker:0.3", MAX_ATTEMPTS, b"", False, AttemptState.LAUNCHED)
    end = _end(last, Phase.STARTING, 1)
    assert isinstance(end.error, ClusterStartError) and not end.relaunch
    assert "it printed nothing the launcher could see" in str(end.error)


def test_an_end_once_the_cluster_runs_finishes_or_fails_the_job() -> None:
    task = attempt(state=AttemptState.RUNNING)
    end = _end(task, Phase.RUNNING, 0)
    assert (end.state, end.after_output, end.error) == (AttemptState.FINISHED, True, None)
    end = _end(task, Phase.RUNNING, 1)
    assert end.action is Action.FAIL_JOB and end.error is not None
    assert _end(task, Phase.STOPPING, 1).state is AttemptState.STOPPED


def test_the_cluster_definition_is_by_job_in_index_order() -> None:
    tasks = [attempt("worker:1"), attempt("ps:0"), attempt("worker:0")]
    for task, addr in zip(tasks, ["h:3", "h:1", "h:2"], strict=True):
        task.addr = addr
    cluster = message.cluster_def_of(tasks)
    assert cluster == {"worker": ["h:2", "h:3"], "ps": ["h:1"]}
    assert message.summary({"ps": ["a"], "worker": ["b", "c"]}) == "1 ps, 2 workers"
    sent = message.cluster_message(JOB, tasks[0], run_id="r", restart=1, cluster_def=cluster)
    assert sent["job_name"] == "worker" and sent["task_index"] == 1
    assert sent["cluster_def"] == cluster and sent["run_id"] == "r" and sent["restart"] == 1


def test_a_cluster_message_over_the_frame_is_refused_naming_its_size() -> None:
    message.check_size({"cmd": "x" * 1000})
    with pytest.raises(ClusterStartError, match="more than the rendezvous's 1 MiB"):
        message.check_size({"cmd": "x" * (1 << 20)})


# -- fine-grained relaunches -------------------------------------------------------


def test_a_relaunch_that_never_served_is_not_tried_again() -> None:
    task = attempt()
    task.keep_address = "h:9"
    failure = TaskFailure("worker:0", "killed by SIGKILL")
    got = relaunch.relaunch_or_fail(
        task, failure, done=0, allowed=3, backend="local", backend_keeps_addresses=True
    )
    assert isinstance(got, TaskFailure)
    assert got.reason == "could not be relaunched at h:9: killed by SIGKILL"


def test_relaunch_or_fail_relaunches_a_worker_and_says_why_a_ps_is_not() -> None:
    failure = TaskFailure("x", "killed by SIGKILL")
    worker = attempt()
    worker.addr = "h:5"
    kw = {"done": 0, "allowed": 1, "backend": "local", "backend_keeps_addresses": True}
    assert relaunch.relaunch_or_fail(worker, failure, **kw) == relaunch.RelaunchAt("h:5", 1, 1)  # type: ignore[arg-type]
    got = relaunch.relaunch_or_fail(attempt("ps:0"), failure, **kw)  # type: ignore[arg-type]
    assert isinstance(got, TaskFailure) and "a ps holds the model's variables" in got.reason
    unasked = relaunch.relaunch_or_fail(worker, failure, **{**kw, "allowed": 0})  # type: ignore[arg-type]
    assert unasked == failure


# -- the verdict's words -----------------------------------------------------------


def test_an_end_is_said_with_its_signal_or_status() -> None:
    assert verdict.describe_exit(Exited("t", 137, signal.SIGKILL)) == "killed by SIGKILL"
    said = verdict.describe_exit(Exited("t", 3, None, signal.SIGTERM))
    assert said == "exited with status 3 (its agent was sent SIGTERM)"
    assert verdict.signal_name(200) == "signal 200"
    assert verdict.describe_end(TaskEnded("t", NOT_PLACED, None, "no offer fits", "", ())) == (
        "no offer fits"
    )
    assert verdict.describe_end(TaskEnded("t", "lost", None, "agent gone", "", ())) == (
        "ended in state lost: agent gone"
    )


def test_the_outcomes_and_the_verdicts_form() -> None:
    tasks = [attempt("ps:0", AttemptState.STOPPED), attempt("worker:0", AttemptState.FINISHED)]
    assert verdict.outcomes(tasks) == {"ps:0": "stopped by tfrun", "worker:0": "exited 0"}
    assert verdict.ends(verdict.outcomes(tasks)) == "worker:0 exited 0; ps:0 stopped by tfrun"
    assert verdict.names("worker", [0, 1, 2]) == "worker:0, worker:1 and worker:2"
    assert verdict.duration(59.94) == "59.9s" and verdict.duration(3725) == "1h02m05s"
    assert verdict.paint("job failed: x", 31, True) == "\x1b[1;31mjob failed\x1b[0m: x"
    assert verdict.paint("job failed: x", 31, False) == "job failed: x"


def test_a_task_tfrun_could_not_reach_is_not_said_to_be_stopped_by_it() -> None:
    """Issue 38: a task tfrun could not hear when the job ended, with no word
    of its end, was not stopped by tfrun; its agent stops it."""
    cut = attempt("worker:1", AttemptState.STOPPED)
    cut.left_unreached = True
    tasks = [attempt("worker:0", AttemptState.FINISHED), cut]
    assert verdict.outcomes(tasks, 30.0) == {
        "worker:0": "exited 0",
        "worker:1": "cut off from tfrun, not stopped by it (it stops itself once it has not "
        "heard tfrun for 30s)",
    }


# -- output ------------------------------------------------------------------------


def test_prefixes_are_coloured_only_for_shown_tasks_where_colour_is_on() -> None:
    router = OutputRouter(io.BytesIO(), ["worker:0"], colour=True, notes_after_output=False)
    assert router.prefix("ps:0") == b"[ps:0] "
    assert router.prefix("worker:0").startswith(b"\x1b[")
    plain = OutputRouter(io.BytesIO(), ["worker:0"], colour=False, notes_after_output=False)
    assert plain.prefix("worker:0") == b"[worker:0] "
    assert human_size(10) == "10 B" and human_size(3 << 20) == "3.0 MiB"


# -- one owner of a job's state ------------------------------------------------------

LAUNCHER = Path(message.__file__).parent
OWNERS = ("loop.py", "attempts.py")
"""The loop owns the job's state; the attempts it holds are records of
attempts.py's. Only these two write an attempt's fields."""


def _launcher_modules(root: Path = LAUNCHER) -> list[Path]:
    """The launcher's modules and the two outside it that drive one."""
    return [
        *sorted(root.glob("*.py")),
        root.parent / "finegrained" / "__init__.py",
        root.parent / "testing" / "fake.py",
    ]


def _fields(path: Path, name: str, *, after_init: bool = False) -> set[str]:
    """The attributes class ``name`` in ``path`` sets on itself (only in
    methods other than ``__init__``, with ``after_init``), and its declared
    (dataclass) fields."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    found = set()
    for method in cls.body:
        if isinstance(method, ast.AnnAssign) and isinstance(method.target, ast.Name):
            found.add(method.target.id)
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if after_init and method.name == "__init__":
            continue
        for node in ast.walk(method):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                found.add(node.attr)
    return found


def _writes(path: Path) -> Iterator[ast.Attribute]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node


def shared_state_writes(root: Path = LAUNCHER) -> list[str]:
    """Writes across the boundary: a field of a field (``self._loop.phase =
    ...``: an object writes only its own fields), and, outside the owners, a
    field of the loop or of an attempt, or an attempt's move."""
    state = {
        field.lstrip("_")
        for field in _fields(root / "loop.py", "Loop") | _fields(root / "attempts.py", "Attempt")
    }
    found = []
    for path in _launcher_modules(root):
        for node in _writes(path):
            through_a_field = not isinstance(node.value, ast.Name)
            others = not (isinstance(node.value, ast.Name) and node.value.id == "self")
            outside = path.parent != root or path.name not in OWNERS
            if through_a_field or (others and outside and node.attr.lstrip("_") in state):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)} = ...")
        if path.parent != root or path.name not in OWNERS:
            found.extend(f"{path.name}:{line}: {call}" for line, call in _moves(path))
    return found


def _moves(path: Path) -> Iterator[tuple[int, str]]:
    """Each ``x.move(...)``: an attempt's state changed."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "move"
        ):
            yield node.lineno, ast.unparse(node)


def private_reads(root: Path = LAUNCHER) -> list[str]:
    """Reads of another object's ``_private`` attribute."""
    found = []
    for path in _launcher_modules(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def public_state(root: Path = LAUNCHER) -> list[str]:
    """Fields that another object could read or write behind the owner's
    back: every field of the loop, and each the launcher changes after it
    is made, must be private (read through a named query)."""
    loop = _fields(root / "loop.py", "Loop")
    launcher = _fields(root / "job.py", "Launcher", after_init=True)
    return sorted(f"{name}" for name in loop | launcher if not name.startswith("_"))


def test_only_the_loop_writes_the_jobs_state() -> None:
    # The launcher once wrote twelve of its loop's fields (its phase, its
    # stopped flag, its cluster definition, its relaunch lists...) and its
    # attempts' fields: the job's state had two writers.
    assert shared_state_writes() == []


def test_no_object_reads_anothers_private_fields() -> None:
    assert private_reads() == []


def test_the_loop_keeps_its_fields_to_itself() -> None:
    # Its state is read through named queries and changed through named
    # methods (begin_stop, deliver_cluster, new_attempt, ...), never reached.
    assert public_state() == []
