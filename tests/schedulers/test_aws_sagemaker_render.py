"""``aws_sagemaker``: golden ``create_training_job`` requests and the offline errors (pure;
``tests/e2e/test_aws_sagemaker_e2e.py`` submits them to moto's server).

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenDir
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.aws_sagemaker.options import AwsSageMakerOpts
from tether.schedulers.aws_sagemaker.render import (
    AwsSageMakerRenderError,
    check,
    format_request,
    render,
)
from tether.schedulers.aws_sagemaker.status import app_state, status_message
from tether.specs import AppDef, AppState, Role, get_named_resource
from tether.specs.overlays import DEL, OverlayError, set_overlay

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "aws_sagemaker", suffix=".json", end="\n")
ROLE_ARN = "arn:aws:iam::123456789012:role/sm"


def opts(**kw: Any) -> AwsSageMakerOpts:
    return AwsSageMakerOpts(role_arn=ROLE_ARN, output_path="s3://bucket/out", **kw)


def trainer(n: int = 1, **kw: Any) -> Role:
    return Role("trainer", image="trainer:1", entrypoint="python",
                args=["-m", "train", "--app", "${app_id}", "--rank", "${replica_id}"],
                env={"LR": "0.1", "HF_TOKEN": "sekrit"}, num_replicas=n,
                resource=get_named_resource("aws_g5.2xlarge"), **kw)


def test_golden_single_instance() -> None:
    app = AppDef("train", [trainer()], metadata={JOB_KEY: "dag/run 1/t"})
    req = render(app, opts(hyperparameters={"epochs": "3"}, tags={"team": "ml"}),
                 "us-west-2", "train-abcd1234")
    text = format_request(req)
    assert "sekrit" not in text
    assert req.request["ResourceConfig"]["InstanceType"] == "ml.g5.2xlarge"
    assert req.request["AlgorithmSpecification"]["ContainerArguments"][3] == req.app_id
    GOLDEN.check("single", text)


def test_golden_multi_instance_spot_with_checkpoints() -> None:
    o = opts(instance_type="ml.p4d.24xlarge", spot=True, max_runtime_s=3600,
             checkpoint_s3_uri="s3://bucket/ckpt", image_repo="1.dkr.ecr.us-west-2.amazonaws.com")
    check(AppDef("ddp", [trainer(4)]), o)
    req = render(AppDef("ddp", [trainer(4)]), o, "us-west-2", "ddp-abcd1234")
    assert req.request["ResourceConfig"]["InstanceCount"] == 4
    assert req.request["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600,
                                                "MaxWaitTimeInSeconds": 7200}
    GOLDEN.check("multi_spot", format_request(req))


def test_multi_instance_script_sets_replica_id(tmp_path: Path) -> None:
    import subprocess

    req = render(AppDef("ddp", [Role("w", image="i", entrypoint="echo",
                                     args=["${replica_id}"], num_replicas=2)]),
                 opts(instance_type="ml.m5.xlarge"), "us-west-2", "ddp-1")
    script = req.request["AlgorithmSpecification"]["ContainerEntrypoint"][2]
    conf = tmp_path / "resourceconfig.json"
    conf.write_text('{"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}')
    script = script.replace("/opt/ml/input/config/resourceconfig.json", str(conf))
    out = subprocess.run(["/bin/sh", "-c", script + '\n'], capture_output=True, text=True)
    assert out.stdout == "1\n", out.stderr
    assert req.request["Environment"]["TETHER_RANK0_HOST"] == "algo-1"


def test_multi_role_rejected_clearly() -> None:
    sched = get_scheduler_factory("aws_sagemaker")("t", region="us-west-2")
    app = AppDef("two", [trainer(), Role("ps", image="ps", entrypoint="ps")])
    with pytest.raises(ValueError, match="2 roles; aws_sagemaker runs at most 1"):
        sched.submit_dryrun(app, {"role_arn": ROLE_ARN, "output_path": "s3://b/o"})
    with pytest.raises(AwsSageMakerRenderError, match="use aws_batch or kubernetes"):
        check(app, opts())


@pytest.mark.parametrize(("kw", "words"), [
    ({"output_path": "/local"}, ["output_path='/local'", "s3://"]),
    ({"max_wait_s": 10}, ["max_wait_s", "spot=True"]),
    ({"spot": True, "max_wait_s": 10}, ["max_wait_s=10", "max_runtime_s=86400"]),
])
def test_bad_options(kw: dict[str, Any], words: list[str]) -> None:
    base = {"role_arn": ROLE_ARN, "output_path": "s3://bucket/out"}
    with pytest.raises(AwsSageMakerRenderError) as e:
        check(AppDef("a", [trainer()]), AwsSageMakerOpts(**{**base, **kw}))
    for w in words:
        assert w in str(e.value)


def test_no_instance_type_names_both_ways() -> None:
    app = AppDef("a", [Role("r", image="i", entrypoint="e")])
    with pytest.raises(AwsSageMakerRenderError, match=r"instance_type=ml\.<type>.*aws_"):
        check(app, opts())


@pytest.mark.parametrize(("job", "state"), [
    ({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting"}, AppState.PENDING),
    ({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}, AppState.RUNNING),
    ({"TrainingJobStatus": "Completed"}, AppState.SUCCEEDED),
    ({"TrainingJobStatus": "Failed"}, AppState.FAILED),
    ({"TrainingJobStatus": "Stopping"}, AppState.RUNNING),
    ({"TrainingJobStatus": "Stopped"}, AppState.CANCELLED),
])
def test_status_table(job: dict[str, str], state: AppState) -> None:
    assert app_state(job) == state


def test_failure_reason_in_message() -> None:
    job = {"TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError: exit code 3",
           "SecondaryStatusTransitions": [{"Status": "Failed", "StatusMessage": "Training failed"}]}
    assert status_message(job) == "AlgorithmError: exit code 3; Failed: Training failed"


def test_overlays_merge_into_the_request_last_app_then_role() -> None:
    role = trainer()
    app = AppDef("train", [role])
    set_overlay(app, "aws_sagemaker", "CreateTrainingJob",
                {"VpcConfig": {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]},
                 "ResourceConfig": {"VolumeSizeInGB": 50}})
    set_overlay(role, "aws_sagemaker", "CreateTrainingJob",
                {"ResourceConfig": {"KeepAlivePeriodInSeconds": 600},
                 DEL("OutputDataConfig"): None})
    req = render(app, opts(), "us-west-2", "train-abcd1234")
    GOLDEN.check("overlay", format_request(req))
    assert req.request["ResourceConfig"]["VolumeSizeInGB"] == 50
    assert req.request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600
    assert "OutputDataConfig" not in req.request


def test_an_overlay_cannot_rename_the_job() -> None:
    role = trainer()
    set_overlay(role, "aws_sagemaker", "CreateTrainingJob", {"TrainingJobName": "other"})
    with pytest.raises(OverlayError, match="TrainingJobName"):
        render(AppDef("train", [role]), opts(), "us-west-2", "train-abcd1234")
