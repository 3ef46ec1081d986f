"""KFP build + compile time: a pipeline of N tether steps vs N plain KFP container components.

Prints ``{"tether": seconds, "native": seconds}``: for each side, the time to build the
pipeline (``dsl.pipeline(...)(fn)`` runs the function, which adds the tasks) plus compiling it
to YAML. Both pipelines are chains of N steps running the same echo command with a different
constant message each; tether's steps are native-mode ``utils.echo`` steps (one role, one
replica), so the comparison isolates the adapter's overhead per step.
"""

# no `from __future__ import annotations`: KFP reads real annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    n = args.n

    from kfp import compiler, dsl

    from tether.adapters.kfp import step

    @dsl.container_component
    def echo(msg: str) -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image="busybox", command=["echo"], args=[msg])

    def native_pipeline() -> None:
        prev = None
        for i in range(n):
            # the same resources tether's utils.echo step asks for (1 CPU, 256 MiB)
            t = (echo(msg=f"hi {i}").set_cpu_request("1").set_cpu_limit("1")
                 .set_memory_request("256Mi").set_memory_limit("256Mi"))
            if prev is not None:
                t.after(prev)
            prev = t

    echo_step = step("utils.echo", scheduler="kubernetes", image="busybox")

    def tether_pipeline() -> None:
        prev = None
        for i in range(n):
            t = echo_step(msg=f"hi {i}")
            if prev is not None:
                t.after(prev)
            prev = t

    out: dict[str, object] = {}
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        for rnd in range(2):  # the first round warms up both sides
            for name, fn in (("native", native_pipeline), ("tether", tether_pipeline)):
                start, start_cpu = time.perf_counter(), time.process_time()
                # decorating runs the function: the tasks (and tether's plans) are built here
                pipe = dsl.pipeline(name=f"bench-{name}")(fn)
                compiler.Compiler().compile(pipe, str(Path(tmp) / f"{name}.yaml"))
                if rnd:
                    out[name] = time.perf_counter() - start
                    cpu[name] = time.process_time() - start_cpu
    # CPU time of this one-threaded work: what a loaded machine leaves comparable
    out["note"] = ("build + compile; native-mode utils.echo steps vs plain "
                   "dsl.container_component steps with the same CPU/memory settings (tether's "
                   "steps also mount a memory-backed /dev/shm through kfp-kubernetes); CPU "
                   f"time ratio {cpu['tether'] / max(cpu['native'], 1e-9):.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
