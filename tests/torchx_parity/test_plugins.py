"""TorchX's ``torchx.plugins``: ``@register`` in ``torchx_plugins.*`` namespace packages.

The plugins are real modules in namespace packages on ``sys.path`` (no ``__init__.py``), as a
pip-installed plugin distribution lays them out.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import plugins
from tether.plugins import PluginType, register

SCHEDULERS = '''
from tether.plugins import register
from tether.schedulers.local.scheduler import create_scheduler


@register.scheduler()
def my_local(session_name: str, **kwargs: object):
    return create_scheduler(session_name)


@register.scheduler(name="other_local")
def _make(session_name: str, **kwargs: object):
    return create_scheduler(session_name)
'''

RESOURCES = '''
from tether.plugins import register
from tether.specs import Resource


@register.named_resource(aliases=["tiny_alias"])
def tiny() -> Resource:
    return Resource(cpu=1, gpu=0, memMB=512)
'''

TRACKERS = '''
from tether.plugins import register
from tether.tracker.backend.fsspec import FsspecTracker


@register.tracker()
def my_store(config):
    return FsspecTracker(config)
'''


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _forget() -> None:
    from tether.specs.named_resources import reload_named_resources

    for name in [m for m in sys.modules if m.split(".")[0] == "tether_plugins"]:
        del sys.modules[name]
    plugins.registry().clear()
    reload_named_resources()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two plugin distributions sharing the ``tether_plugins`` namespace."""
    a, b = tmp_path / "dist_a", tmp_path / "dist_b"
    _write(a, "tether_plugins/schedulers/mine.py", SCHEDULERS)
    _write(a, "tether_plugins/schedulers/broken.py", "raise RuntimeError('no deps')\n")
    _write(a, "tether_plugins/schedulers/misplaced.py",
           "from tether.plugins import register\n\n@register.tracker()\n"
           "def oops(config):\n    return None\n")
    _write(b, "tether_plugins/named_resources/sizes/small.py", RESOURCES)
    _write(b, "tether_plugins/tracker/store.py", TRACKERS)
    monkeypatch.syspath_prepend(str(a))
    monkeypatch.syspath_prepend(str(b))
    _forget()
    yield tmp_path
    _forget()


@pytest.mark.usefixtures("installed")
def test_registry_finds_namespace_plugins_and_records_errors() -> None:
    reg = plugins.registry()
    assert set(reg.get(PluginType.SCHEDULER)) == {"my_local", "other_local"}
    assert set(reg.get(PluginType.NAMED_RESOURCE)) == {"tiny", "tiny_alias"}
    assert set(reg.get(PluginType.TRACKER)) == {"my_store"}
    errors = {(e.module.rsplit(".", 1)[-1], e.name) for e in reg.errors}
    assert errors == {("broken", None), ("misplaced", "oops")}
    assert reg is plugins.registry()


@pytest.mark.usefixtures("installed")
def test_registered_scheduler_runs_through_the_runner(tmp_path: Path) -> None:
    from tether.runner import get_runner
    from tether.specs import AppDef, Role

    app = AppDef("p", [Role("r", image=str(tmp_path), entrypoint="true")])
    with get_runner() as runner:
        info = runner.dryrun(app, "my_local", cfg={"cwd": str(tmp_path)})
        assert info.request.roles["r"][0].cwd == str(tmp_path)


@pytest.mark.usefixtures("installed")
def test_registered_named_resource_and_tracker_are_looked_up() -> None:
    from tether.specs import named_resources, resource
    from tether.tracker import build_trackers

    assert named_resources["tiny"].memMB == 512
    assert resource(h="tiny_alias").cpu == 1
    assert resource(h="tiny").get_resource_name() == "tiny"
    assert set(build_trackers({"my_store": "memory://tether-plugin-test"})) == {"my_store"}


def test_register_keeps_the_function() -> None:
    def make(session_name: str) -> None: ...

    assert register.scheduler(name="x")(make) is make
    assert (make._plugin_type, make._plugin_name) == (PluginType.SCHEDULER, "x")  # type: ignore[attr-defined]
    assert PluginType.SCHEDULER.namespace == "tether_plugins.schedulers"


def test_a_duplicate_name_is_an_error_and_private_modules_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    dist = tmp_path / "dist"
    _write(dist, "tether_plugins/schedulers/first.py", SCHEDULERS)
    _write(dist, "tether_plugins/schedulers/second.py",
           "from tether.plugins import register\n\n@register.scheduler()\n"
           "def my_local(session_name, **kwargs):\n    return None\n")
    _write(dist, "tether_plugins/schedulers/_helpers.py", "raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(dist))
    _forget()
    try:
        reg = plugins.registry()
        assert set(reg.get(PluginType.SCHEDULER)) == {"my_local", "other_local"}
        (error,) = reg.errors  # the duplicate; _helpers is never imported
        assert error.module.endswith(".second") and "duplicate" in str(error)
        assert reg.get(PluginType.SCHEDULER)["my_local"].__module__.endswith(".first")
    finally:
        _forget()
