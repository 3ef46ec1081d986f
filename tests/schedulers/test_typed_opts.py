"""Run options are resolved once, at the scheduler boundary, into the backend's typed class.

A scheduler names its options class as its second type parameter; ``submit_dryrun`` resolves
the user's cfg (strings from ``-cfg``, camelCase keys, defaults) into it and hands the same
object to ``_validate``, ``_submit_dryrun`` and ``AppDryRunInfo.cfg``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from tether.schedulers import BUILTIN_SCHEDULERS
from tether.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    CfgVal,
    InvalidRunConfigException,
    Role,
    StructuredOpts,
)

APP = AppDef("job", roles=[Role("trainer", image="img", entrypoint="train")])


@dataclass
class PluginOpts(StructuredOpts):
    cluster: str = "default"
    """Cluster to submit to."""
    retries: int = 1
    """How often to retry."""
    mode: Literal["fast", "safe"] = "safe"
    """fast or safe."""


@dataclass
class PluginRequest:
    name: str


class TypedPlugin(Scheduler[PluginRequest, PluginOpts]):
    """A plugin that declares its options class; records what the base class hands it."""

    def __init__(self) -> None:
        super().__init__("typed", "s")
        self.seen: list[tuple[str, object]] = []

    def _validate(self, app: AppDef, scheduler: str, opts: PluginOpts) -> None:
        self.seen.append(("validate", opts))

    def _submit_dryrun(self, app: AppDef, opts: PluginOpts) -> AppDryRunInfo[PluginRequest]:
        self.seen.append(("dryrun", opts))
        return AppDryRunInfo(PluginRequest(f"{opts.cluster}/{opts.mode}/{opts.retries}"))

    def schedule(self, dryrun_info: AppDryRunInfo[PluginRequest]) -> str:
        return dryrun_info.request.name

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return None

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        return []

    def _cancel_existing(self, app_id: str) -> None:
        pass


def test_plugin_gets_one_typed_options_object_resolved_once() -> None:
    sched = TypedPlugin()
    info = sched.submit_dryrun(APP, {"cluster": "c1", "retries": "3", "mode": "fast"})
    (what1, validated), (what2, rendered) = sched.seen
    assert (what1, what2) == ("validate", "dryrun")
    assert isinstance(validated, PluginOpts) and validated is rendered  # the same object
    assert validated == PluginOpts(cluster="c1", retries=3, mode="fast")  # "3" read as int
    assert info.app is not None and info.scheduler == "typed"
    assert info.request.name == "c1/fast/3"
    assert dict(info.cfg or {}) == {"cluster": "c1", "retries": 3, "mode": "fast"}
    assert sched.resolve_opts(info.cfg) == validated  # the schedule side types it alike
    assert sched.resolve_opts(validated) is validated  # already typed: kept as is


def test_plugin_options_come_from_its_type_parameter() -> None:
    sched = TypedPlugin()
    opts = sched.run_opts()
    assert [k for k, _ in opts] == ["cluster", "retries", "mode"]
    mode = opts.get("mode")
    assert mode is not None and mode.type_name() == "str" and mode.default == "safe"
    assert sched.resolve_opts(None) == PluginOpts()  # defaults
    with pytest.raises(InvalidRunConfigException, match="did you mean retries"):
        sched.submit_dryrun(APP, {"retris": 2})


def _scheduler_classes() -> list[tuple[str, type[Scheduler[Any]]]]:
    out = []
    for name, target in BUILTIN_SCHEDULERS.items():
        module = importlib.import_module(target.partition(":")[0])
        classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
                   if issubclass(c, Scheduler) and c.__module__ == module.__name__]
        assert len(classes) == 1, (name, classes)
        out.append((name, classes[0]))
    return out


@pytest.mark.parametrize(("name", "cls"), _scheduler_classes())
def test_every_builtin_backend_declares_its_options_class(
    name: str, cls: type[Scheduler[Any]]
) -> None:
    opts_type = cls.opts_type
    assert opts_type is not None and issubclass(opts_type, StructuredOpts), name
    options_module = cls.__module__.rpartition(".")[0] + ".options"
    assert opts_type.__module__ == options_module


def test_kubernetes_dryrun_carries_typed_options() -> None:
    from tether.schedulers.kubernetes.options import KubernetesOpts
    from tether.schedulers.kubernetes.scheduler import create_scheduler

    sched = create_scheduler("t")
    info = sched.submit_dryrun(
        APP, {"gang": "volcano", "imagePullPolicy": "Always", "reserved_millicpu": "50"}
    )
    opts = sched.resolve_opts(info.cfg)
    assert isinstance(opts, KubernetesOpts)
    assert (opts.gang, opts.image_pull_policy, opts.reserved_millicpu) == ("volcano", "Always", 50)
    assert info.cfg is not None and info.cfg["gang"] == "volcano"  # reads as the cfg mapping
    assert "schedulerName: volcano" in str(info)  # the render got the typed value
