"""The tether launcher that runs inside a Ray job (the job's entrypoint).

``python -m tether.schedulers.ray.driver`` reads the replica plan that
:mod:`tether.schedulers.ray.render` wrote into ``$TETHER_RAY_PLAN`` (JSON), reserves one
placement group with one bundle per replica (its CPUs, GPUs and memory; strategy
``STRICT_SPREAD``, ``SPREAD``, ``PACK`` or ``STRICT_PACK``), fills ``$TETHER_RANK0_HOST`` with
the address of the node holding replica 0 of the first role, then starts every replica as a
Ray task on its bundle. A task runs the replica's argv as a child process (merged
stdout/stderr) and prints each of its lines as ``[role/k] line``; Ray forwards the tasks'
output into the job's log, where :func:`split_replica_line` separates the replicas again.

The driver exits 0 when every replica exited 0. On the first failure it cancels the other
replicas and exits 1 with a last line naming the role, the replica and its exit code, which
the Jobs API puts into the job's message. Before it exits it waits until each finished
replica's end mark reached its own output (Ray forwards task output asynchronously), so the
job log holds every line. On SIGTERM (``stop_job``) it cancels the replicas' tasks, and each
task gives its program SIGTERM, then SIGKILL after :data:`STOP_GRACE_S` seconds.

This module imports only the standard library and ``ray`` (inside functions): it must run on
a Ray cluster where nothing else of tether is needed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

PLAN_ENV = "TETHER_RAY_PLAN"
"""Environment variable holding the JSON plan."""
RANK0_HOST_ENV = "TETHER_RANK0_HOST"
NUM_REPLICAS_ENV = "TETHER_NUM_REPLICAS"
FAILURE_PREFIX = "tether: "
PLACEMENT_TIMEOUT_ENV = "TETHER_RAY_PLACEMENT_TIMEOUT"
POLL_S = 0.1
"""How often a replica's task checks its process (and so can be cancelled)."""
END_MARK = "tether: end of "
"""A replica's task prints ``END_MARK[role/k]`` after its last line (see :class:`_LogWatch`)."""
STOP_POLL_S = 0.5
"""How often the driver, while it waits for the replicas, looks whether it was stopped."""
FLUSH_WAIT_S = 30.0
"""The most the driver waits for a finished replica's last lines to reach the job log."""
STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
"""Ray's own setting (on the cluster): seconds between the driver's SIGTERM and its SIGKILL."""
RAY_STOP_WAIT_S = 3.0
"""Ray's default for :data:`STOP_WAIT_ENV`."""


def stop_grace_s() -> float:
    """Seconds a stopped replica has between SIGTERM and SIGKILL: a second less than Ray gives
    the driver (``RAY_JOB_STOP_WAIT_TIME_S``, default 3), so the replicas are stopped before
    Ray kills the driver. A cluster that gives programs longer to clean up raises that."""
    try:
        wait = float(os.environ.get(STOP_WAIT_ENV, RAY_STOP_WAIT_S))
    except ValueError:
        wait = RAY_STOP_WAIT_S
    return max(wait - 1.0, 0.5)


STOP_GRACE_S = stop_grace_s()
""":func:`stop_grace_s` in this process."""

_ANSI = r"(?:\x1b\[[0-9;]*m)*"
_LINE = re.compile(rf"^{_ANSI}(?:\([^)]*\){_ANSI}\s)?\[([^\]/]+)/(\d+)\] ?(.*)$")
_END = re.compile(re.escape(END_MARK) + r"\[([^\]/]+)/(\d+)\]")
_FAILURE = re.compile(r"role '([^']+)' replica (\d+) exited with code (-?\d+)")
_PR_SET_PDEATHSIG = 1


def replica_prefix(role: str, replica_id: int) -> str:
    """The prefix of a replica's lines in the job log.

    Args:
        role: The role's name.
        replica_id: The replica's index.

    Returns:
        ``[role/k] ``.
    """
    return f"[{role}/{replica_id}] "


def split_replica_line(line: str) -> tuple[str, int, str] | None:
    """Finds which replica wrote a job-log line.

    Ray puts its own ``(task pid=..)`` prefix (possibly coloured) before the tether prefix.

    Args:
        line: One line of the job's log, without its newline.

    Returns:
        ``(role, replica_id, text)``, or None for a line no replica wrote.
    """
    m = _LINE.match(line)
    if m is None:
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def failed_replica(message: str) -> tuple[str, int, int] | None:
    """Finds the replica whose failure ended the job, in the job's message.

    Args:
        message: The Jobs API's message of a failed job (it ends with the log's last lines).

    Returns:
        ``(role, replica_id, exit_code)`` of the last failure line, or None.
    """
    found = _FAILURE.findall(message)
    if not found:
        return None
    role, replica_id, code = found[-1]
    return role, int(replica_id), int(code)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the replica's process gets SIGKILL when the Ray worker running it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _pump(stream: Any, prefix: str) -> None:
    """Prints every line of ``stream`` with the replica prefix (a reader thread)."""
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        print(f"{prefix}{text}", flush=True)


def _stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_replica(
    role: str, replica_id: int, argv: Sequence[str], env: dict[str, str], cwd: str | None
) -> int:
    """Runs one replica's process, printing its lines with the replica prefix.

    The output is read by a thread while this (the task's main) thread polls the process:
    Ray cancels a task by raising KeyboardInterrupt in its main thread between bytecodes, so
    the task must not block in a system call. On that interrupt (the driver was stopped) the
    process gets SIGTERM, then SIGKILL after :data:`STOP_GRACE_S` seconds.

    Args:
        role: The role's name.
        replica_id: The replica's index.
        argv: The command.
        env: Variables set on top of the worker's environment.
        cwd: Working directory (None: the job's working directory).

    Returns:
        The process's exit code (127 when it cannot be started).
    """
    prefix = replica_prefix(role, replica_id)
    full_env = dict(os.environ)
    full_env.update(env)
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    try:  # from the start: a cancel that lands before the wait loop still stops the program
        try:
            proc = subprocess.Popen(  # the role's own argv, no shell
                list(argv),
                env=full_env,
                cwd=cwd or None,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as e:
            print(f"{prefix}{FAILURE_PREFIX}cannot start {argv[0]!r}: {e}", flush=True)
            return 127
        reader = threading.Thread(target=_pump, args=(proc.stdout, prefix), daemon=True)
        reader.start()
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:  # the task was cancelled: stop the program gracefully
        if proc is not None:
            _stop_process(proc, STOP_GRACE_S)
        if reader is not None:
            reader.join(timeout=STOP_GRACE_S)
        raise
    reader.join()
    print(f"{END_MARK}[{role}/{replica_id}]", flush=True)
    return code


class _LogWatch:
    """Wraps the driver's stdout/stderr, where Ray prints the replicas' forwarded lines, and
    notes each replica's end mark.

    Ray forwards a task's output to the driver asynchronously: a replica may have ended
    before its last lines reached the driver (and so the job log). The driver waits for the
    end marks before it exits, so no line is lost and a failure line comes last.
    """

    def __init__(self, stream: Any, seen: set[tuple[str, int]], cond: threading.Condition
                 ) -> None:  # fmt: skip
        self._stream = stream
        self._seen = seen
        self._cond = cond

    def write(self, text: str) -> int:
        n = int(self._stream.write(text))
        found = _END.findall(text)
        if found:
            with self._cond:
                self._seen.update((r, int(k)) for r, k in found)
                self._cond.notify_all()
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _node_addresses(ray: Any) -> dict[str, str]:
    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}


def _place_optional(
    ray: Any, placement_group: Any, remove: Any, optional: list[dict[str, Any]], wait_s: float
) -> list[tuple[dict[str, Any], Any]]:
    """Elastic roles: places replicas beyond ``min_replicas``, one bundle each, for up to
    ``wait_s`` seconds, keeping per role the replicas up to the first that did not fit (so
    replica ids stay contiguous and match the rendered macros)."""
    if not optional:
        return []
    groups = [(r, placement_group([dict(r["bundle"])], strategy="PACK")) for r in optional]
    ray.wait([g.ready() for _, g in groups], num_returns=len(groups), timeout=max(wait_s, 0.1))
    kept: list[tuple[dict[str, Any], Any]] = []
    stopped: set[str] = set()
    for rep, group in groups:
        state = ray.util.placement_group_table(group).get("state")
        if rep["role"] not in stopped and state == "CREATED":
            kept.append((rep, group))
        else:
            stopped.add(rep["role"])
            remove(group)
    print(f"{FAILURE_PREFIX}elastic: placed {len(kept)} of {len(optional)} optional replica(s)",
          flush=True)
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the plan in ``$TETHER_RAY_PLAN`` (see the module docs).

    Args:
        argv: Unused (the plan travels in the environment).

    Returns:
        The exit code.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    plan = json.loads(os.environ[PLAN_ENV])
    replicas: list[dict[str, Any]] = plan["replicas"]
    seen: set[tuple[str, int]] = set()
    cond = threading.Condition()
    sys.stdout = _LogWatch(sys.stdout, seen, cond)
    sys.stderr = _LogWatch(sys.stderr, seen, cond)
    ray.init(log_to_driver=True)
    required = [r for r in replicas if not r.get("optional")]
    bundles = [dict(r["bundle"]) for r in required]
    pg = placement_group(bundles, strategy=plan.get("placement_strategy", "PACK"))
    timeout = float(os.environ.get(PLACEMENT_TIMEOUT_ENV, plan.get("placement_timeout", 0)) or 0)
    print(f"{FAILURE_PREFIX}reserving {len(bundles)} bundle(s): {bundles}", flush=True)
    ready = pg.ready()
    done, _ = ray.wait([ready], timeout=timeout if timeout > 0 else None)
    if not done:
        print(
            f"{FAILURE_PREFIX}the cluster could not place {len(bundles)} bundle(s) {bundles} "
            f"with strategy {plan.get('placement_strategy')} within {timeout:g}s",
            file=sys.stderr,
            flush=True,
        )
        return 1
    # where each replica runs: (placement group, bundle index)
    placed: list[tuple[dict[str, Any], Any, int]] = [(r, pg, i) for i, r in enumerate(required)]
    extra_pgs = _place_optional(
        ray, placement_group, remove_placement_group,
        [r for r in replicas if r.get("optional")], float(plan.get("elastic_wait", 0)),
    )
    placed += [(r, p, 0) for r, p in extra_pgs]
    counts: dict[str, int] = {}
    for rep, _, _ in placed:
        counts[rep["role"]] = counts.get(rep["role"], 0) + 1
    table = ray.util.placement_group_table(pg)
    nodes = _node_addresses(ray)
    node0 = table["bundles_to_node_id"].get(0)
    rank0_host = nodes.get(node0, "127.0.0.1") if len(placed) > 1 else "localhost"

    task = ray.remote(run_replica)
    refs: dict[Any, dict[str, Any]] = {}
    # from here a stop (SIGTERM) stops the replicas gracefully; before, Ray's handler exits.
    # The handler only notes the stop, and the loops below look at it between short waits:
    # an exception raised by a handler that runs inside one of Ray's blocking calls does not
    # reliably come out of that call as itself
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        for rep, group, index in placed:
            if stop.is_set():
                raise _Stopped()
            _start_replica(ray, task, rep, group, index, rank0_host, counts, refs)
        code = _wait_replicas(ray, refs, lambda rep: _await_end(rep, seen, cond), stop)
    except _Stopped:
        _stop_replicas(ray, refs)
        code = 128 + signal.SIGTERM
    remove_placement_group(pg)
    for _, group in extra_pgs:
        remove_placement_group(group)
    return code


def _start_replica(
    ray: Any, task: Any, rep: dict[str, Any], group: Any, index: int, rank0_host: str,
    counts: dict[str, int], refs: dict[Any, dict[str, Any]],
) -> None:
    """Starts one replica's task on its bundle and records its ref in ``refs``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    env = dict(rep["env"])
    env[RANK0_HOST_ENV] = rank0_host
    env[NUM_REPLICAS_ENV] = str(counts[rep["role"]])  # elastic: the replicas placed
    opts: dict[str, Any] = {
        "num_cpus": rep["bundle"].get("CPU", 0),
        "num_gpus": rep["bundle"].get("GPU", 0),
        "max_retries": 0,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index
        ),
    }
    if rep["bundle"].get("memory"):
        opts["memory"] = rep["bundle"]["memory"]
    opts.update(rep.get("options") or {})  # a Replica overlay's task options
    ref = task.options(**opts).remote(
        rep["role"], rep["replica_id"], rep["argv"], env, rep.get("cwd")
    )
    refs[ref] = rep


def _await_end(rep: dict[str, Any], seen: set[tuple[str, int]], cond: threading.Condition
               ) -> None:  # fmt: skip
    """Waits (at most :data:`FLUSH_WAIT_S`) until the replica's end mark reached the log."""
    key = (rep["role"], int(rep["replica_id"]))
    with cond:
        cond.wait_for(lambda: key in seen, timeout=FLUSH_WAIT_S)


def _wait_replicas(
    ray: Any,
    refs: dict[Any, dict[str, Any]],
    flushed: Callable[[dict[str, Any]], None] = lambda rep: None,
    stop: threading.Event | None = None,
) -> int:
    """Waits for every replica; on the first failure cancels the others and returns 1.

    ``flushed(rep)`` is called once a replica's task returned, to wait for its last lines.

    Raises:
        _Stopped: When ``stop`` is set (the driver got SIGTERM) while replicas run.
    """
    pending = list(refs)
    while pending:
        if stop is not None and stop.is_set():
            raise _Stopped()
        done, pending = ray.wait(pending, num_returns=1, timeout=STOP_POLL_S)
        if not done:
            continue
        rep = refs[done[0]]
        try:
            rc = int(ray.get(done[0]))
        except Exception as e:  # a crashed worker is a failed replica
            rc, why = 1, f"its Ray task failed: {e}"
        else:
            why = f"exited with code {rc}"
            flushed(rep)
        if rc != 0:
            for ref in pending:
                ray.cancel(ref, force=True)
            msg = f"role {rep['role']!r} replica {rep['replica_id']} {why}"
            print(f"{FAILURE_PREFIX}{msg}", file=sys.stderr, flush=True)
            return 1
    return 0


class _Stopped(Exception):
    """The driver got SIGTERM (``stop_job``)."""


def _stop_replicas(ray: Any, refs: dict[Any, dict[str, Any]]) -> None:
    """``stop_job``: cancels every replica's task, so each program gets SIGTERM (and its
    grace) from :func:`run_replica`, and waits for them a little less than Ray waits for us."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(f"{FAILURE_PREFIX}stopped: sending SIGTERM to {len(refs)} replica(s)",
          file=sys.stderr, flush=True)
    for ref in refs:
        ray.cancel(ref, force=False)
    if refs:
        ray.wait(list(refs), num_returns=len(refs), timeout=STOP_GRACE_S + 0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
