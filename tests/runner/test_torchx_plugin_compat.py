"""A TorchX user's scheduler plugin and runner code work after renaming the import.

The plugin is the quick reference's skeleton (its backend records requests in memory, as a
TorchX user's unit test of their plugin would): it is the code under test, not a fake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from tether.runner import Runner
from tether.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler
from tether.specs import AppDef, AppDryRunInfo, AppState, CfgVal, Role, StructuredOpts, runopts

SUBMITTED: dict[str, list[str]] = {}
CANCELLED: list[str] = []
CREATED_WITH: list[dict[str, Any]] = []
VALIDATED: list[str] = []


@dataclass
class MyRequest:
    job_name: str
    cmd: list[str]


@dataclass
class MyOpts(StructuredOpts):
    cluster: str = "default"
    """Cluster to submit to."""
    image_pull_policy: str = "IfNotPresent"
    """Pull policy."""


class MyScheduler(Scheduler[Mapping[str, CfgVal]]):
    def __init__(self, session_name: str, **kwargs: object) -> None:
        super().__init__("my_backend", session_name)
        CREATED_WITH.append(dict(kwargs))

    def _run_opts(self) -> runopts:
        return MyOpts.as_runopts()

    def _validate(self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal]) -> None:
        VALIDATED.append(scheduler)

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[MyRequest]:
        opts = MyOpts.from_cfg(cfg)
        assert opts["cluster"] == opts.cluster  # StructuredOpts reads as a mapping
        role = app.roles[0]
        return AppDryRunInfo(MyRequest(f"{opts.cluster}/{app.name}", [role.entrypoint]), repr)

    def schedule(self, dryrun_info: AppDryRunInfo[MyRequest]) -> str:
        req = dryrun_info.request
        SUBMITTED[req.job_name] = req.cmd
        return req.job_name

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        if app_id not in SUBMITTED:
            return None
        state = AppState.CANCELLED if app_id in CANCELLED else AppState.RUNNING
        return DescribeAppResponse(app_id=app_id, state=state)

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        return []

    def log_iter(
        self, app_id: str, role_name: str, k: int = 0, *args: Any, **kw: Any
    ) -> Iterable[str]:
        return iter([f"{app_id} {role_name}[{k}] hello\n"])

    def _cancel_existing(self, app_id: str) -> None:
        CANCELLED.append(app_id)


def create_scheduler(session_name: str, **kwargs: Any) -> MyScheduler:
    return MyScheduler(session_name, **kwargs)


APP = AppDef("job", roles=[Role("trainer", image="img", entrypoint="train")])


def test_plugin_runs_through_the_runner_under_its_registered_name() -> None:
    with Runner("s", {"my_sched": create_scheduler}, scheduler_params={"token": "t"}) as runner:
        info = runner.dryrun(APP, "my_sched", cfg={"cluster": "c1"})
        handle = runner.schedule(info)  # found by registered name, not the plugin's backend
        assert handle == "my_sched://s/c1/job"
        assert CREATED_WITH[-1] == {"token": "t"}  # TorchX's flat scheduler_params
        assert VALIDATED[-1] == "my_backend"
        status = runner.status(handle)
        assert status is not None and status.state == AppState.RUNNING
        assert list(runner.log_lines(handle, "trainer", 0)) == ["c1/job trainer[0] hello\n"]
        with pytest.deprecated_call():
            runner.stop(handle)
        assert "c1/job" in CANCELLED


def test_nested_scheduler_params_still_work_and_run_dryrun_form() -> None:
    params = {"my_sched": {"token": "n"}}
    with Runner("s", {"my_sched": create_scheduler}, scheduler_params=params) as runner:
        info = runner.run(APP, "my_sched", cfg={"cluster": "c2"}, dryrun=True)
        assert isinstance(info.request, MyRequest) and info.request.job_name == "c2/job"
        assert CREATED_WITH[-1] == {"token": "n"}
        assert "c2/job" not in SUBMITTED


def test_camel_case_cfg_keys_and_submit_with_workspace() -> None:
    sched = create_scheduler("s")
    app_id = sched.submit(APP, {"imagePullPolicy": "Always", "cluster": "c3"}, workspace=None)
    assert app_id == "c3/job"
    info = sched.submit_dryrun(APP, {"imagePullPolicy": "Always"})
    assert info.cfg is not None and info.cfg["image_pull_policy"] == "Always"
    with pytest.raises(ValueError, match="did you mean cluster"):
        sched.submit_dryrun(APP, {"clustr": "x"})
