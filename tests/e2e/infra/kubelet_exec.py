"""Runs a pod's container command as a local process, for :class:`~.kubelet.FakeKubelet`.

With ``FakeKubelet(..., executor=PodExecutor(...))`` a pod whose behaviour is
:meth:`~.kubelet.Behaviour.run_process` really runs: the test kubelet starts the first
container's ``command + args`` on this machine (the image is ignored: the program must exist
here, e.g. ``sys.executable``), with the container's literal ``env`` values on top of a base
environment, in its own process group (started through
:func:`tests.e2e.infra.reaper.start_service`, so it dies with the test process). Its
combined stdout and stderr become the container log (each line stamped with the time it was
read), and the pod terminates with the process's exit code (``128 + signal`` when a signal
ended it). Deleting the pod stops the process group
(SIGTERM, SIGKILL after a grace period), as a kubelet stops a container.

This is how the backend contract suite and the portability matrix run real programs on the
``kubernetes`` backend without a container runtime: everything above the node (apiserver,
Job controller, tether's scheduler) is real; only "the container" is a host process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kubernetes.client import V1Pod

from tests.e2e.infra.reaper import forget, start_service

STOP_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL when a pod is deleted."""


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes] | None
    lines: list[tuple[datetime, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class PodExecutor:
    """Starts, logs and stops the local processes standing in for pods' containers.

    Args:
        base_env: The environment every process starts with (default: ``PATH``, ``HOME``,
            ``LANG`` and ``PYTHONPATH`` of this process); the container's ``env`` wins.
        cwd: Working directory of containers without ``workingDir`` (default: a temp dir).
    """

    def __init__(self, base_env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        if base_env is None:
            keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "TMPDIR")
            base_env = {k: os.environ[k] for k in keep if k in os.environ}
        self.base_env = dict(base_env)
        self.cwd = cwd or Path(tempfile.gettempdir())
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()

    def start(self, pod: V1Pod, on_exit: Callable[[int], None]) -> None:
        """Starts the pod's first container as a process; ``on_exit(code)`` when it ends.

        Args:
            pod: The pod (its ``uid`` keys the process).
            on_exit: Called from a reader thread with the exit code.
        """
        ctr = pod.spec.containers[0]
        argv = [*(ctr.command or []), *(ctr.args or [])]
        env = dict(self.base_env)
        for var in ctr.env or []:
            if var.value is not None:
                env[var.name] = var.value
        cwd = ctr.working_dir or str(self.cwd)
        try:
            # guarded: the pod's group dies with the test process (or at the next session's
            # start), as a node's containers do
            popen = start_service(
                argv,
                f"pod {pod.metadata.name}",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
            )
        except OSError as err:  # like a container whose command does not exist
            proc = _Proc(None)
            proc.lines.append((datetime.now(timezone.utc), f"exec {argv!r} failed: {err}"))
            with self._lock:
                self._procs[pod.metadata.uid] = proc
            on_exit(127)
            return
        proc = _Proc(popen)
        with self._lock:
            self._procs[pod.metadata.uid] = proc
        threading.Thread(
            target=self._read, args=(proc, on_exit), name=f"pod-{pod.metadata.name}", daemon=True
        ).start()

    @staticmethod
    def _read(proc: _Proc, on_exit: Callable[[int], None]) -> None:
        assert proc.popen is not None and proc.popen.stdout is not None
        for raw in proc.popen.stdout:
            text = raw.decode(errors="replace").rstrip("\n")
            with proc.lock:
                proc.lines.append((datetime.now(timezone.utc), text))
        # drop the guard once the process has ended but before it is reaped, while its pid
        # (which keys the guard) cannot belong to another process
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, proc.popen.pid, os.WEXITED | os.WNOWAIT)
        forget(proc.popen)
        rc = proc.popen.wait()
        proc.popen.stdout.close()
        on_exit(128 - rc if rc < 0 else rc)

    def lines(self, uid: str) -> list[tuple[datetime, str]] | None:
        """The log so far of the pod's process, or None when it has none.

        Args:
            uid: The pod's uid.

        Returns:
            ``(time read, line)`` pairs.
        """
        with self._lock:
            proc = self._procs.get(uid)
        if proc is None:
            return None
        with proc.lock:
            return list(proc.lines)

    def kill(self, uid: str) -> None:
        """Stops the pod's process group: SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`.

        Args:
            uid: The pod's uid.
        """
        with self._lock:
            proc = self._procs.get(uid)
        if proc is None or proc.popen is None or proc.popen.poll() is not None:
            return
        pid = proc.popen.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        try:
            proc.popen.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(STOP_GRACE_S)

    def kill_all(self) -> None:
        """Stops every process still running (the kubelet stops)."""
        with self._lock:
            uids = list(self._procs)
        for uid in uids:
            self.kill(uid)
