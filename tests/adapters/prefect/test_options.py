"""Caching, result persistence, ``with_options``, the async variant and per-child artifacts,
in real flows against the session's Prefect server, jobs on ``local_cwd``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.prefect.conftest import wait_until
from tether.adapters.common import JobResult
from tether.runner import get_runner
from tether.specs import AppDef, AppState

pytestmark = pytest.mark.usefixtures("prefect_test")

PID_CODE = (
    "import os\nfrom tether.tracker import AppRun\n"
    "AppRun.run_from_env().add_output('env', os.environ.get('CACHE_ENV', ''))\n"
)


def python_again(c: str) -> AppDef:
    """Runs ``python -c`` exactly as ``utils.python`` does: only the component differs.

    Args:
        c: Program passed as a string.
    """
    from tether.components import utils

    return utils.python(c=c)


def _apps() -> list[Any]:
    with get_runner() as runner:
        return runner.list("local_cwd")


def test_job_inputs_cache_reuses_a_result_until_any_input_changes() -> None:
    """Same inputs: the cached result (also in a new flow run, also with the scheduler left
    to the configured default); a changed component, argument, env, image or cfg: a new
    job (a changed scheduler: ``test_local_docker.py``). Secret env values are stored
    nowhere (the key is a hash of their hashes)."""
    import os

    from prefect import flow

    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.cache import JOB_INPUTS

    salt = uuid.uuid4().hex  # a fresh cache for this test (the result store is per session)
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    env = {"SALT": salt, "API_TOKEN": secret}
    py = component_task("utils.python", scheduler="local_cwd", cache_policy=JOB_INPUTS, env=env)
    other_component = component_task(python_again, scheduler="local_cwd",
                                     cache_policy=JOB_INPUTS, env=env)

    @flow
    def cached(variant: str) -> list[JobResult]:
        base = py(c=PID_CODE)
        again = py(c=PID_CODE)  # same inputs, same flow run: taken from the cache
        if variant == "component":
            other = other_component(c=PID_CODE)
        elif variant == "args":
            other = py(c=PID_CODE + "\n# changed\n")
        elif variant == "env":
            other = py.with_options(env={**env, "CACHE_ENV": "x"})(c=PID_CODE)
        elif variant == "secret":
            other = py.with_options(env={**env, "API_TOKEN": secret + "-rotated"})(c=PID_CODE)
        elif variant == "image":
            other = py.with_options(image="another:1")(c=PID_CODE)
        elif variant == "cfg":
            other = py.with_options(cfg={"grace_period": 3.0})(c=PID_CODE)
        else:  # the scheduler left to the configured default, which is local_cwd here
            other = py.with_options(scheduler=None)(c=PID_CODE)
        return [base, again, other]

    state = cached("none", return_state=True)
    assert state.is_completed(), state.message
    base, again, other = state.result()
    assert base.app_handle == again.app_handle == other.app_handle
    assert len(_apps()) == 1
    # a new flow run takes the cached result too
    assert cached("none")[0].app_handle == base.app_handle
    assert len(_apps()) == 1
    jobs = 1
    for variant in ("component", "args", "env", "secret", "image", "cfg"):
        results = cached(variant)
        assert results[0].app_handle == base.app_handle
        assert results[2].app_handle != base.app_handle, variant  # a changed input: a new job
        jobs += 1
        assert len(_apps()) == jobs, variant
        assert results[2].state == AppState.SUCCEEDED, variant

    # secret values are hashed, never stored: the result store's records (named by their
    # cache keys, "tether-<hash>") hold neither the value nor its name's value
    storage = Path(os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"])
    stored = [p for p in storage.rglob("*") if p.is_file()]
    assert [p for p in stored if p.name.startswith("tether-")], stored
    for path in stored:
        assert secret not in path.name
        assert secret.encode() not in path.read_bytes(), path


def _same_key(ctx: Any, parameters: dict[str, Any]) -> str:
    """A user's ``cache_key_fn`` that keys on nothing tether runs."""
    return "one-key-for-everything"


@pytest.mark.parametrize("policy", ["INPUTS", "DEFAULT", "TASK_SOURCE", "cache_key_fn"])
def test_prefect_policies_never_share_an_entry_between_components_or_options(
        policy: str) -> None:
    """Prefect's own policies (and a custom key function) key on what Prefect sees: every
    component task shares one function, so unscoped they would hand one component's result
    to another. Scoped, only the same component with the same options shares an entry, and
    secret env values are stored nowhere."""
    import os

    from prefect import cache_policies, flow

    from tether.adapters.prefect import component_task

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    env = {"SALT": uuid.uuid4().hex, "API_TOKEN": secret}
    option: dict[str, Any] = ({"cache_key_fn": _same_key} if policy == "cache_key_fn"
                              else {"cache_policy": getattr(cache_policies, policy)})
    py = component_task("utils.python", scheduler="local_cwd", env=env, **option)
    other_component = component_task(python_again, scheduler="local_cwd", env=env, **option)

    @flow
    def cached() -> list[JobResult]:
        return [
            py(c=PID_CODE),
            py(c=PID_CODE),  # the same component and options: the cached entry
            other_component(c=PID_CODE),
            py.with_options(env={**env, "API_TOKEN": secret + "-rotated"})(c=PID_CODE),
            py.with_options(cfg={"grace_period": 3.0})(c=PID_CODE),
            py.with_options(image="another:1")(c=PID_CODE),
        ]

    state = cached(return_state=True)
    assert state.is_completed(), state.message
    base, again, *others = state.result()
    assert again.app_handle == base.app_handle
    handles = [base.app_handle] + [r.app_handle for r in others]
    assert len(set(handles)) == len(handles), handles  # each ran its own job
    assert all(r.state == AppState.SUCCEEDED for r in others)
    storage = Path(os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"])
    for path in (p for p in storage.rglob("*") if p.is_file()):
        assert secret not in path.name
        assert secret.encode() not in path.read_bytes(), path


def test_cache_key_covers_scheduler_and_hashes_env_values() -> None:
    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.task import SPEC_ATTR

    py = component_task("utils.python", scheduler="local_cwd", env={"TOKEN": "s3cr3t-value"})
    spec = getattr(py.fn, SPEC_ATTR)
    other = getattr(py.with_options(scheduler="local_docker").fn, SPEC_ATTR)
    assert other.scheduler == "local_docker" and spec.scheduler == "local_cwd"
    assert spec.digest() != other.digest()
    rotated = getattr(py.with_options(env={"TOKEN": "rotated"}).fn, SPEC_ATTR)
    assert rotated.digest() != spec.digest()
    assert "s3cr3t-value" not in repr(spec.digest())


def test_persist_result_stores_the_result_where_prefect_keeps_results() -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd", persist_result=True)

    @flow
    def persisted_flow() -> str:
        return py(c=PID_CODE).app_handle

    state = persisted_flow(return_state=True)
    assert state.is_completed(), state.message
    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None

    def task_state() -> Any:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        return runs[0].state if runs and runs[0].state and runs[0].state.is_final() else None

    stored = wait_until(task_state, 20, "the task run's final state")
    result = stored.result()  # read back from the result storage, not from memory
    assert isinstance(result, JobResult) and result.state == AppState.SUCCEEDED
    storage = Path(__import__("os").environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"])
    assert any(p.name.startswith("tether-run-prefect-") for p in storage.iterdir())


def test_with_options_changes_scheduler_cfg_image_and_keeps_prefect_options() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.task import SPEC_ATTR

    py = component_task("utils.python", scheduler="local_cwd", retries=2)
    variant = py.with_options(image="img:2", cfg={"grace_period": 3.0}, retries=1, name="v")
    spec = getattr(variant.fn, SPEC_ATTR)
    assert (spec.image, dict(spec.cfg), spec.scheduler) == ("img:2", {"grace_period": 3.0},
                                                           "local_cwd")
    assert variant.retries == 1 and variant.name == "v"
    assert type(variant) is type(py)
    assert variant.with_options(retries=0).retries == 0
    with pytest.raises(ValueError, match="poll_interval must be positive"):
        py.with_options(poll_interval=0)

    @flow
    def uses_variant() -> JobResult:
        return variant(c=PID_CODE)

    assert uses_variant().state == AppState.SUCCEEDED


def test_async_flow_runs_ten_tasks_concurrently() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd", asynchronous=True)
    code = ("import time\nfrom tether.tracker import AppRun\nrun = AppRun.run_from_env()\n"
            "run.add_output('start', time.time())\ntime.sleep(2)\n"
            "run.add_output('end', time.time())\n")

    @flow
    async def many() -> list[JobResult]:
        return list(await asyncio.gather(*[py(c=code + f"# {i}\n") for i in range(10)]))

    results = asyncio.run(many())
    assert len({r.app_handle for r in results}) == 10
    assert all(r.state == AppState.SUCCEEDED for r in results)
    # all ten ran at the same time
    assert max(r.outputs["start"] for r in results) < min(r.outputs["end"] for r in results)
    assert len(_apps()) == 10


def test_mapped_children_publish_their_own_artifacts() -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from tether.adapters.prefect import component_task

    py = component_task("utils.python", scheduler="local_cwd", name="child")

    @flow
    def mapped() -> list[JobResult]:
        return [f.result() for f in py.map(c=[f"print({i})" for i in range(3)])]

    state = mapped(return_state=True)
    assert state.is_completed(), state.message
    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    keys = sorted(str(a.key) for a in arts if a.type == "markdown")
    assert keys == ["tether-child", "tether-child-1", "tether-child-2"], keys
    handles = {r.app_handle for r in state.result()}
    assert len(handles) == 3
    assert all(any(h in str(a.data) for a in arts) for h in handles)
