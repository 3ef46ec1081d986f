"""``aws_batch``: golden ``register_job_definition``/``submit_job`` requests, the status table
and the offline errors (pure: no AWS, no moto; the e2e tests run the jobs).

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenDir
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.aws_batch.options import AwsBatchOpts
from tether.schedulers.aws_batch.render import (
    AwsBatchRenderError,
    check,
    format_request,
    node_script,
    parse_app_id,
    render,
    tag_value,
)
from tether.schedulers.aws_batch.status import CANCEL_REASON, app_state, status_message
from tether.schedulers.aws_client import AwsClientError, resolve_image, resolve_region
from tether.schedulers.capabilities import UnsupportedFeatureError
from tether.specs import (
    AppDef,
    AppState,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    SecretRef,
    VolumeMount,
    get_named_resource,
)
from tether.specs.overlays import set_overlay

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "aws_batch", suffix=".json", end="\n")


def opts(**kw: Any) -> AwsBatchOpts:
    return AwsBatchOpts(queue=kw.pop("queue", "gpu-queue"), **kw)


# ---- golden renders ------------------------------------------------------------------------
def test_golden_container_job() -> None:
    role = Role("echo", image="busybox:1.36", entrypoint="echo",
                args=["hello", "${app_id}", "r${replica_id}"],
                env={"LR": "0.1", "HF_TOKEN": "sekrit"},
                resource=Resource(cpu=0.5, gpu=0, memMB=512))
    app = AppDef("hello world!", [role], metadata={JOB_KEY: "dag/run 1/task"})
    req = render(app, opts(tags={"team": "ml"}), "eu-west-1", "hello-world-abcd1234")
    text = format_request(req)
    assert "sekrit" not in text
    assert req.app_id == "eu-west-1:gpu-queue:hello-world-abcd1234"
    overrides = req.submit["containerOverrides"]
    assert overrides["command"] == ["echo", "hello", req.app_id, "r0"]
    GOLDEN.check("container", text)


def test_golden_multi_node_per_replica_with_everything() -> None:
    res = get_named_resource("aws_p4d.24xlarge")
    trainer = Role(
        "trainer", image="trainer:1", entrypoint="python",
        args=["-m", "train", "--rank", "${replica_id}"], num_replicas=2, resource=res,
        env={"NCCL_DEBUG": "INFO"}, max_retries=2, retry_policy=RetryPolicy.APPLICATION,
        mounts=[BindMount("/data", "/mnt/data", read_only=True),
                VolumeMount("fs-0123:/ckpt", "/mnt/ckpt"),
                DeviceMount("/dev/fuse", "/dev/fuse", "rw")],
        secrets={"WANDB_API_KEY": SecretRef("arn:aws:secretsmanager:us-east-1:1:secret:w", "key")},
    )
    set_overlay(trainer, "aws_batch", "ContainerProperties",
                {"linuxParameters": {"initProcessEnabled": True}})
    ps = Role("ps", image="ps:1", entrypoint="ps-server", resource=get_named_resource(
        "aws_p4d.24xlarge"))
    app = AppDef("ddp", [trainer, ps])
    o = opts(image_repo="123.dkr.ecr.us-east-1.amazonaws.com", job_role_arn="arn:job",
             execution_role_arn="arn:exec", share_identifier="blue", priority=7,
             timeout_s=3600, privileged=True, ulimits=["nofile=65536:65536"], shm_size_mb=8192)
    check(app, o)
    req = render(app, o, "us-east-1", "ddp-abcd1234")
    props = req.job_definition["nodeProperties"]
    assert props["numNodes"] == 3
    assert [n["targetNodes"] for n in props["nodeRangeProperties"]] == ["0:0", "1:1", "2:2"]
    assert req.job_definition["retryStrategy"]["attempts"] == 3
    GOLDEN.check("multinode_per_replica", format_request(req))


def test_golden_multi_node_per_role() -> None:
    role = Role("w", image="w:1", entrypoint="run", args=["--id=${replica_id}"], num_replicas=6,
                env={"TAG": "w-${replica_id}"}, resource=Resource(cpu=2, gpu=1, memMB=4096))
    req = render(AppDef("wide", [role]), opts(host_volumes=["/scratch:/scratch"]), "us-east-1",
                 "wide-abcd1234")
    (node,) = req.job_definition["nodeProperties"]["nodeRangeProperties"]
    assert node["targetNodes"] == "0:5"
    GOLDEN.check("multinode_per_role", format_request(req))


def test_equal_definitions_get_equal_names() -> None:
    role = Role("echo", image="busybox", entrypoint="echo", args=["a"])
    a = render(AppDef("x", [role]), opts(), "us-east-1", "x-1")
    role.args = ["b"]  # the command goes with the submission, not the definition
    b = render(AppDef("x", [role]), opts(), "us-east-1", "x-2")
    assert a.job_definition == b.job_definition
    role.image = "busybox:2"
    c = render(AppDef("x", [role]), opts(), "us-east-1", "x-3")
    assert c.job_definition["jobDefinitionName"] != a.job_definition["jobDefinitionName"]


def test_node_script_sets_rank0_host_and_replica_id(tmp_path: Path) -> None:
    import subprocess

    script = node_script(["sh", "-c", 'echo "$TETHER_RANK0_HOST/$TETHER_REPLICA_ID/$X/$1"',
                          "sh", "a'b"], {"X": "x-@@tether-replica-id@@"}, 2)
    env = {"PATH": os.environ["PATH"], "AWS_BATCH_JOB_NODE_INDEX": "5",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.1.2.3"}
    out = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True)
    assert out.stdout == "10.1.2.3/3/x-3/a'b\n", out.stderr


# ---- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize(("kw", "words"), [
    ({"timeout_s": 10}, ["timeout_s=10", "60"]),
    ({"ulimits": ["nofile"]}, ["ulimits", "'nofile'", "name=soft"]),
    ({"shm_size_mb": 0}, ["shm_size_mb=0"]),
    ({"host_volumes": ["scratch"]}, ["host_volumes", "'scratch'", "SRC:DST"]),
])
def test_bad_options_name_field_and_value(kw: dict[str, Any], words: list[str]) -> None:
    app = AppDef("a", [Role("r", image="i", entrypoint="e")])
    with pytest.raises(AwsBatchRenderError) as e:
        check(app, opts(**kw))
    for w in words:
        assert w in str(e.value)


def test_too_many_attempts_and_roles_rejected_at_dryrun() -> None:
    sched = get_scheduler_factory("aws_batch")("t", region="us-east-1")
    app = AppDef("a", [Role("r", image="i", entrypoint="e", max_retries=12)])
    with pytest.raises(AwsBatchRenderError, match=r"role 'r': max_retries=12 .* 10 attempts"):
        sched.submit_dryrun(app, {"queue": "q"})
    app = AppDef("a", [Role(f"r{i}", image="i", entrypoint="e") for i in range(6)])
    with pytest.raises(UnsupportedFeatureError, match="6 roles; aws_batch runs at most 5"):
        sched.submit_dryrun(app, {"queue": "q"})
    app = AppDef("a", [Role("r", image="i", entrypoint="e", max_retries=1,
                            retry_policy=RetryPolicy.REPLICA)])
    with pytest.raises(UnsupportedFeatureError, match="retry_policy=REPLICA"):
        sched.submit_dryrun(app, {"queue": "q"})


def test_dryrun_is_offline_and_no_region_names_the_variables(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    sched = get_scheduler_factory("aws_batch")("t")
    app = AppDef("a", [Role("r", image="i", entrypoint="e")])
    with pytest.raises(AwsClientError) as e:
        sched.submit_dryrun(app, {"queue": "q"})
    for word in ("region=", "$AWS_REGION", "$AWS_DEFAULT_REGION", "~/.aws/config"):
        assert word in str(e.value)
    # with a region, dryrun needs no credentials and no network
    info = sched.submit_dryrun(app, {"queue": "q", "region": "us-east-2"})
    assert info.request.app_id.startswith("us-east-2:q:a-")
    assert resolve_region("ap-south-1", None) == "ap-south-1"


def test_app_id_and_tags() -> None:
    assert parse_app_id("us-east-1:q:n-1") == ("us-east-1", "q", "n-1")
    with pytest.raises(AwsBatchRenderError, match="region:queue:job_name"):
        parse_app_id("nope")
    assert tag_value("dag/run 1/task") == "dag/run 1/task"
    assert tag_value("a,b").startswith("h-")
    assert resolve_image("team/train:1", "localhost") == "localhost/team/train:1"
    assert resolve_image("ghcr.io/team/train:1", "localhost") == "ghcr.io/team/train:1"
    assert resolve_image("host:5000/train", "r") == "host:5000/train"


# ---- status --------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "state"), [
    ("SUBMITTED", AppState.SUBMITTED), ("PENDING", AppState.PENDING),
    ("RUNNABLE", AppState.PENDING), ("STARTING", AppState.PENDING),
    ("RUNNING", AppState.RUNNING), ("SUCCEEDED", AppState.SUCCEEDED),
    ("FAILED", AppState.FAILED), ("WHAT", AppState.UNKNOWN),
])
def test_status_table(status: str, state: AppState) -> None:
    assert app_state({"status": status}) == state


def test_cancelled_and_failure_message() -> None:
    assert app_state({"status": "FAILED", "statusReason": CANCEL_REASON}) == AppState.CANCELLED
    job = {"status": "FAILED", "statusReason": "Essential container in task exited",
           "attempts": [{"container": {"exitCode": 1}},
                        {"container": {"exitCode": 3, "reason": "OutOfMemoryError"}}]}
    assert status_message(job) == (
        "Essential container in task exited; exit code 3; OutOfMemoryError; attempt 2")


def test_no_credentials_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                           ) -> None:
    pytest.importorskip("boto3")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role lookup
    sched = get_scheduler_factory("aws_batch")("t", region="us-east-1",
                                                endpoint_url="http://127.0.0.1:9")
    info = sched.submit_dryrun(AppDef("a", [Role("r", image="i", entrypoint="e")]),
                               {"queue": "q"})
    with pytest.raises(AwsClientError) as e:
        sched.schedule(info)
    for word in ("$AWS_ACCESS_KEY_ID", "$AWS_PROFILE", "~/.aws/credentials", "~/.aws/config"):
        assert word in str(e.value)


def test_clients_use_adaptive_retries() -> None:
    pytest.importorskip("boto3")
    from tether.schedulers.aws_client import MAX_ATTEMPTS, make_client

    client = make_client("batch", "us-east-1", endpoint_url="http://127.0.0.1:9")
    assert client.meta.config.retries["mode"] == "adaptive"
    assert client.meta.config.retries["total_max_attempts"] == MAX_ATTEMPTS
