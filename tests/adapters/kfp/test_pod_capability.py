"""The KFP adapter reads what a scheduler can do from its capabilities, never from its name.

A third-party scheduler registered through the ``tether.schedulers`` entry points that
declares ``Capabilities(kubernetes_pods=True)`` gets what ``kubernetes`` gets: native steps,
the pipeline's namespace in its launcher pods, the step's node selectors and tolerations as
run options. One that does not declare it gets launcher steps and none of that, like
``local_cwd``.

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tether import schedulers as registry
from tether.adapters.common import materialize
from tether.adapters.kfp import step
from tether.adapters.kfp.launch import inherit_settings
from tether.adapters.kfp.spec import ENV_NAMESPACE, LaunchSpec
from tether.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler
from tether.schedulers.capabilities import Capabilities
from tether.specs import AppDef, AppDryRunInfo, CfgVal, runopts
from tether.util.entry_points import EntryPointInfo

COMP = "tests.adapters.kfp.components"


class _ThirdParty(Scheduler[dict[str, Any]]):
    """A plugin's scheduler: it only renders (the adapter decides at compile time)."""

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add("namespace", type_=str, default="default", help="namespace")
        opts.add("node_selector", type_=dict, default=None, help="node labels")
        opts.add("tolerations", type_=list, default=None, help="taints tolerated")
        return opts

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[Any]:
        return AppDryRunInfo({"app": app.name, "cfg": dict(cfg)}, repr)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        raise NotImplementedError("render only")

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return None

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        return []

    def _cancel_existing(self, app_id: str) -> None:
        raise NotImplementedError("render only")


class PodScheduler(_ThirdParty):
    """Runs replicas as pods of a Kubernetes cluster, and says so."""

    capabilities: ClassVar[Capabilities] = Capabilities(kubernetes_pods=True)


class HostScheduler(_ThirdParty):
    """Runs replicas somewhere else (no pods)."""


def create_pods(session_name: str, **kwargs: Any) -> PodScheduler:
    return PodScheduler("acme_pods", session_name)


def create_hosts(session_name: str, **kwargs: Any) -> HostScheduler:
    return HostScheduler("acme_hosts", session_name)


@pytest.fixture(autouse=True)
def plugin_schedulers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two schedulers registered as a plugin's entry points would register them."""
    group = registry.ENTRY_POINT_GROUP
    eps = [EntryPointInfo("acme_pods", f"{__name__}:create_pods", group),
           EntryPointInfo("acme_hosts", f"{__name__}:create_hosts", group)]
    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: eps if group == registry.ENTRY_POINT_GROUP else real(group))
    yield


@pytest.mark.parametrize(("scheduler", "native"),
                         [("kubernetes", True), ("acme_pods", True), ("acme_hosts", False)])
def test_native_steps_follow_the_capability(scheduler: str, native: bool) -> None:
    plan = step(c.hello, scheduler=scheduler).plan(msg="hi")
    assert plan.mode == ("native" if native else "launcher")
    if not native:
        assert f"scheduler {scheduler!r} does not run its replicas as Kubernetes pods" in \
            plan.reason


def test_launcher_pods_learn_the_namespace_where_the_capability_says(tmp_path: Path) -> None:
    from kfp import compiler, dsl

    pods = step(c.pair, scheduler="acme_pods")
    hosts = step(c.pair, scheduler="acme_hosts", name="pair_hosts")

    @dsl.pipeline(name="capability")
    def pipeline() -> None:
        pods()
        hosts()

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    parts = list(yaml.safe_load_all(path.read_text()))
    platform = parts[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert platform["exec-pair"]["fieldPathAsEnv"] == [
        {"fieldPath": "metadata.namespace", "name": ENV_NAMESPACE}]
    assert "exec-pair-hosts" not in platform


@pytest.mark.parametrize(("scheduler", "inherits"),
                         [("acme_pods", True), ("acme_hosts", False)])
def test_launcher_jobs_inherit_placement_where_the_capability_says(
        scheduler: str, inherits: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_NAMESPACE, "team-a")  # what the downward API sets
    spec = LaunchSpec(component=f"{COMP}:pair", scheduler=scheduler,
                      inherit={"node_selector": {"pool": "a100"},
                               "tolerations": ["nvidia.com/gpu:NoSchedule"]})
    cfg = inherit_settings(materialize(spec.component, {}), spec)
    if inherits:
        assert cfg == {"namespace": "team-a", "node_selector": {"pool": "a100"},
                       "tolerations": ["nvidia.com/gpu:NoSchedule"]}
    else:
        assert cfg == {}
