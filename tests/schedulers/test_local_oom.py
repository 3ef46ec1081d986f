"""``local_cwd`` when the supervisor runs out of memory (``RLIMIT_AS``).

The address-space limit of a running supervisor is lowered (``prlimit``) to the address
space it uses, so any allocation that needs new memory fails (``MemoryError``). Its replicas
print lines, one of them a 3 MB line without newline, and one replica fails and must restart:
the replicas keep running, the app stays RUNNING, the output is pumped (the long line is
split in ``combined.log`` instead of kept in memory, nothing is lost), and once the limit is
restored and the replicas end the app SUCCEEDED with a message saying what happened.

Before: the first pipe read (a 1 MiB buffer allocated per read) raised ``MemoryError``, the
supervisor crashed, stopped every replica and recorded the app FAILED.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tests.schedulers.local_started import wait_started
from tether.schedulers.api import DescribeAppResponse
from tether.schedulers.local.proctable import pid_alive
from tether.schedulers.local.scheduler import LocalScheduler, create_scheduler
from tether.specs import AppDef, AppState, RetryPolicy, Role

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs /proc")

LONG_LINE = 3_000_000
"""Bytes of the line without newline each busy replica prints under the limit."""


def wait_for(
    s: LocalScheduler, app_id: str, done: Callable[[DescribeAppResponse], bool]
) -> DescribeAppResponse:
    """Polls ``describe`` until ``done`` (bounded: 60 s)."""
    for _ in range(240):
        d = s.describe(app_id)
        assert d is not None
        if done(d):
            return d
        s.wait_for_change(app_id, 0.25)
    raise AssertionError(f"{app_id}: not there after 60 s: {s.describe(app_id)}")


def wait_until(done: Callable[[], bool], what: str) -> None:
    """Polls ``done`` (bounded: 60 s)."""
    for _ in range(600):
        if done():
            return
        time.sleep(0.1)
    raise AssertionError(f"not there after 60 s: {what}")


def burst_logged(stdout: str, sup: int) -> bool:
    """Whether the replica's ``stdout`` log has the burst (or the supervisor ``sup`` died).

    The log is made with the replica's first byte: until then it is not there."""
    log = Path(stdout)
    return (log.exists() and "burst done" in log.read_text()) or not pid_alive(sup)


def vm_size(pid: int) -> int:
    """The address space ``pid`` uses, in bytes (``VmSize`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmSize for pid {pid}")


def test_out_of_memory_the_supervisor_degrades_and_replicas_keep_running(
    tmp_path: Path,
) -> None:
    s = create_scheduler("oom")
    burst, go, release, flag = (tmp_path / n for n in ("burst", "go", "release", "failed"))
    # w: prints lines; once told, a 3 MB line without newline, then "burst done"
    busy = (
        f"b=0; while [ ! -e {release} ]; do echo tick; "
        f"if [ $b = 0 ] && [ -e {burst} ]; then b=1; "
        f"head -c {LONG_LINE} /dev/zero | tr '\\0' x; echo; echo 'burst done'; fi; "
        f"sleep 0.05; done; echo done"
    )
    # f: fails once (when told), then succeeds
    once = (f"[ -e {flag} ] && exit 0; touch {flag}; "
            f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3")
    app = AppDef("oom", roles=[
        Role("w", entrypoint="sh", args=["-c", busy], num_replicas=2),
        Role("f", entrypoint="sh", args=["-c", once], max_retries=3,
             retry_policy=RetryPolicy.REPLICA),
    ])
    app_id = s.schedule(s.submit_dryrun(app, {"grace_period": 0.5}))
    rec = wait_started(s.store, app_id)
    assert rec.supervisor_pid is not None
    sup = rec.supervisor_pid
    workers = [r for r in rec.replicas if r.role == "w"]
    assert all(r.pid is not None for r in workers)
    before = resource.prlimit(sup, resource.RLIMIT_AS)
    limit = vm_size(sup)
    # not one byte more address space: every allocation that needs new memory fails
    resource.prlimit(sup, resource.RLIMIT_AS, (limit, before[1]))
    try:
        burst.touch()
        go.touch()
        for r in workers:  # the long line goes through the supervisor under the limit
            wait_until(partial(burst_logged, r.stdout, sup), f"{r.stdout} has the burst")
        d = wait_for(s, app_id, lambda d: d.state.is_terminal() or all(
            r.state == AppState.SUCCEEDED for rs in d.roles_statuses if rs.role == "f"
            for r in rs.replicas))
        assert d.state == AppState.RUNNING, d
        assert pid_alive(sup), "the supervisor died"
        for r in workers:
            assert r.pid is not None and pid_alive(r.pid, r.start_time), f"{r.role}[{r.replica_id}]"
        states = [r.state for rs in d.roles_statuses if rs.role == "w" for r in rs.replicas]
        assert states == [AppState.RUNNING, AppState.RUNNING]
        assert resource.prlimit(sup, resource.RLIMIT_AS)[0] == limit  # still limited
    finally:
        if Path(f"/proc/{sup}").exists():
            resource.prlimit(sup, resource.RLIMIT_AS, before)
        release.touch()
    d = wait_for(s, app_id, lambda d: d.state.is_terminal())
    assert d.state == AppState.SUCCEEDED, d
    rec = s.store.load(app_id)
    assert rec is not None
    f0 = rec.replica("f", 0)
    assert f0 is not None and f0.attempts == 2 and f0.exit_code == 0
    sup_log = Path(rec.supervisor_log).read_text()
    assert "the supervisor ran out of memory" in sup_log and "ulimit -v" in sup_log, sup_log
    assert f"address-space limit (soft / hard) {limit} / " in sup_log
    split = 0
    for wr in (rec.replica("w", 0), rec.replica("w", 1)):
        assert wr is not None and wr.exit_code == 0
        out = Path(wr.stdout).read_text()
        assert out.count("x") == LONG_LINE and out.endswith("done\n")  # nothing lost
        comb = Path(wr.combined).read_text()
        assert comb.count("x") == LONG_LINE and "burst done\n" in comb
        pieces = [ln for ln in comb.splitlines() if ln.startswith("x")]
        split += len(pieces) - 1
        assert len(pieces) > 1, "the long line was not split: the limit did not bite"
        assert "line(s) of combined.log were split: the supervisor ran out of memory" in wr.msg
    msgs = [r.msg for rs in d.roles_statuses if rs.role == "w" for r in rs.replicas]
    assert all("ran out of memory" in m for m in msgs), msgs
    print(f"\n[oom] supervisor limited to {limit} bytes of address space: 2 replicas kept "
          f"running, {split} split(s) of two {LONG_LINE}-byte lines, 0 bytes lost, "
          f"1 restart, app {d.state.name}")
