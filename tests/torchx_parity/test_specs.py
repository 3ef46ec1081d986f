"""TorchX's ``torchx.specs`` unit-test expectations, renamed to tether."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from unittest.mock import MagicMock

import pytest

from tether import specs
from tether.schedulers.local_scheduler import create_scheduler
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    AppStatus,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    SpecError,
    macros,
    named_resources,
    parse_mounts,
)
from tether.specs.resources import resource_tags

ERROR_MSG = '{"message":{"message":"error","errorCode":-1,"extraInfo":{"timestamp":1293182}}}'


@pytest.fixture
def london() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/London"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = old
    time.tzset()


def _status() -> AppStatus:
    failed = ReplicaStatus(0, AppState.FAILED, "worker", hostname="localhost",
                           structured_error_msg=ERROR_MSG)  # fmt: skip
    running = ReplicaStatus(1, AppState.RUNNING, "worker", hostname="localhost")
    return AppStatus(AppState.RUNNING, roles=[RoleStatus("worker", [failed, running])])


def test_resource_is_fractional_reads_its_tag() -> None:
    assert not Resource(cpu=4, gpu=1, memMB=1024).is_fractional()
    assert Resource(4, 1, 1024, tags={resource_tags.IS_FRACTIONAL: True}).is_fractional()
    assert not Resource(4, 1, 1024, tags={resource_tags.IS_FRACTIONAL: False}).is_fractional()


def test_resource_get_resource_name() -> None:
    assert Resource(cpu=4, gpu=1, memMB=1024).get_resource_name() is None
    tagged = Resource(4, 1, 1024, tags={resource_tags.RESOURCE_NAME: "gpu_4"})
    assert tagged.get_resource_name() == "gpu_4"


def test_named_resources_round_trip_their_names() -> None:
    for name in named_resources:
        if name in ("NULL", "MISSING"):
            continue
        assert specs.resource(h=name).get_resource_name() == name


def test_copy_carries_devices_and_tags_without_sharing_them() -> None:
    res = Resource(1, 2, 3, devices={"vpc.amazonaws.com/efa": 4}, tags={"resource_name": "t"})
    new = Resource.copy(res)
    assert new.devices == {"vpc.amazonaws.com/efa": 4} and new.tags == {"resource_name": "t"}
    new.devices["nvidia.com/gpu"] = 1
    new.tags["extra"] = "x"
    assert res.devices == {"vpc.amazonaws.com/efa": 4} and res.tags == {"resource_name": "t"}


def test_app_status_format_shows_replica_error_details(london: None) -> None:
    expected = """AppStatus:
    State: RUNNING
    Num Restarts: 0
    Roles:
 *worker[0]:FAILED (exitcode: -1)
        timestamp: 1970-01-16 00:13:02
        hostname: localhost
        error_msg: error
  worker[1]:RUNNING
    Msg:
    Structured Error Msg: <NONE>
    UI URL: None
    """
    assert _status().format().split() == expected.split()


def test_app_status_format_flat_error_schema_and_missing_fields(london: None) -> None:
    flat = ('{"message": "InjectedFailure: boom", "timestamp": 1293182, "errorCode": 1}')
    rep = ReplicaStatus(0, AppState.FAILED, "worker", hostname="localhost",
                        structured_error_msg=flat)  # fmt: skip
    text = AppStatus(AppState.RUNNING, roles=[RoleStatus("worker", [rep])]).format()
    assert "FAILED (exitcode: 1)" in text and "timestamp: 1970-01-16 00:13:02" in text
    assert "error_msg: InjectedFailure: boom" in text
    rep.structured_error_msg = '{"message":{"message":"test error"}}'
    text = AppStatus(AppState.RUNNING, roles=[RoleStatus("worker", [rep])]).format()
    assert "FAILED (exitcode: <N/A>)" in text and "timestamp: <N/A>" in text
    for odd in ('["not", "a", "dict"]', '{"error": "no message key"}', "worker killed"):
        rep.structured_error_msg = odd
        assert odd in AppStatus(AppState.RUNNING, roles=[RoleStatus("worker", [rep])]).format()


def test_app_status_format_wraps_and_trims_rpc_errors() -> None:
    rpc = """RuntimeError('On WorkerInfo(id=1, name=trainer:0:0):
RuntimeError(ShardingError('Table of size 715.26GB cannot be added to any rank'))
Traceback (most recent call last):
..
')
Traceback (most recent call last):
  File "/dev/shm/internal.py", line 190, in _run_function
"""
    expected = """RuntimeError('On WorkerInfo(id=1, name=trainer:0:0):
RuntimeError(ShardingError('Table
 of size 715.26GB cannot be added to any rank'))
Traceback (most recent call last):
..
')"""
    from tether.specs.status_format import wrap_error

    assert wrap_error(rpc, header="", width=80) == expected


def test_app_status_repr_is_torchx_yaml() -> None:
    assert repr(AppStatus(AppState.FAILED)) == """AppStatus:
  msg: ''
  num_restarts: 0
  roles: []
  state: FAILED (5)
  structured_error_msg: <NONE>
  ui_url: null
"""
    embedded = AppStatus(AppState.FAILED, structured_error_msg='{"message": "test error"}')
    assert "structured_error_msg:\n    message: test error\n" in repr(embedded)
    assert "worker terminated by SIGKILL" in repr(
        AppStatus(AppState.FAILED, structured_error_msg="worker terminated by SIGKILL")
    )


def test_app_status_to_json_gives_replica_states_as_numbers() -> None:
    assert _status().to_json() == {
        "state": "RUNNING",
        "num_restarts": 0,
        "roles": [{"role": "worker", "replicas": [
            {"id": 0, "state": 5, "role": "worker", "hostname": "localhost",
             "structured_error_msg": ERROR_MSG, "hostaddr": "localhost"},
            {"id": 1, "state": 3, "role": "worker", "hostname": "localhost",
             "structured_error_msg": "<NONE>", "hostaddr": "localhost"},
        ]}],
        "msg": "",
        "structured_error_msg": "<NONE>",
        "url": None,
    }  # fmt: skip


def test_raise_for_status_names_the_state() -> None:
    AppStatus(AppState.SUCCEEDED).raise_for_status()
    with pytest.raises(specs.AppStatusError, match=r"(?s)job did not succeed:.*CANCELLED.*"):
        AppStatus(AppState.CANCELLED).raise_for_status()


def test_dryrun_info_repr_calls_the_formatter_once() -> None:
    request, to_string = MagicMock(), MagicMock()
    info = AppDryRunInfo(request, to_string)
    info.__repr__()
    to_string.assert_called_once_with(request)
    assert info.request is request


def test_dryrun_info_cfg_is_empty_and_read_only_until_set() -> None:
    info = AppDryRunInfo(MagicMock(), repr)
    assert info.app is None and dict(info.cfg) == {}
    info._cfg = {"cluster": "foo"}
    with pytest.raises(TypeError):
        info.cfg["cluster"] = "bar"  # type: ignore[index]
    assert dict(info.cfg) == {"cluster": "foo"}


def test_macros_apply_substitutes_nested_metadata_and_shares_overrides() -> None:
    async def image() -> str:
        return "img"

    coro = image()
    role = Role("r", image="i", entrypoint="e", args=[macros.app_id],
                metadata={"a": {"b": [macros.replica_id, {"c": macros.img_root}]}, "n": 1},
                overrides={"image": coro})  # fmt: skip
    out = macros.Values(img_root="/root", app_id="app", replica_id="3",
                        rank0_env="MASTER_ADDR").apply(role)  # fmt: skip
    coro.close()
    assert out.args == ["app"]
    assert out.metadata == {"a": {"b": ["3", {"c": "/root"}]}, "n": 1}
    assert out.overrides is role.overrides
    assert role.metadata["a"]["b"][0] == macros.replica_id  # the input is untouched


def test_parse_mounts_expands_home_in_bind_sources() -> None:
    (bind,) = parse_mounts(["type=bind", "src=~/data", "dst=/data", "readonly"])
    assert isinstance(bind, specs.BindMount)
    assert bind.src_path == os.path.expanduser("~/data") and bind.read_only


def test_parse_mounts_needs_type_first_and_known_options() -> None:
    with pytest.raises(KeyError):
        parse_mounts(["src=/a", "dst=/b"])
    with pytest.raises(KeyError):
        parse_mounts(["type=bind", "src=/a", "dst=/b", "bogus=1"])
    with pytest.raises(ValueError, match="unknown type 'nfs'"):
        parse_mounts(["type=nfs", "src=/a", "dst=/b"])


def test_role_is_checked_at_dryrun_not_construction() -> None:
    role = Role("trainer", image="img", entrypoint="train.py", num_replicas=0)
    role.num_replicas = 2  # fixed before submission: fine
    assert role.num_replicas == 2
    bad = AppDef("app", roles=[Role("trainer", entrypoint="echo", num_replicas=0)])
    with pytest.raises(SpecError, match="num_replicas = 0"):
        create_scheduler("s").submit_dryrun(bad, {})


def test_role_defaults() -> None:
    default = Role("foobar", "torch")
    assert (default.name, default.image, default.args, default.env) == ("foobar", "torch", [], {})
    assert default.resource == specs.NULL_RESOURCE
    assert (default.num_replicas, default.max_retries) == (1, 0)
    assert default.retry_policy == specs.RetryPolicy.APPLICATION


def test_aws_named_resources_are_factory_functions() -> None:
    from tether.specs import named_resources_aws

    assert named_resources_aws.aws_m5_2xlarge() == named_resources["aws_m5.2xlarge"]
    assert named_resources_aws.aws_t3_medium() == named_resources["aws_t3.medium"]
    assert named_resources_aws.aws_p3_8xlarge() == named_resources["aws_p3.8xlarge"]
    with pytest.raises(AttributeError):
        named_resources_aws.aws_no_such_type  # noqa: B018


def test_instance_type_from_resource() -> None:
    from tether.specs.named_resources_aws import instance_type_from_resource

    assert instance_type_from_resource(named_resources["aws_p4d.24xlarge"]) == "p4d.24xlarge"
    with pytest.warns(UserWarning, match="instance type"):
        assert instance_type_from_resource(Resource(1, 0, 64)) is None


def test_async_override_is_resolved_before_render() -> None:
    async def entry() -> str:
        await asyncio.sleep(0)
        return "nentry"

    role = Role("foobar", "torch", overrides={"entrypoint": entry()})
    role.resolve_overrides()  # the one-line change of the migration guide
    assert role.entrypoint == "nentry"
