"""Spec objects behave as a TorchX user's code and tests expect after renaming the import."""

from __future__ import annotations

import json
from typing import Any

from tether.schedulers.kubernetes import create_scheduler
from tether.specs import (
    AppDef,
    AppState,
    AppStatus,
    ReplicaStatus,
    Role,
    RoleStatus,
    parse_app_handle,
)


def test_parse_app_handle_unpacks() -> None:
    scheduler, session, app_id = parse_app_handle("kubernetes://tether/ns:my-job-1")
    assert (scheduler, session, app_id) == ("kubernetes", "tether", "ns:my-job-1")
    assert parse_app_handle("local_cwd://s/x").app_id == "x"


def test_replica_status_fields_and_app_status_to_json() -> None:
    rep = ReplicaStatus(
        0, AppState.FAILED, "trainer", hostname="h0",
        structured_error_msg='{"message": "boom"}', hostaddr="10.0.0.7",
    )  # fmt: skip
    status = AppStatus(
        AppState.FAILED, msg="failed", ui_url="http://ui", roles=[RoleStatus("trainer", [rep])]
    )
    doc = status.to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["state"] == "FAILED" and doc["url"] == "http://ui" and doc["msg"] == "failed"
    roles = doc["roles"]
    assert isinstance(roles, list) and len(roles) == 1
    role: dict[str, Any] = roles[0]
    assert role["replicas"][0]["hostaddr"] == "10.0.0.7"
    assert role["replicas"][0]["structured_error_msg"] == '{"message": "boom"}'
    assert status.to_json(filter_roles=["ps"])["roles"] == []


def test_dryrun_info_exposes_app_and_cfg() -> None:
    app = AppDef("hello", roles=[Role("echo", image="busybox", entrypoint="echo")])
    info = create_scheduler("s").submit_dryrun(app, {"namespace": "ml"})
    assert info.app is not None and info.app.name == "hello"
    assert info.cfg is not None and info.cfg["namespace"] == "ml"
    assert info.scheduler == "kubernetes"
    assert info._app is info.app  # the private names keep working


def test_role_overrides_are_computed_once_when_resolved() -> None:
    calls: list[str] = []

    def image() -> str:
        calls.append("image")
        return "registry/img:built"

    async def args() -> list[str]:
        return ["--lr", "0.1"]

    role = Role("r", image="placeholder", entrypoint="python",
                overrides={"image": image, "args": args()})  # fmt: skip
    assert calls == [] and role.image == "placeholder"  # reading a field runs no user code
    role.resolve_overrides()
    assert role.image == "registry/img:built" and role.args == ["--lr", "0.1"]
    assert calls == ["image"] and role.overrides == {}
    role.resolve_overrides()  # nothing pending: computed once
    assert calls == ["image"]
    assert Role("x").overrides == {}


def test_pending_overrides_resolved_before_render() -> None:
    role = Role("echo", image="busybox", entrypoint="echo", overrides={"args": lambda: ["hi"]})
    info = create_scheduler("s").submit_dryrun(AppDef("a", roles=[role]), {})
    assert "- hi" in str(info)


def test_named_resources_is_a_mapping_of_fresh_resources() -> None:
    from tether.specs import get_named_resources, named_resources, resource

    p3 = named_resources["aws_p3.2xlarge"]
    assert (p3.cpu, p3.gpu, p3.memMB) == (8, 1, 61 * int(1024 * 0.96))
    p3.capabilities["x"] = "1"
    assert "x" not in named_resources["aws_p3.2xlarge"].capabilities
    assert "gpu.small" in named_resources and "aws_inf2.48xlarge" in list(named_resources)
    for name in ("aws_p5.48xlarge", "aws_g6.xlarge", "aws_g6e.48xlarge", "aws_trn2.48xlarge"):
        assert named_resources[name].cpu > 0
    assert get_named_resources("gpu.small") == resource(h="gpu.small")
    assert resource() == resource(cpu=2, gpu=0, memMB=1024)  # TorchX's default resource


def test_unknown_named_resource_key_error_suggests() -> None:
    import pytest

    from tether.specs import named_resources

    with pytest.raises(KeyError, match=r"did you mean gpu\.small"):
        named_resources["gpu.smal"]


def test_named_resources_call_form_still_returns_factories() -> None:
    from tether.specs import Resource, named_resources

    factories = named_resources()
    assert isinstance(factories["gpu.small"](), Resource)
    assert set(factories) == set(named_resources)


def test_describe_app_response_has_torchx_fields() -> None:
    from tether.schedulers.api import DescribeAppResponse

    resp = DescribeAppResponse(app_id="a", metadata={"cluster": "c1"}, structured_error_msg="{}")
    assert resp.metadata == {"cluster": "c1"} and resp.ui_url is None
    assert DescribeAppResponse().metadata == {}
