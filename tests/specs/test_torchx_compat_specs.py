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


def test_role_overrides_default_empty_and_settable() -> None:
    assert Role("r").overrides == {}
    assert Role("r", overrides={"hostNetwork": True}).overrides == {"hostNetwork": True}
