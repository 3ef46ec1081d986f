"""A pipeline file whose component is defined in the file itself (``__main__`` when run).

``python main_pipeline.py OUT.yaml`` compiles it; the step must carry the component's code,
since the step runs where this file is not (test_ship.py removes it before running).
"""

import sys

from kfp import compiler, dsl

from tether.adapters.kfp import LauncherOptions, step
from tether.specs import AppDef, Role

GREETING = "hello from __main__"


def greet(name: str, times: int = 1) -> AppDef:
    """Greets with the module's GREETING (so the whole module must ship, not the function).

    Args:
        name: Who.
        times: How often.

    Returns:
        The AppDef.
    """
    code = "import sys; [print(sys.argv[1], flush=True) for _ in range(int(sys.argv[2]))]"
    return AppDef("greet", [Role("greet", image="", entrypoint=sys.executable,
                                 args=["-c", code, f"{GREETING}, {name}", str(times)])])


greet_step = step(greet, scheduler="local_cwd", launcher=LauncherOptions(wait_interval=0.2))


@dsl.pipeline(name="main-component")
def pipeline(name: str = "kfp", times: int = 2) -> None:
    greet_step(name=name, times=times)


if __name__ == "__main__":
    compiler.Compiler().compile(pipeline, sys.argv[1])
