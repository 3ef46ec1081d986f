"""In-process measurements, run by each implementation's own Python (tether or torchx).

Usage: python api_bench.py --impl tether|torchx --case latency|logs|replicas [options]
Prints one JSON object with the measured values.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _api(impl: str) -> tuple[Any, Any, Any]:
    if impl == "tether":
        from tether.runner import get_runner
        from tether.specs import AppDef, Role
    else:
        from torchx.runner import get_runner  # type: ignore[no-redef]
        from torchx.specs import AppDef, Role  # type: ignore[no-redef]
    return get_runner, AppDef, Role


def latency(impl: str, work: Path) -> dict[str, float]:
    """Seconds from the job's last process exiting to ``wait`` returning."""
    get_runner, AppDef, Role = _api(impl)
    stamp = work / "exit_time"
    code = (
        "import time; time.sleep(0.3); "
        f"open({str(stamp)!r}, 'w').write(repr(time.time()))"
    )
    app = AppDef("lat", roles=[Role("r", image="", entrypoint=sys.executable, args=["-c", code])])
    with get_runner() as runner:
        handle = runner.run(app, scheduler="local_cwd", cfg={"log_dir": str(work / "logs")})
        runner.wait(handle, wait_interval=1)
        returned = time.time()
    return {"latency_s": returned - float(stamp.read_text())}


def logs(impl: str, work: Path, big: Path) -> dict[str, float]:
    """log_iter over a finished replica's log replaced by ``big``: seconds, lines, bytes."""
    get_runner, AppDef, Role = _api(impl)
    app = AppDef("logs", roles=[Role("r", image="", entrypoint=sys.executable,
                                     args=["-c", "print('x')"])])
    log_dir = work / "logs"
    with get_runner() as runner:
        handle = runner.run(app, scheduler="local_cwd", cfg={"log_dir": str(log_dir)})
        runner.wait(handle, wait_interval=0.2)
        roots = [log_dir]
        if impl == "tether":
            roots.append(Path(os.environ["TETHER_STATE_DIR"]))
        replaced = 0
        for root in roots:
            for p in root.rglob("*.log"):
                if p.name in ("stdout.log", "combined.log"):
                    p.unlink()
                    p.symlink_to(big)
                    replaced += 1
        if not replaced:
            raise SystemExit("no replica log file found to replace")
        start = time.perf_counter()
        n = 0
        size = 0
        for line in runner.log_lines(handle, "r", 0):
            n += 1
            size += len(line)
        secs = time.perf_counter() - start
    return {"seconds": secs, "lines": n, "chars": size}


def replicas(impl: str, work: Path, count: int) -> dict[str, float]:
    """Seconds from run() to all ``count`` replicas RUNNING."""
    get_runner, AppDef, Role = _api(impl)
    app = AppDef("many", roles=[Role("r", image="", entrypoint="sleep", args=["30"],
                                     num_replicas=count)])
    with get_runner() as runner:
        start = time.perf_counter()
        handle = runner.run(app, scheduler="local_cwd", cfg={"log_dir": str(work / "logs")})
        try:
            while True:
                st = runner.status(handle)
                if st is not None and not st.roles and st.state.name == "RUNNING":
                    # no per-replica states (torchx local_cwd): it reports RUNNING only after
                    # every replica process was started
                    running = count
                else:
                    running = sum(
                        1 for rs in (st.roles if st else []) for r in rs.replicas
                        if r.state.name == "RUNNING"
                    )
                if running >= count:
                    break
                if time.perf_counter() - start > 60:
                    raise SystemExit(f"only {running}/{count} replicas RUNNING after 60 s")
                time.sleep(0.005)
            secs = time.perf_counter() - start
        finally:
            runner.cancel(handle)
    return {"seconds": secs}


def spawn_floor(count: int) -> dict[str, float]:
    """Seconds to start ``count`` processes with a bare ``Popen`` loop: no log file, no record,
    nothing to supervise (the floor under any launcher that starts each replica as a
    process of its own, as both implementations do)."""
    import subprocess

    start = time.perf_counter()
    procs = [
        subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
        for _ in range(count)
    ]
    secs = time.perf_counter() - start
    for p in procs:
        p.kill()
        p.communicate()
    return {"seconds": secs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["tether", "torchx"], required=True)
    ap.add_argument("--case", choices=["latency", "logs", "replicas", "spawn_floor"],
                    required=True)
    ap.add_argument("--big", type=Path)
    ap.add_argument("--count", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"bench-{args.impl}-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("TETHER_STATE_DIR", str(work / "state"))
        if args.case == "latency":
            out = latency(args.impl, work)
        elif args.case == "logs":
            out = logs(args.impl, work, args.big)
        elif args.case == "spawn_floor":
            out = spawn_floor(args.count)
        else:
            out = replicas(args.impl, work, args.count)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
