"""The backend contract: what every scheduler does, checked on every backend that runs here.

Each case takes the ``harness`` fixture (``plugin.py``), one per backend, and uses only the
public Scheduler API, the Runner and the backend's declared ``capabilities``. A case a backend
cannot support by declaration (a stream, ``since/until``, a retry policy) is skipped for it,
saying which capability; everything else must pass.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.contract.harness import (
    BackendHarness,
    env_dump_code,
    go_code,
    pid_alive,
    read_log,
    wait_for,
    wait_state,
)
from tether.schedulers.api import JOB_KEY, Scheduler
from tether.schedulers.capabilities import Stream
from tether.specs import AppDef, AppState, RetryPolicy, macros
from tether.specs.status import is_terminal

pytestmark = pytest.mark.timeout(300)

ENV_MARK = "CONTRACT-ENV "


def _host_dir(h: BackendHarness) -> Path:
    if h.host_dir is None:
        pytest.skip(f"{h.name}: its programs cannot see a directory of the test (host_dir)")
    return h.host_dir


def _go(h: BackendHarness) -> None:
    (_host_dir(h) / "go").touch()


def _submit(sched: Scheduler[Any], h: BackendHarness, app: AppDef) -> str:
    return sched.schedule(sched.submit_dryrun(app, h.cfg()))


def _env_docs(sched: Scheduler[Any], app_id: str, role: str, k: int) -> dict[str, Any]:
    lines = [x for x in read_log(sched, app_id, role, k) if x.startswith(ENV_MARK)]
    assert len(lines) == 1, f"{role}/{k} log: {read_log(sched, app_id, role, k)}"
    doc: dict[str, Any] = json.loads(lines[0][len(ENV_MARK) :])
    return doc


def _pid_alive(pid: int) -> bool:
    return pid_alive(pid)


# ---- dryrun ------------------------------------------------------------------------------
def test_dryrun_is_pure_and_offline(harness: BackendHarness) -> None:
    """dryrun renders without network and writes nothing; twice gives two fresh requests."""
    sched = harness.offline_scheduler()
    app = AppDef("dry", roles=[harness.role("main", "print('hi')", num_replicas=2)])
    before = harness.state_snapshot(sched)

    def no_network(*a: Any, **kw: Any) -> None:
        raise AssertionError(f"dryrun opened a connection: {a!r}")

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(socket.socket, "connect", no_network)
            mp.setattr(socket, "create_connection", no_network)
            info = sched.submit_dryrun(app, harness.cfg())
            assert str(info)  # it renders
            assert sched.submit_dryrun(app, harness.cfg()).request is not info.request
    finally:
        sched.close()
    assert harness.state_snapshot(sched) == before
    assert app.roles[0].args == ["-c", "print('hi')"]  # the caller's app is not modified


# ---- lifecycle ---------------------------------------------------------------------------
def test_submit_runs_to_succeeded_through_running(harness: BackendHarness) -> None:
    """PENDING/SUBMITTED -> RUNNING -> SUCCEEDED, observed by describe; exit code 0."""
    _host_dir(harness)  # the program waits for a file the test creates
    with harness.open_scheduler() as sched:
        app = AppDef("ok", roles=[harness.role("main", go_code("print('done')"))])
        app_id = _submit(sched, harness, app)
        seen: list[AppState] = []
        wait_state(sched, app_id, lambda d: d.state == AppState.RUNNING, seen=seen)
        _go(harness)
        desc = wait_state(sched, app_id, seen=seen)
        assert desc.state == AppState.SUCCEEDED, desc
        if not harness.capabilities.ui_urls:  # what it declares: no page to link
            assert desc.ui_url is None, desc.ui_url
        order = [AppState.SUBMITTED, AppState.PENDING, AppState.RUNNING, AppState.SUCCEEDED]
        assert [s for s in seen if s in order] == seen, seen
        assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen), seen
        (rs,) = desc.roles_statuses
        assert [r.state for r in rs.replicas] == [AppState.SUCCEEDED]
        assert [r.exit_code for r in rs.replicas] in ([0], [None]), rs.replicas
        assert "done" in read_log(sched, app_id, "main")


def test_failure_has_exit_code_and_native_reason(harness: BackendHarness) -> None:
    """A replica exiting 3 fails the app; its exit code and the native reason are reported."""
    with harness.open_scheduler() as sched:
        code = "import sys; print('about to fail', file=sys.stderr); sys.exit(3)"
        app = AppDef("bad", roles=[harness.role("main", code)])
        app_id = _submit(sched, harness, app)
        desc = wait_state(sched, app_id)
        assert desc.state == AppState.FAILED, desc
        rep = desc.roles_statuses[0].replicas[0]
        assert rep.state == AppState.FAILED
        assert rep.exit_code == 3, rep
        assert "3" in desc.msg and "main" in desc.msg, desc.msg


def test_env_and_args_with_macros(harness: BackendHarness) -> None:
    """${app_id} and ${replica_id} are filled in args and env; role env reaches the program."""
    with harness.open_scheduler() as sched:
        role = harness.role(
            "main", env_dump_code(ENV_MARK), num_replicas=2,
            args=[macros.app_id, f"r={macros.replica_id}", "plain arg with spaces"],
            env={"CONTRACT_WHO": f"replica-{macros.replica_id}", "CONTRACT_PLAIN": "a b'c"},
        )  # fmt: skip
        app_id = _submit(sched, harness, AppDef("macros", roles=[role]))
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        for k in (0, 1):
            doc = _env_docs(sched, app_id, "main", k)
            assert doc["argv"] == [app_id, f"r={k}", "plain arg with spaces"], doc
            assert doc["env"]["CONTRACT_WHO"] == f"replica-{k}"
            assert doc["env"]["CONTRACT_PLAIN"] == "a b'c"


def test_multi_role_multi_replica_environment(harness: BackendHarness) -> None:
    """Each replica sees its role, index, world size and the same rank-0 address."""
    with harness.open_scheduler() as sched:
        app = AppDef("multi", roles=[
            harness.role("trainer", env_dump_code(ENV_MARK), num_replicas=2),
            harness.role("reader", env_dump_code(ENV_MARK), num_replicas=1),
        ])  # fmt: skip
        app_id = _submit(sched, harness, app)
        desc = wait_state(sched, app_id)
        assert desc.state == AppState.SUCCEEDED, desc
        assert {rs.role: len(rs.replicas) for rs in desc.roles_statuses} == {
            "trainer": 2, "reader": 1,
        }  # fmt: skip
        rank0 = set()
        for role, n in (("trainer", 2), ("reader", 1)):
            for k in range(n):
                env = _env_docs(sched, app_id, role, k)["env"]
                assert env["TETHER_ROLE_NAME"] == role
                assert env["TETHER_REPLICA_ID"] == str(k)
                assert env["TETHER_NUM_REPLICAS"] == str(n)
                rank0.add(env["TETHER_RANK0_HOST"])
        assert len(rank0) == 1 and "" not in rank0, rank0
        expected = harness.expected_rank0_host(app_id, app)
        if expected is not None:
            assert rank0 == {expected}


# ---- logs --------------------------------------------------------------------------------
def test_logs_per_replica(harness: BackendHarness) -> None:
    """Each replica's log holds its own lines only; an unknown role or replica is an error."""
    with harness.open_scheduler() as sched:
        code = "import os; print('line-of-' + os.environ['TETHER_REPLICA_ID'])"
        app_id = _submit(
            sched, harness, AppDef("logs", roles=[harness.role("w", code, num_replicas=2)])
        )
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        assert read_log(sched, app_id, "w", 0) == ["line-of-0"]
        assert read_log(sched, app_id, "w", 1) == ["line-of-1"]
        assert read_log(sched, app_id, "w", 1, regex="of-1$") == ["line-of-1"]
        assert read_log(sched, app_id, "w", 1, regex="of-0") == []
        with pytest.raises(ValueError):
            read_log(sched, app_id, "nope", 0)


def test_logs_since_until(harness: BackendHarness) -> None:
    """``since``/``until`` split the log at a time between two lines."""
    if not harness.capabilities.log_time_filter:
        with harness.open_scheduler() as sched, pytest.raises(ValueError, match="time"):
            sched.log_iter("x", "main", since=datetime.now(timezone.utc))
        pytest.skip(f"{harness.name} declares log_time_filter=False (checked it refuses)")
    _host_dir(harness)  # the program waits for a file the test creates
    with harness.open_scheduler() as sched:
        code = go_code("print('after')", before="print('before', flush=True)")
        app_id = _submit(sched, harness, AppDef("times", roles=[harness.role("main", code)]))
        wait_for("the first line", lambda: "before" in read_log(sched, app_id, "main"))
        cut = datetime.now(timezone.utc)
        step = harness.log_time_precision
        if step:  # coarse stamps: cut on the next boundary, once the clock has passed it
            cut = datetime.fromtimestamp((cut.timestamp() // step + 1) * step, timezone.utc)
            wait_for("the clock to pass the cut", lambda: datetime.now(timezone.utc) > cut)
        _go(harness)
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        assert read_log(sched, app_id, "main") == ["before", "after"]
        assert read_log(sched, app_id, "main", since=cut) == ["after"]
        assert read_log(sched, app_id, "main", until=cut) == ["before"]


def test_log_streams(harness: BackendHarness) -> None:
    """Each declared stream returns what it says; an undeclared one is refused."""
    caps = harness.capabilities
    with harness.open_scheduler() as sched:
        # each line in one write: under PYTHONUNBUFFERED print() writes the text and the newline
        # separately, and a backend that merges the two pipes (a terminal, Slurm's output file)
        # may then interleave them mid-line; stream routing is what this case checks
        code = ("import sys; sys.stdout.write('OUT\\n'); sys.stdout.flush(); "
                "sys.stderr.write('ERR\\n'); sys.stderr.flush()")
        app_id = _submit(sched, harness, AppDef("streams", roles=[harness.role("main", code)]))
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        expect = {Stream.STDOUT: ["OUT"], Stream.STDERR: ["ERR"]}
        for stream in Stream:
            if stream not in caps.streams:
                with pytest.raises(ValueError, match=stream.value):
                    read_log(sched, app_id, "main", streams=stream)
                continue
            got = read_log(sched, app_id, "main", streams=stream)
            if stream == Stream.COMBINED:
                assert sorted(got) == ["ERR", "OUT"], got
            else:
                assert got == expect[stream], (stream, got)
        assert sorted(read_log(sched, app_id, "main")) == ["ERR", "OUT"]  # default: combined


def test_log_tail_follows_until_the_replica_ends(harness: BackendHarness) -> None:
    """``should_tail`` yields lines as they come and ends when the replica ends."""
    _host_dir(harness)  # the program waits for a file the test creates
    if not harness.capabilities.log_tail:
        pytest.skip(f"{harness.name} declares log_tail=False")
    with harness.open_scheduler() as sched:
        code = go_code("print('last')", before="print('first', flush=True)")
        app_id = _submit(sched, harness, AppDef("tail", roles=[harness.role("main", code)]))
        wait_state(sched, app_id, lambda d: d.state == AppState.RUNNING)
        got: list[str] = []
        done = threading.Event()

        def follow() -> None:
            try:
                got.extend(read_log(sched, app_id, "main", should_tail=True))
            finally:
                done.set()

        threading.Thread(target=follow, daemon=True).start()
        wait_for("the first line", lambda: "first" in read_log(sched, app_id, "main"))
        assert not done.is_set(), f"the tail ended while the replica runs: {got}"
        _go(harness)
        assert done.wait(120), "the tail did not end with the replica"
        assert got == ["first", "last"], got


# ---- cancel, delete, list ----------------------------------------------------------------
def test_cancel_reaches_every_replica_is_idempotent_and_keeps_the_record(
    harness: BackendHarness,
) -> None:
    """cancel stops every replica's process, twice is fine, and the app stays CANCELLED."""
    shared = _host_dir(harness)
    code = (
        "import os, time\n"
        "d = os.environ['CONTRACT_DIR']\n"
        "name = os.environ['TETHER_ROLE_NAME'] + '-' + os.environ['TETHER_REPLICA_ID']\n"
        "open(os.path.join(d, 'pid-' + name), 'w').write(str(os.getpid()))\n"
        "time.sleep(3600)\n"
    )
    with harness.open_scheduler() as sched:
        app = AppDef("cancel", roles=[
            harness.role("a", code, num_replicas=2), harness.role("b", code),
        ])  # fmt: skip
        app_id = _submit(sched, harness, app)
        names = ["a-0", "a-1", "b-0"]

        def pid_of(n: str) -> int:
            path = shared / f"pid-{n}"
            text = path.read_text().strip() if path.exists() else ""
            return int(text) if text else 0

        wait_for("every replica started", lambda: all(pid_of(n) for n in names))
        pids = {n: pid_of(n) for n in names}
        sched.cancel(app_id)
        sched.cancel(app_id)  # idempotent
        desc = wait_state(sched, app_id)
        assert desc.state == AppState.CANCELLED, desc
        wait_for("every replica stopped", lambda: not any(
            harness.program_alive(sched, app_id, p) for p in pids.values()))
        for rs in desc.roles_statuses:
            for rep in rs.replicas:
                assert is_terminal(rep.state), rep
        sched.cancel(app_id)  # after the end: still a no-op
        again = sched.describe(app_id)
        assert again is not None and again.state == AppState.CANCELLED
        assert app_id in [a.app_id for a in sched.list()]
        sched.cancel("no-such-app-" + app_id.replace(":", "-"))  # unknown: no error


def test_cancel_of_a_finished_app_changes_nothing(harness: BackendHarness) -> None:
    """Cancelling a SUCCEEDED app leaves it SUCCEEDED."""
    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, AppDef("fin", roles=[harness.role("m", "pass")]))
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        sched.cancel(app_id)
        desc = sched.describe(app_id)
        assert desc is not None and desc.state == AppState.SUCCEEDED


def test_list_and_delete(harness: BackendHarness) -> None:
    """list shows the app with its name and state; delete removes it, idempotently."""
    if not harness.capabilities.list_apps:
        pytest.skip(f"{harness.name} declares list_apps=False")
    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, AppDef("listed", roles=[harness.role("m", "pass")]))
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        (entry,) = [a for a in sched.list() if a.app_id == app_id]
        assert entry.state == AppState.SUCCEEDED
        assert "listed" in (entry.name or entry.app_id)
        sched.delete(app_id)
        assert sched.describe(app_id) is None
        assert app_id not in [a.app_id for a in sched.list()]
        sched.delete(app_id)  # idempotent


def test_delete_of_a_running_app_stops_it(harness: BackendHarness) -> None:
    """delete cancels a running app first, then forgets it."""
    _host_dir(harness)  # the program waits for a file the test creates
    with harness.open_scheduler() as sched:
        app_id = _submit(
            sched, harness, AppDef("delrun", roles=[harness.role("m", go_code("pass"))])
        )
        wait_state(sched, app_id, lambda d: d.state == AppState.RUNNING)
        sched.delete(app_id)
        wait_for("the app to be gone", lambda: sched.describe(app_id) is None)


# ---- retries -----------------------------------------------------------------------------
EXPECTED_RUNS = {
    RetryPolicy.REPLICA: {"a-0": 1, "a-1": 2, "b-0": 1},
    RetryPolicy.ROLE: {"a-0": 2, "a-1": 2, "b-0": 1},
    RetryPolicy.APPLICATION: {"a-0": 2, "a-1": 2, "b-0": 2},
}
RETRY_CODE = go_code(
    "sys.exit(0)",
    before=(
        "import os, sys\n"
        "d = os.environ['CONTRACT_DIR']\n"
        "name = os.environ['TETHER_ROLE_NAME'] + '-' + os.environ['TETHER_REPLICA_ID']\n"
        "runs = os.path.join(d, 'runs-' + name)\n"
        "first = not os.path.exists(runs)\n"
        "with open(runs, 'a') as f:\n"
        "    f.write('x')\n"
        "if first and name == 'a-1':\n"
        "    # fail once every other replica ran (so a restart of them is visible)\n"
        "    while not all(os.path.exists(os.path.join(d, 'runs-' + o)) for o in ('a-0', 'b-0')):\n"
        "        time.sleep(0.02)\n"
        "    sys.exit(7)\n"
    ),
)


@pytest.mark.parametrize("policy", list(RetryPolicy), ids=lambda p: p.value)
def test_retry_policy(harness: BackendHarness, policy: RetryPolicy) -> None:
    """Replica a-1 fails once: the policy restarts exactly what it names, then all succeed."""
    if policy not in harness.capabilities.retries:
        with harness.open_scheduler() as sched, pytest.raises(ValueError, match=policy.value):
            role = harness.role("a", "pass", max_retries=1, retry_policy=policy)
            sched.submit_dryrun(AppDef("r", roles=[role]), harness.cfg())
        pytest.skip(f"{harness.name} does not support {policy.value} (checked dryrun refuses)")
    shared = _host_dir(harness)
    app = AppDef("retry", roles=[
        harness.role("a", RETRY_CODE, num_replicas=2, max_retries=1, retry_policy=policy),
        harness.role("b", RETRY_CODE, max_retries=1, retry_policy=policy),
    ])  # fmt: skip
    expected = EXPECTED_RUNS[policy]

    def runs() -> dict[str, int]:
        return {n: len((shared / f"runs-{n}").read_text()) if (shared / f"runs-{n}").exists() else 0
                for n in expected}  # fmt: skip

    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, app)
        wait_state(sched, app_id, lambda d: runs() == expected or is_terminal(d.state))
        assert runs() == expected
        _go(harness)
        desc = wait_state(sched, app_id)
        assert desc.state == AppState.SUCCEEDED, desc
        assert runs() == expected, "something ran again after the retry"
        assert desc.num_restarts >= 1, desc


FAIL_TIMES_CODE = (
    "import os, sys\n"
    "d = os.environ['CONTRACT_DIR']\n"
    "runs = os.path.join(d, 'runs-' + os.environ['TETHER_ROLE_NAME'])\n"
    "with open(runs, 'a') as f:\n"
    "    f.write('x')\n"
    "with open(runs) as f:\n"
    "    n = len(f.read())\n"
    "sys.exit(7 if n <= int(sys.argv[1]) else 0)\n"
)


@pytest.mark.parametrize("fails", [2, 3], ids=["within_budget", "beyond_budget"])
def test_application_retries_are_the_apps_budget(harness: BackendHarness, fails: int) -> None:
    """APPLICATION roles with different max_retries: the app's budget is the largest (2),
    counted for the app. Role b (max_retries=0) fails ``fails`` times: twice, the app restarts
    twice and succeeds; three times, the third failure is final (b ran 3 times)."""
    policy = RetryPolicy.APPLICATION
    app = AppDef("appretry", roles=[
        harness.role("a", "pass", max_retries=2, retry_policy=policy),
        harness.role("b", FAIL_TIMES_CODE, args=[str(fails)], max_retries=0,
                     retry_policy=policy),
    ])  # fmt: skip
    if policy not in harness.capabilities.retries:
        with harness.open_scheduler() as sched, pytest.raises(ValueError, match=policy.value):
            sched.submit_dryrun(app, harness.cfg())
        pytest.skip(f"{harness.name} does not support {policy.value} (checked dryrun refuses)")
    shared = _host_dir(harness)
    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, app)
        desc = wait_state(sched, app_id)
        runs_b = len((shared / "runs-b").read_text())
        if fails == 2:
            assert desc.state == AppState.SUCCEEDED, desc
            assert runs_b == 3 and desc.num_restarts == 2, (runs_b, desc)
        else:
            assert desc.state == AppState.FAILED, desc
            assert runs_b == 3, f"b ran {runs_b} times: 1 + the app's 2 restarts"


def test_retries_exhausted_fail_the_app(harness: BackendHarness) -> None:
    """A replica failing more often than max_retries fails the app with its exit code."""
    policy = RetryPolicy.REPLICA
    if policy not in harness.capabilities.retries:
        pytest.skip(f"{harness.name} does not support {policy.value}")
    code = "import sys; sys.exit(5)"
    with harness.open_scheduler() as sched:
        role = harness.role("m", code, max_retries=1, retry_policy=policy)
        app_id = _submit(sched, harness, AppDef("exhaust", roles=[role]))
        desc = wait_state(sched, app_id)
        assert desc.state == AppState.FAILED, desc
        assert desc.roles_statuses[0].replicas[0].exit_code == 5


# ---- identity ----------------------------------------------------------------------------
def test_same_job_key_reattaches(harness: BackendHarness) -> None:
    """Runner.run_or_attach with the same key while the job runs returns the same job."""
    _host_dir(harness)  # the program waits for a file the test creates
    if not harness.capabilities.job_identity:
        pytest.skip(f"{harness.name} declares job_identity=False")
    app = AppDef("ident", roles=[harness.role("m", go_code("pass"))])
    key = f"contract-{harness.name}-{os.getpid()}"
    with harness.runner() as runner:
        first = runner.run_or_attach(app, harness.name, harness.cfg(), job_key=key)
        second = runner.run_or_attach(app, harness.name, harness.cfg(), job_key=key)
        assert not first.reattached and second.reattached
        assert second.app_handle == first.app_handle
        _go(harness)
        status = runner.wait(first.app_handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        third = runner.run_or_attach(app, harness.name, harness.cfg(), job_key=key)
        assert third.reattached and third.app_handle == first.app_handle  # succeeded: kept
        with harness.open_scheduler() as sched:
            (found,) = sched.find_jobs(key)
            assert first.app_handle.endswith(found.app_id)
            desc = sched.describe(found.app_id)
            assert desc is not None and desc.job_key == key


def test_job_key_is_recorded(harness: BackendHarness) -> None:
    """The JOB_KEY metadata is recorded natively and found by find_jobs, oldest first."""
    if not harness.capabilities.job_identity:
        pytest.skip(f"{harness.name} declares job_identity=False")
    key = f"k-{os.getpid()}"
    with harness.open_scheduler() as sched:
        ids = []
        for _ in range(2):  # failing: a backend may re-attach to a running or succeeded job
            code = "import sys; sys.exit(1)"
            app = AppDef("keyed", roles=[harness.role("m", code)], metadata={JOB_KEY: key})
            ids.append(_submit(sched, harness, app))
            wait_state(sched, ids[-1])
        assert [a.app_id for a in sched.find_jobs(key)] == ids
        assert sched.find_jobs(key + "-other") == []


# ---- reads are reads ---------------------------------------------------------------------
def _describe_many(sched: Scheduler[Any], app_id: str, role: str, n: int = 100) -> None:
    for _ in range(n):
        sched.describe(app_id)
        sched.list()
        list(sched.log_iter(app_id, role, 0))


READY_CODE = (
    "open(os.path.join(os.environ['CONTRACT_DIR'], 'ready-' + os.environ['TETHER_REPLICA_ID']),"
    " 'w').close()"
)
"""Marks that the replica's program runs (its log files exist): a backend may report a
replica RUNNING before it has started it (Slurm: the job runs, its ``srun`` step not yet)."""


def test_describe_has_no_side_effects_while_running_and_after(harness: BackendHarness) -> None:
    """describe, list and log_iter 100 times change nothing, during a run and after it."""
    shared = _host_dir(harness)  # the program waits for a file the test creates
    with harness.open_scheduler() as sched:
        code = go_code("pass", before=READY_CODE)
        app = AppDef("pure", roles=[harness.role("m", code, num_replicas=2)])
        app_id = _submit(sched, harness, app)
        wait_state(sched, app_id, lambda d: all(
            r.state == AppState.RUNNING for rs in d.roles_statuses for r in rs.replicas
        ))  # fmt: skip
        # every replica started (under load a step can start seconds after the job runs,
        # creating its log files then: the backend's own change, not describe's)
        wait_for("both replicas to start",
                 lambda: all((shared / f"ready-{k}").exists() for k in (0, 1)))  # fmt: skip
        settled = _settled(harness, sched, app_id)
        _describe_many(sched, app_id, "m")
        assert harness.fingerprint(sched, app_id) == settled
        _go(harness)
        assert wait_state(sched, app_id).state == AppState.SUCCEEDED
        settled = _settled(harness, sched, app_id)
        _describe_many(sched, app_id, "m")
        assert harness.fingerprint(sched, app_id) == settled


def _settled(h: BackendHarness, sched: Scheduler[Any], app_id: str) -> object:
    """The fingerprint once the backend stopped changing the app by itself (two equal reads
    1 s apart; describe is not called meanwhile)."""
    prev = h.fingerprint(sched, app_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(1.0)
        cur = h.fingerprint(sched, app_id)
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError(f"{app_id} kept changing by itself: {prev!r}")


def test_describe_does_not_apply_reconciled_retries(harness: BackendHarness) -> None:
    """A failed replica with a reconciled retry due: describe leaves it, reconcile restarts it."""
    caps = harness.capabilities
    if not caps.reconciled_retries:
        pytest.skip(f"{harness.name} applies every retry policy natively")
    policy = sorted(caps.reconciled_retries, key=lambda p: p.value)[0]
    shared = _host_dir(harness)
    code = (
        "import os, sys\n"
        "p = os.path.join(os.environ['CONTRACT_DIR'], 'runs')\n"
        "first = not os.path.exists(p)\n"
        "open(p, 'a').write('x')\n"
        "sys.exit(4 if first else 0)\n"
    )
    with harness.open_scheduler() as sched:
        role = harness.role("m", code, max_retries=1, retry_policy=policy)
        app_id = _submit(sched, harness, AppDef("norestart", roles=[role]))
        wait_for("the first attempt", lambda: (shared / "runs").exists())
        # the failure becomes native state by itself (no describe, no reconcile meanwhile)
        settled = _settled(harness, sched, app_id)
        for _ in range(100):
            assert sched.describe(app_id) is not None
        assert harness.fingerprint(sched, app_id) == settled
        assert (shared / "runs").read_text() == "x", "describe restarted the replica"
        desc = wait_state(sched, app_id)  # reconciles
        assert desc.state == AppState.SUCCEEDED, desc
        assert (shared / "runs").read_text() == "xx"


def test_stop_signal_reaches_the_program(harness: BackendHarness) -> None:
    """cancel gives the program SIGTERM first (it can clean up) before it is killed."""
    shared = _host_dir(harness)
    code = (
        "import os, signal, sys, time\n"
        "d = os.environ['CONTRACT_DIR']\n"
        "def bye(*_):\n"
        "    open(os.path.join(d, 'termed'), 'w').write('1')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "open(os.path.join(d, 'ready'), 'w').write('1')\n"
        "time.sleep(3600)\n"
    )
    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, AppDef("term", roles=[harness.role("m", code)]))
        wait_for("the program to start", lambda: (shared / "ready").exists())
        sched.cancel(app_id)
        try:
            wait_for("SIGTERM handled", lambda: (shared / "termed").exists())
        except AssertionError as e:  # say what the backend did with the cancel
            desc = sched.describe(app_id)
            try:
                lines = list(sched.log_iter(app_id, "m", 0))[-20:]
            except Exception as le:  # diagnostics only
                lines = [f"(no log: {le})"]
            raise AssertionError(
                f"{e}; app state {desc.state if desc else None}, msg "
                f"{desc.msg if desc else None!r}; last log lines: {''.join(lines)!r}"
            ) from None
        assert wait_state(sched, app_id).state == AppState.CANCELLED


def test_describe_after_the_controller_died_is_a_read(harness: BackendHarness) -> None:
    """When tether's controller of an app died, describe still only reads; reconcile cleans up."""
    shared = _host_dir(harness)
    code = (
        "import os, time\n"
        "open(os.path.join(os.environ['CONTRACT_DIR'], 'pid'), 'w').write(str(os.getpid()))\n"
        "time.sleep(3600)\n"
    )
    with harness.open_scheduler() as sched:
        app_id = _submit(sched, harness, AppDef("orphan", roles=[harness.role("m", code)]))
        pid = int(wait_for("the program to start", lambda: (shared / "pid").exists()
                           and (shared / "pid").read_text().strip()))  # fmt: skip
        if not harness.kill_controller(sched, app_id):
            sched.cancel(app_id)
            pytest.skip(f"{harness.name}: tether runs no controller of its own for an app")
        alive = _pid_alive(pid)
        before = harness.fingerprint(sched, app_id)
        for _ in range(100):
            assert sched.describe(app_id) is not None
        assert harness.fingerprint(sched, app_id) == before, "describe changed the app"
        assert _pid_alive(pid) == alive, "describe stopped the app's process"
        desc = wait_state(sched, app_id)  # reconcile finishes the orphaned app
        assert desc.state == AppState.FAILED, desc
        wait_for("the orphaned process to be stopped", lambda: not _pid_alive(pid))
