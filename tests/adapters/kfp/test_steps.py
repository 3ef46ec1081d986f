"""Mode selection and the errors a pipeline author reads when a step cannot be built."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("kfp")

from kfp.dsl.pipeline_channel import PipelineParameterChannel

from tests.adapters.kfp import components as c
from tether.adapters.kfp import (
    LauncherOptions,
    NativeStepError,
    StepArgumentError,
    StepSettingError,
    step,
)
from tether.specs import AppDef, InvalidRunConfigException, Role, resource

COMP = "tests.adapters.kfp.components"


def channel(name: str, kind: str = "String") -> Any:
    """A pipeline value (what a pipeline parameter or upstream output is at compile time)."""
    return PipelineParameterChannel(name=name, channel_type=kind)


# ---- automatic mode ------------------------------------------------------------------------


def test_single_replica_on_kubernetes_is_native() -> None:
    plan = step(c.hello).plan(msg="hi")
    assert plan.mode == "native"
    assert plan.role is not None and plan.role.args == ["hi"]


@pytest.mark.parametrize(
    ("kwargs", "call", "reason"),
    [
        ({"scheduler": "local_cwd"}, {},
         "scheduler 'local_cwd' does not run its replicas as Kubernetes pods"),
        ({"cfg": {"cwd": "/tmp"}, "scheduler": "local_cwd"}, {}, "as Kubernetes pods"),
        ({"outputs": ["message"]}, {}, "outputs are declared"),
        ({"mode": "launcher"}, {}, "mode='launcher'"),
    ],
)
def test_launcher_when_native_cannot_stand_in(
    kwargs: dict[str, Any], call: dict[str, Any], reason: str
) -> None:
    plan = step(c.hello, **kwargs).plan(**call)
    assert plan.mode == "launcher"
    assert reason in plan.reason


def test_multi_role_app_is_launcher_with_reason() -> None:
    plan = step(c.pair).plan()
    assert plan.mode == "launcher"
    assert "has 2 roles (server, client)" in plan.reason


def test_multi_replica_builtin_ddp_is_launcher() -> None:
    plan = step("dist.ddp").plan(script="train.py", j="2x2")
    assert plan.mode == "launcher"
    assert "num_replicas=2" in plan.reason


def test_run_options_make_a_launcher_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # kubernetes run options are checked only where its scheduler can be created; the
    # launcher choice does not depend on that
    plan = step(c.hello, cfg={"namespace": "ml"}).plan()
    assert plan.mode == "launcher"
    assert "run options ['namespace']" in plan.reason


# ---- pipeline values -----------------------------------------------------------------------


def test_str_value_passed_through_stays_native_as_placeholder() -> None:
    plan = step(c.shout).plan(msg=channel("msg"))
    assert plan.mode == "native"
    assert plan.role is not None
    assert plan.role.args[-1] == "{{$.inputs.parameters['msg']}}"
    assert plan.runtime == ["msg"]


def test_value_spliced_into_shell_script_goes_to_launcher() -> None:
    plan = step(c.splice).plan(msg=channel("msg"))
    assert plan.mode == "launcher"
    assert "splices it into the script of 'sh -c'" in plan.reason


def test_forced_native_rejects_spliced_value_naming_parameter() -> None:
    with pytest.raises(NativeStepError) as e:
        step(c.splice, mode="native").plan(msg=channel("msg"))
    msg = str(e.value)
    assert "parameter 'msg' is wired to a pipeline value" in msg
    assert "mode='launcher'" in msg


def test_typed_pipeline_values_stay_native_as_placeholders() -> None:
    plan = step(c.fit).plan(lr=channel("lr", "Double"), epochs=channel("epochs", "Integer"),
                            fp16=channel("fp16", "Boolean"), tag=channel("tag"), gpu=2)
    assert plan.mode == "native", plan.reason
    assert plan.warnings == []
    assert plan.role is not None
    assert plan.role.args == [
        "-m", "trainer.fit", "--lr={{$.inputs.parameters['lr']}}",
        "--epochs", "{{$.inputs.parameters['epochs']}}",
        "--fp16", "{{$.inputs.parameters['fp16']}}",  # str(fp16).lower(): KFP's true/false
        "--tag", "{{$.inputs.parameters['tag']}}",
    ]
    assert plan.role.resource.gpu == 2 and plan.role.max_retries == 3


def per_gpu(gpu: int = 1) -> AppDef:
    """8 CPUs per GPU: the CPUs are computed from the parameter.

    Args:
        gpu: GPUs.

    Returns:
        The AppDef.
    """
    return AppDef("x", [Role("r", image="img", entrypoint="true",
                             resource=resource(cpu=8 * gpu, gpu=gpu, memMB=1024))])


def test_gpu_count_from_a_pipeline_value_stays_native() -> None:
    plan = step(c.fit).plan(lr=0.1, gpu=channel("gpu", "Integer"))
    assert plan.mode == "native", plan.reason
    assert plan.resources == {"gpu": "gpu"}  # KFP sets the accelerator limit from the value


def test_int_spliced_into_shell_script_stays_native() -> None:
    # a number cannot inject shell syntax (KFP checks its type); a str would go to launcher
    plan = step(c.shout).plan(msg=channel("msg"), times=channel("times", "Integer"))
    assert plan.mode == "native", plan.reason
    assert plan.role is not None
    assert "seq {{$.inputs.parameters['times']}}" in plan.role.args[1]


@pytest.mark.parametrize(
    ("component", "kwargs", "expected", "shape"),
    [
        (c.workers, {"msg": "x", "n": channel("n", "Integer")},
         "parameter 'n' decides role 'worker' num_replicas (the job's shape)", True),
        (per_gpu, {"gpu": channel("gpu", "Integer")},
         "parameter 'gpu' decides role 'r' resource.cpu", False),
        (c.scaled, {"epochs": channel("epochs", "Integer")},
         "parameter 'epochs': the component computes role 'scaled' args[0] from it", False),
        (c.bound, {"mounts": channel("mounts", "List")},
         "parameter 'mounts' has type Optional[List[str]]", False),
    ],
)
def test_value_the_job_depends_on_makes_a_launcher_step_and_says_so(
    component: Any, kwargs: dict[str, Any], expected: str, shape: bool
) -> None:
    plan = step(component).plan(**kwargs)
    assert plan.mode == "launcher"
    assert expected in plan.reason
    assert any(expected in w for w in plan.warnings)


def test_no_warning_when_launcher_anyway() -> None:
    plan = step(c.workers, scheduler="local_cwd").plan(msg="x", n=channel("n", "Integer"))
    assert plan.mode == "launcher" and plan.warnings == []
    assert step(c.workers, mode="launcher").plan(msg="x", n=channel("n", "Integer")
                                                 ).warnings == []


def test_value_the_component_consumes_cannot_be_native() -> None:
    # dist.ddp parses -j itself: the job cannot be built before the pipeline runs
    plan = step("dist.ddp").plan(script="train.py", j=channel("j"))
    assert plan.mode == "launcher"
    assert plan.app is None
    assert "cannot build its job before the pipeline runs" in plan.reason


# ---- what native steps cannot express --------------------------------------------------------


def test_bind_mount_rejected_naming_role_and_field() -> None:
    with pytest.raises(NativeStepError) as e:
        step(c.bound).plan(mounts=["type=bind,src=/host/data,dst=/data"])
    msg = str(e.value)
    assert "role 'bound': mounts[0] binds host path '/host/data'" in msg
    assert "mode='launcher'" in msg


@pytest.mark.parametrize(
    ("mount", "expected"),
    [
        ("type=device,src=/dev/fuse", "mounts[0] is device '/dev/fuse'"),
        ("type=volume,src=data,dst=/data,readonly", "mounts volume 'data' read-only"),
    ],
)
def test_other_mounts_rejected(mount: str, expected: str) -> None:
    with pytest.raises(NativeStepError, match="role 'bound'") as e:
        step(c.bound).plan(mounts=[mount])
    assert expected in str(e.value)


def test_extra_devices_rejected() -> None:
    with pytest.raises(NativeStepError) as e:
        step(c.trainer).plan(h="aws_p4d.24xlarge")
    assert "role 'trainer': resource.devices={'vpc.amazonaws.com/efa': 4}" in str(e.value)


def test_app_id_in_env_rejected() -> None:
    def env_app_id() -> AppDef:
        return AppDef("x", [Role("r", image="img", entrypoint="true",
                                 env={"RUN": "${app_id}"})])

    with pytest.raises(NativeStepError, match=r"role 'r': env RUN uses \$\{app_id\}"):
        step(env_app_id).plan()


def test_forced_native_multi_role_lists_why() -> None:
    with pytest.raises(NativeStepError, match=r"app 'pair' has 2 roles \(server, client\)"):
        step(c.pair, mode="native").plan()


def test_forced_native_with_outputs_rejected_at_creation() -> None:
    with pytest.raises(NativeStepError, match="need a launcher step"):
        step(c.hello, mode="native", outputs=["x"])


# ---- bad input -------------------------------------------------------------------------------


def test_unknown_argument_has_close_match() -> None:
    with pytest.raises(StepArgumentError, match=r"has no parameter 'mgs'; did you mean msg\?"):
        step(c.hello).plan(mgs="x")


def test_missing_required_argument() -> None:
    with pytest.raises(StepArgumentError, match=r"missing required argument.*: msg"):
        step(c.shout).plan()


def test_component_rejecting_constants_is_reported() -> None:
    with pytest.raises(StepArgumentError, match=r"dist\.ddp.*exactly one of --script and -m"):
        step("dist.ddp").plan()


def test_bad_mode_and_scheduler() -> None:
    bad_mode = r"mode='nativ' is not one of .*did you mean 'native'"
    with pytest.raises(StepSettingError, match=bad_mode):
        step(c.hello, mode="nativ")
    bad_scheduler = r"unknown scheduler 'local_cdw'; did you mean local_cwd"
    with pytest.raises(StepSettingError, match=bad_scheduler):
        step(c.hello, scheduler="local_cdw")


def test_unknown_run_option_checked_when_compiling() -> None:
    with pytest.raises(InvalidRunConfigException, match=r"'cdw'.*did you mean cwd"):
        step(c.hello, scheduler="local_cwd", cfg={"cdw": "/tmp"})


def test_run_options_are_taken_as_the_scheduler_takes_them() -> None:
    """A spelling the scheduler accepts (camelCase) is accepted when compiling too."""
    s = step(c.hello, scheduler="local_cwd", cfg={"logDir": "/tmp/logs", "grace_period": 2.0})
    assert s.cfg == {"logDir": "/tmp/logs", "grace_period": 2.0}


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (["app_handle"], "is reserved"),
        (["tether_metrics"], "is reserved"),
        (["not-an-id"], "must be Python identifiers"),
        ({"x": set}, "has type 'set'"),
        ("message", "not a string"),
    ],
)
def test_bad_outputs(outputs: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        step(c.hello, outputs=outputs)


def test_launcher_options_validated() -> None:
    with pytest.raises(ValueError, match="wait_interval must be > 0"):
        LauncherOptions(wait_interval=0)


def test_signature_lists_component_parameters() -> None:
    sig = step(c.trainer).signature
    assert list(sig.parameters) == ["lr", "epochs", "gpu", "h", "data_pvc", "image",
                                    "max_retries"]
    assert sig.parameters["epochs"].default == 3
