"""KFP compile time: a pipeline of N tether steps vs N plain KFP container components.

Prints ``{"tether": seconds, "native": seconds}``. Both pipelines are chains of N steps running
the same echo command; tether's steps are native-mode ``utils.echo`` steps (one role, one
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
            t = echo(msg=f"hi {i}")
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
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        for rnd in range(2):  # the first round warms up both sides
            for name, fn in (("native", native_pipeline), ("tether", tether_pipeline)):
                pipe = dsl.pipeline(name=f"bench-{name}")(fn)
                start = time.perf_counter()
                compiler.Compiler().compile(pipe, str(Path(tmp) / f"{name}.yaml"))
                if rnd:
                    out[name] = time.perf_counter() - start
    out["note"] = "native-mode utils.echo steps vs plain dsl.container_component steps"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
