"""Component code ships with launcher steps: a pipeline compiled in one place runs where its
files are not (kfp.local's SubprocessRunner runs the compiled YAML; the jobs run on local_cwd).

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tether.adapters.kfp import LauncherOptions, step
from tether.adapters.kfp.ship import ShipError, ship
from tether.adapters.kfp.spec import LaunchSpec
from tether.specs import AppDef, Role

pytestmark = pytest.mark.filterwarnings(
    "ignore:You may be attemping to run a task:RuntimeWarning")  # kfp.local: image name

DATA = Path(__file__).parent / "data"
FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)

_OTHER_COMPONENTS = '''
import sys

from tether.specs import AppDef, Role

PREFIX = "from a file elsewhere"


def shout(msg: str, loud: bool = True) -> AppDef:
    """Prints the message.

    Args:
        msg: The message.
        loud: Upper-case it.

    Returns:
        The AppDef.
    """
    text = f"{PREFIX}: {msg.upper() if loud else msg}"
    return AppDef("shout", [Role("shout", image="", entrypoint=sys.executable,
                                 args=["-c", "import sys; print(sys.argv[1])", text])])
'''


def _shipped(path: Path, executor: str) -> LaunchSpec:
    """The LaunchSpec embedded in a compiled launcher step."""
    import ast

    spec = next(yaml.safe_load_all(path.read_text()))
    source = spec["deploymentSpec"]["executors"][executor]["container"]["command"][-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "run_step":
            return LaunchSpec.from_json(ast.literal_eval(node.args[0]))
    raise AssertionError("no run_step call in the step")


def _run_compiled(path: Path, **arguments: object) -> None:
    """Runs a compiled pipeline with kfp.local (as a cluster would: from the YAML only)."""
    from kfp import components

    components.load_component_from_file(str(path))(**arguments)


def test_main_component_runs_without_its_file(tmp_path: Path, kfp_subprocess: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    shutil.copy(DATA / "main_pipeline.py", laptop / "main_pipeline.py")
    out = tmp_path / "compiled.yaml"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    res = subprocess.run([sys.executable, str(laptop / "main_pipeline.py"), str(out)],
                         cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    launch = _shipped(out, "exec-greet")
    assert launch.component == "main_pipeline.py:greet"
    assert launch.source is not None and 'GREETING = "hello from __main__"' in launch.source["text"]

    shutil.rmtree(laptop)  # the cluster does not have the laptop's files
    capfd.readouterr()
    _run_compiled(out, name="world")
    log = capfd.readouterr().out
    assert log.count("greet/0 hello from __main__, world") == 2  # times: default int 2


def test_file_component_from_another_directory(tmp_path: Path, kfp_subprocess: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import compiler, dsl

    other = tmp_path / "elsewhere" / "project"
    other.mkdir(parents=True)
    (other / "comps.py").write_text(_OTHER_COMPONENTS)
    shout = step(f"{other}/comps.py:shout", scheduler="local_cwd", launcher=FAST)

    @dsl.pipeline(name="file-component")
    def pipeline(msg: str = "hi") -> None:
        shout(msg=msg)

    out = tmp_path / "compiled.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    assert _shipped(out, "exec-shout").component == f"{other}/comps.py:shout"

    shutil.rmtree(tmp_path / "elsewhere")
    capfd.readouterr()
    _run_compiled(out, msg="ship it")
    assert "shout/0 from a file elsewhere: SHIP IT" in capfd.readouterr().out


def test_what_ships() -> None:
    # registered components come with the launcher image
    assert ship("utils.echo") == ("utils.echo", None)
    # a module's component: the whole module, run under its own name
    name, source = ship(c.publish)
    assert name == "tests.adapters.kfp.components:publish"
    assert source is not None and source.module == "tests.adapters.kfp.components"
    assert "_PUBLISH = " in source.text
    assert json.loads(json.dumps(source.to_dict())) == source.to_dict()


def test_nested_function_cannot_ship() -> None:
    def local_component(msg: str = "x") -> AppDef:
        """Local.

        Args:
            msg: The message.

        Returns:
            The AppDef.
        """
        return AppDef("x", [Role("r", image="img", entrypoint="echo", args=[msg])])

    with pytest.raises(ShipError, match="cannot be shipped with a launcher step: define it "
                                        "at the top level"):
        step(local_component, scheduler="local_cwd").launch_spec()
