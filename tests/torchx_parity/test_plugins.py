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
    # tether's own built-in trackers are entry points of tether.tracker, listed too
    assert set(reg.get(PluginType.TRACKER)) == {"my_store", "fsspec", "mlflow"}
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


FRACTIONAL_RESOURCES = '''
from tether.plugins import HALF, WHOLE, halve_mem_down_to, powers_of_two_gpus, register
from tether.specs import Resource


@register.named_resource(fractionals=powers_of_two_gpus, aliases=["gpu_host"])
def my_gpu(fractional: float = WHOLE) -> Resource:
    return Resource(cpu=int(96 * fractional), gpu=int(8 * fractional),
                    memMB=int(1024 * 1024 * fractional))


@register.named_resource(name="cpu_box", fractionals=halve_mem_down_to(minGiB=16))
def _cpu(fractional: float = WHOLE) -> Resource:
    return Resource(cpu=int(64 * fractional), gpu=0, memMB=int(64 * 1024 * fractional))


@register.named_resource(fractionals={WHOLE: "full", HALF: "half"})
def literal(fractional: float = WHOLE) -> Resource:
    return Resource(cpu=int(4 * fractional), gpu=0, memMB=int(4096 * fractional))
'''


def test_fractional_named_resources_register_each_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.specs import named_resources, resource

    dist = tmp_path / "dist"
    _write(dist, "tether_plugins/named_resources/hosts.py", FRACTIONAL_RESOURCES)
    monkeypatch.syspath_prepend(str(dist))
    _forget()
    try:
        names = set(plugins.registry().get(PluginType.NAMED_RESOURCE))
        assert names == {
            "my_gpu", "gpu_host", "my_gpu_8", "my_gpu_4", "my_gpu_2", "my_gpu_1",
            "cpu_box", "cpu_box_64", "cpu_box_32", "cpu_box_16",
            "literal", "literal_full", "literal_half",
        }
        assert plugins.registry().errors == []
        quarter = resource(h="my_gpu_2")
        assert (quarter.gpu, quarter.cpu) == (2, 24)
        assert quarter.is_fractional() and quarter.get_resource_name() == "my_gpu_2"
        whole = named_resources["my_gpu_8"]
        assert whole.gpu == 8 and not whole.is_fractional()
        assert whole.get_resource_name() == "my_gpu_8"
        assert named_resources["my_gpu"].get_resource_name() == "my_gpu"
        assert named_resources["cpu_box_16"].memMB == 16 * 1024
        assert named_resources["literal_half"].cpu == 2
        # each slice is a module attribute, as in TorchX
        from tether_plugins.named_resources import hosts  # type: ignore[import-not-found]

        assert hosts.my_gpu_4().gpu == 4
    finally:
        _forget()


def test_fractional_helpers() -> None:
    from tether.plugins import (
        EIGHTH,
        HALF,
        QUARTER,
        SIXTEENTH,
        WHOLE,
        halve_mem_down_to,
        powers_of_two_gpus,
    )
    from tether.specs import Resource

    assert (WHOLE, HALF, QUARTER, EIGHTH, SIXTEENTH) == (1.0, 0.5, 0.25, 0.125, 0.0625)
    assert powers_of_two_gpus(Resource(cpu=8, gpu=8, memMB=1024)) == {
        1.0: "8", 0.5: "4", 0.25: "2", 0.125: "1"}
    assert powers_of_two_gpus(Resource(cpu=1, gpu=1, memMB=1024)) == {1.0: "1"}
    for gpus in (0, 6):
        with pytest.raises(ValueError, match=f"resource.gpu = {gpus} must be a positive"):
            powers_of_two_gpus(Resource(cpu=8, gpu=gpus, memMB=1024))
    halve = halve_mem_down_to(minGiB=8)
    assert halve(Resource(cpu=8, gpu=0, memMB=64 * 1024)) == {
        1.0: "64", 0.5: "32", 0.25: "16", 0.125: "8"}
    with pytest.raises(ValueError, match="minGiB = 2 is below 3"):
        halve_mem_down_to(minGiB=2)(Resource(cpu=8, gpu=0, memMB=96 * 1024))
    with pytest.raises(ValueError, match="multiple of 1024"):
        halve(Resource(cpu=8, gpu=0, memMB=1000))


def test_fractionals_need_a_fractional_parameter() -> None:
    from tether.specs import Resource

    def plain() -> Resource:
        return Resource(cpu=1, gpu=0, memMB=1)

    with pytest.raises(TypeError, match=r"'plain'.*takes no 'fractional' parameter"):
        register.named_resource(fractionals={1.0: "1"})(plain)


ENTRY_POINTS = """\
[tether.schedulers]
ep_local = tether.schedulers.local.scheduler:create_scheduler
my_local = tether.schedulers.local.scheduler:create_scheduler
broken_ep = tether_no_such_module_xyz:create_scheduler
"""


@pytest.fixture
def with_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A namespace plugin distribution and an installed distribution declaring entry points
    (a real ``*.dist-info`` on ``sys.path``, as pip lays it out)."""
    dist = tmp_path / "dist"
    _write(dist, "tether_plugins/schedulers/mine.py", SCHEDULERS)
    info = dist / "tether_ep_test-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tether-ep-test\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(dist))
    monkeypatch.delenv("TETHER_PLUGINS_SOURCE", raising=False)
    _forget()
    yield dist
    monkeypatch.delenv("TETHER_PLUGINS_SOURCE", raising=False)
    _forget()


def test_registry_lists_entry_point_plugins_too(with_entry_points: Path) -> None:
    from tether.schedulers.local.scheduler import create_scheduler

    reg = plugins.registry()
    both = plugins.PluginSource.NAMESPACE_PKG | plugins.PluginSource.ENTRYPOINT
    assert reg.plugin_sources == both
    found = reg.get(PluginType.SCHEDULER)
    assert set(found) == {"my_local", "other_local", "ep_local"}
    # the entry point wins over the namespace plugin of the same name (recorded)
    assert found["my_local"] is create_scheduler is found["ep_local"]
    errors = {e.name: e.error for e in reg.errors}
    assert set(errors) == {"my_local", "broken_ep"}
    assert "entry point wins" in errors["my_local"]
    assert "tether_no_such_module_xyz" in errors["broken_ep"]


@pytest.mark.parametrize(("value", "expected", "ep_scheduler"), [
    ("0", set(), False),
    ("1", {"my_local", "other_local"}, False),
    ("2", {"my_local", "ep_local"}, True),
    ("3", {"my_local", "other_local", "ep_local"}, True),
])
def test_plugins_source_env_chooses_where_plugins_come_from(
    with_entry_points: Path, monkeypatch: pytest.MonkeyPatch,
    value: str, expected: set[str], ep_scheduler: bool,
) -> None:
    from tether.schedulers import get_scheduler_factories

    monkeypatch.setenv("TETHER_PLUGINS_SOURCE", value)
    plugins.registry().clear()  # TorchX: the next registry() reads the variable again
    reg = plugins.registry()
    assert reg.plugin_sources == plugins.PluginSource(int(value))
    assert set(reg.get(PluginType.SCHEDULER)) == expected
    # tether's own scheduler lookup follows the same choice
    schedulers = get_scheduler_factories()
    assert ("ep_local" in schedulers) is ep_scheduler
    assert ("other_local" in schedulers) is (value in ("1", "3"))
    assert "local_cwd" in schedulers  # built-ins are no plugins


def test_a_bad_plugins_source_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins.registry().clear()
    monkeypatch.setenv("TETHER_PLUGINS_SOURCE", "7")
    try:
        with pytest.raises(ValueError, match=r"TETHER_PLUGINS_SOURCE='7' is not allowed"):
            plugins.registry()
    finally:
        monkeypatch.delenv("TETHER_PLUGINS_SOURCE")
        plugins.registry().clear()


def test_empty_registry() -> None:
    reg = plugins.PluginRegistry(plugin_sources=plugins.PluginSource.NONE)
    assert reg.info() == {pt: {} for pt in PluginType}
