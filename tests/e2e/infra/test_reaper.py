"""Test services die with the test process that started them (tests/e2e/infra/reaper.py).

Real processes: a stand-in for a pytest run starts a "service" (a shell and a daemon it
forks, in one process group) through :func:`start_service`, then is SIGKILLed, as a run
killed at its timeout is. The service must go away by itself (its watchdog), and when the
watchdog was killed too, the next session's start (:func:`reap_at_session_start`, what
``pytest_sessionstart`` calls) must stop it.

The Kubernetes pieces are checked through the code that starts them, with stand-in commands
instead of the kube binaries (which take seconds to start): the control plane's
``KubeCluster._spawn``, the test kubelet's pod processes (``PodExecutor``), and a real node's
directory with a process outside its group (as containerd's shims are).
"""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.infra import kube_reap
from tests.e2e.infra.reaper import (
    group_alive,
    reap_at_session_start,
    reap_leftovers,
    reaped_here_or_elsewhere,
)

OWNER = textwrap.dedent("""
    import sys, time
    from tests.e2e.infra.reaper import start_service, watchdog_pid
    proc = start_service(["sh", "-c", "sleep 600 & sleep 600; wait", sys.argv[1]], "stand-in")
    print(proc.pid, watchdog_pid(proc), flush=True)
    time.sleep(600)
""")


def start_owner(script: str = OWNER, *args: str) -> tuple[subprocess.Popen[str], int, int]:
    """A stand-in test process with a service; returns it, the service's group id and the
    pid of the service's watchdog (the first two numbers ``script`` prints)."""
    owner, numbers = start_owner_numbers(script, *args)
    return owner, numbers[0], numbers[1]


def start_owner_numbers(script: str, *args: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A stand-in test process running ``script``; returns it and the numbers it prints."""
    label = f"tether-reaper-test-{uuid.uuid4().hex}"
    owner = subprocess.Popen([sys.executable, "-c", script, label, *args],
                             stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert owner.stdout is not None
    numbers = [int(n) for n in owner.stdout.readline().split()]
    assert group_alive(numbers[0])
    return owner, numbers


def kill_owner(owner: subprocess.Popen[str], watchdog: int | None) -> None:
    """SIGKILLs the stand-in test process, and first its service's watchdog when given."""
    if watchdog is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watchdog, signal.SIGKILL)
    owner.kill()
    owner.wait()
    if watchdog is not None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(watchdog, 0)


def wait_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 60
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not group_alive(pgid)


def test_a_service_dies_with_its_killed_test_process() -> None:
    owner, pgid, _ = start_owner()
    owner.kill()
    owner.wait()
    assert wait_gone(pgid), "the service outlived its test process"
    reap_leftovers()  # its marker is dropped; nothing else to stop


def test_a_session_start_reaps_what_a_killed_run_and_its_watchdog_left() -> None:
    owner, pgid, watchdog = start_owner()
    with contextlib.suppress(ProcessLookupError):
        os.kill(watchdog, signal.SIGKILL)
    owner.kill()
    owner.wait()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(watchdog, 0)
    assert group_alive(pgid), "nothing stopped it yet"
    try:
        reaped = [r[r.rfind("(pgid "):] for r in reap_leftovers()]
        assert reaped_here_or_elsewhere(f"(pgid {pgid})", reaped, lambda: not group_alive(pgid))
        assert wait_gone(pgid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_running_test_process_keeps_its_service() -> None:
    owner, pgid, _ = start_owner()
    try:
        assert not any(f"(pgid {pgid})" in r for r in reap_leftovers())
        assert group_alive(pgid)
    finally:
        owner.kill()
        owner.wait()
    assert wait_gone(pgid)


# ---- the Kubernetes pieces -----------------------------------------------------------------
CONTROL_PLANE_OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.e2e.infra.kube import KubeBinaries, KubeCluster
    from tests.e2e.infra.reaper import watchdog_pid
    no = Path("/bin/false")  # nothing of the real binaries runs: _spawn gets a stand-in
    cluster = KubeCluster(KubeBinaries(no, no, no), workdir=sys.argv[2])
    argv = ["sh", "-c", "sleep 600 & sleep 600; wait", sys.argv[1]]
    proc = cluster._spawn("kube-apiserver", argv)
    print(proc.pid, watchdog_pid(proc), flush=True)
    time.sleep(600)
""")

POD_OWNER = textwrap.dedent("""
    import sys, time
    from kubernetes.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
    from tests.e2e.infra.kubelet_exec import PodExecutor
    from tests.e2e.infra.reaper import watchdog_pid
    pod = V1Pod(metadata=V1ObjectMeta(name="sleeper", uid="u1"), spec=V1PodSpec(containers=[
        V1Container(name="c", command=["sh", "-c", "sleep 600 & sleep 600; wait", sys.argv[1]])]))
    executor = PodExecutor()
    executor.start(pod, lambda rc: None)
    popen = executor._procs["u1"].popen
    print(popen.pid, watchdog_pid(popen), flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("watchdog_killed", [False, True], ids=["owner", "owner+watchdog"])
def test_the_kube_control_plane_dies_with_its_killed_test_process(
    tmp_path: Path, watchdog_killed: bool
) -> None:
    owner, pgid, watchdog = start_owner(CONTROL_PLANE_OWNER, str(tmp_path))
    kill_owner(owner, watchdog if watchdog_killed else None)
    try:
        if watchdog_killed:  # PR_SET_PDEATHSIG ends the leader only; the group lives on
            assert group_alive(pgid), "nothing stopped it yet"
            assert reaped_here_or_elsewhere(f"kube-apiserver (pgid {pgid})",
                                            reap_at_session_start(),
                                            lambda: not group_alive(pgid))  # fmt: skip
        assert wait_gone(pgid), "the control plane outlived its test process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("watchdog_killed", [False, True], ids=["owner", "owner+watchdog"])
def test_the_test_kubelets_pods_die_with_its_killed_test_process(watchdog_killed: bool) -> None:
    owner, pgid, watchdog = start_owner(POD_OWNER)
    kill_owner(owner, watchdog if watchdog_killed else None)
    try:
        if watchdog_killed:
            assert group_alive(pgid), "nothing stopped it yet"
            assert reaped_here_or_elsewhere(f"pod sleeper (pgid {pgid})",
                                            reap_at_session_start(),
                                            lambda: not group_alive(pgid))  # fmt: skip
        assert wait_gone(pgid), "the pod's processes outlived the test process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


NODE_OWNER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from tests.e2e.infra import kube_reap
    from tests.e2e.infra.reaper import start_service, watchdog_pid
    node = Path(sys.argv[2])
    node.mkdir(parents=True)
    kube_reap.write_owner(node)
    # containerd's stand-in, started as RealNode._spawn starts it (its group dies with us)
    proc = start_service(["sh", "-c", "sleep 600 & sleep 600; wait", str(node)], "containerd")
    # a shim's stand-in: in a session of its own, outside every group a watchdog stops
    shim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                             str(node / "shim")], start_new_session=True)
    print(proc.pid, watchdog_pid(proc), shim.pid, flush=True)
    time.sleep(600)
""")


def test_a_session_start_tears_down_a_real_node_a_killed_run_left() -> None:
    node = kube_reap.NODES_ROOT / f"tether-reaper-test-{uuid.uuid4().hex[:8]}"
    owner, (pgid, watchdog, shim) = start_owner_numbers(NODE_OWNER, str(node))
    kill_owner(owner, watchdog)
    try:
        assert kube_reap.owner_alive(node) is False
        assert not gone(shim), "the shim outlives its test process"
        reaped = reap_at_session_start()
        assert reaped_here_or_elsewhere(f"kube node {node.name}", reaped,
                                        lambda: gone(shim) and not node.exists())  # fmt: skip
        assert gone(shim), "the shim outlived the next session's start"
        assert wait_gone(pgid) and not node.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(shim, signal.SIGKILL)
        kube_reap.teardown_dir(node)


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_every_process_the_infrastructure_starts_is_guarded() -> None:
    # a service started with a bare Popen has no watchdog and no marker: a killed run leaves
    # it running (as sshd, slurmrestd, the control plane, a node and pods were)
    infra = Path(__file__).parent
    bare = []
    for path in sorted(infra.glob("*.py")):
        if path.name == "reaper.py" or path.name.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Popen"):
                bare.append(f"{path.name}:{node.lineno}")
    assert bare == [], f"start these through reaper.start_service: {bare}"
