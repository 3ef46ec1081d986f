"""sbatch scripts of the slurm scheduler: golden files, options, bad input, offline dry-runs.

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenDir
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.capabilities import UnsupportedFeatureError
from tether.schedulers.slurm.options import SlurmOpts
from tether.schedulers.slurm.overlay import SlurmOverlayError
from tether.schedulers.slurm.render import (
    Marker,
    SlurmConfigError,
    format_request,
    log_stems,
    make_comment,
    parse_comment,
    render,
    resource_flags,
    shell_word,
    task_script,
)
from tether.schedulers.slurm.scheduler import create_scheduler
from tether.specs import (
    AppDef,
    BindMount,
    Resource,
    RetryPolicy,
    Role,
    SecretRef,
    VolumeMount,
    macros,
)
from tether.specs.overlays import DEL, set_overlay

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "slurm", suffix=".sbatch")
JOB_DIR = "/shared/jobs"


def rendered(app: AppDef, **opts: Any) -> str:
    return format_request(render(app, SlurmOpts(job_dir=JOB_DIR, **opts)))


def trainer(n: int = 2, **kw: Any) -> Role:
    return Role(
        "trainer",
        image="/shared/venv",
        entrypoint="python",
        args=["-m", "train", "--rank", macros.replica_id, "--run", macros.app_id],
        env={"LR": "0.1", "NOTE": "it's $HOME"},
        num_replicas=n,
        resource=Resource(cpu=4, gpu=0, memMB=8192),
        **kw,
    )


def test_single_role_golden() -> None:
    app = AppDef("ddp train", roles=[trainer()], metadata={JOB_KEY: "dag/run 1/task"})
    GOLDEN.check("single", rendered(app))


def test_heterogeneous_golden() -> None:
    ps = Role("ps", entrypoint="ps-server", args=["--port", "2222"], num_replicas=1,
              resource=Resource(cpu=1, gpu=0, memMB=1024))  # fmt: skip
    app = AppDef("het", roles=[trainer(), ps])
    text = rendered(app)
    GOLDEN.check("heterogeneous", text)
    assert text.count("#SBATCH hetjob") == 1
    assert "srun --het-group=0" in text and "srun --het-group=1" in text


def test_gpus_golden_and_flags() -> None:
    res = Resource(cpu=8, gpu=4, memMB=64000, capabilities={"instance-type": "p4d"})
    role = Role("trainer", entrypoint="torchrun", args=["train.py"], num_replicas=2, resource=res)
    app = AppDef("gpu", roles=[role])
    GOLDEN.check("gpus", rendered(app))
    assert "--gpus-per-node=4" in resource_flags(role, SlurmOpts())
    assert "--gpus-per-task=4" in resource_flags(role, SlurmOpts(replicas_per_node=2))
    assert "--gres=gpu:8" in resource_flags(
        role, SlurmOpts(replicas_per_node=2, gpu_request="gres")
    )
    assert "--mem-per-cpu=8000M" in resource_flags(role, SlurmOpts(replicas_per_node=0))
    assert resource_flags(role, SlurmOpts(replicas_per_node=2))[:4] == [
        "--ntasks=2", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=8",
    ]  # fmt: skip


def test_every_option_golden() -> None:
    app = AppDef("opts", roles=[trainer(1, max_retries=2)])
    text = rendered(
        app, partition="gpu", time="1-02:00:00", account="ml", qos="high", constraint="a100&ib",
        nodelist="n[1-4]", exclude="n9", comment="nightly run", mail_user="me@example.com",
        mail_type="END,FAIL", requeue=True, exclusive=True, sbatch_args=["--reservation=r1"],
    )  # fmt: skip
    GOLDEN.check("options", text)
    for flag in ("--partition=gpu", "--time=1-02:00:00", "--account=ml", "--qos=high",
                 "--constraint=a100&ib", "--nodelist=n[1-4]", "--exclude=n9", "--exclusive",
                 "--mail-user=me@example.com", "--mail-type=END,FAIL", "--requeue",
                 "--reservation=r1"):  # fmt: skip
        assert f"#SBATCH {flag}\n" in text
    assert "restarting every role" in text  # APPLICATION retries: every step again


def test_pyxis_container_golden() -> None:
    role = trainer(1, mounts=[BindMount("/data", "/mnt/data", read_only=True)])
    role.image = "nvcr.io/nvidia/pytorch:24.01"
    GOLDEN.check("pyxis", rendered(AppDef("pyx", roles=[role]), container_runtime="pyxis"))


def test_overlays_golden_applied_last() -> None:
    """The app's overlay, then each role's, change that component's #SBATCH options last."""
    ps = Role("ps", entrypoint="ps-server", resource=Resource(cpu=1, gpu=0, memMB=1024))
    app = AppDef("ovl", roles=[trainer(), ps])
    set_overlay(app, "slurm", "sbatch", {"reservation": "maint", "time": "45"})
    set_overlay(app.roles[0], "slurm", "sbatch", {
        "time": "120", "exclusive": True, "signal": "B:USR1@60", DEL("mem"): None,
        "constraint": False,
    })  # fmt: skip
    info = create_scheduler("t").submit_dryrun(
        app, {"job_dir": JOB_DIR, "time": "10", "constraint": "ib", "sbatch_args": ["-Q"]}
    )
    text = str(info)  # what --dryrun prints
    GOLDEN.check("overlays", text)
    trainer_part, ps_part = text.split("#SBATCH hetjob\n")
    for flag in ("--time=120", "--reservation=maint", "--exclusive", "--signal=B:USR1@60", "-Q"):
        assert f"#SBATCH {flag}\n" in trainer_part
    assert "--mem=" not in trainer_part and "--constraint" not in trainer_part
    assert "#SBATCH --time=45\n" in ps_part and "#SBATCH --reservation=maint\n" in ps_part
    assert "#SBATCH --constraint=ib\n" in ps_part
    assert "# tether: role trainer: overlay slurm/sbatch: reservation, time, exclusive" in text
    assert app.roles[1].metadata == {}  # the caller's app is not changed


@pytest.mark.parametrize(
    ("overlay", "needle"),
    [
        ({"ntasks": 4}, "overlay keys sbatch.ntasks are not allowed: tether sets job-name"),
        ({"--time": "5"}, "key '--time' is not a long sbatch option name"),
        ({"gres": ["gpu:1"]}, "gres=['gpu:1'] is a list; allowed: a string or number"),
    ],
)
def test_bad_overlays_are_named(overlay: dict[str, Any], needle: str) -> None:
    role = trainer(1)
    set_overlay(role, "slurm", "sbatch", overlay)
    with pytest.raises(SlurmOverlayError) as e:
        create_scheduler("t").submit_dryrun(AppDef("x", roles=[role]), {})
    assert f"role 'trainer': overlay slurm/sbatch: {needle}" in str(e.value)


def test_split_streams_tee_each_stream() -> None:
    text = rendered(AppDef("s", roles=[trainer(1)]), split_streams=True)
    assert 'tee -a "$TETHER_SLURM_LOGS"/trainer-"$SLURM_PROCID".stderr >&2' in text
    assert "streams=split" in text
    assert "tee -a" not in rendered(AppDef("s", roles=[trainer(1)]))


def test_replica_retries_loop_in_the_task() -> None:
    script = task_script(trainer(1, max_retries=3, retry_policy=RetryPolicy.REPLICA))
    assert "restart $n of 3" in script and "exec " not in script


def test_tasks_run_their_replica(tmp_path: Path) -> None:
    """The task program really picks its replica's argv and env by $SLURM_PROCID."""
    role = Role("w", entrypoint="sh", args=["-c", 'echo "$1 $TETHER_REPLICA_ID/$TETHER_NUM_REPLICAS'
                ' $TETHER_RANK0_HOST $LR"', "-", macros.replica_id + "@" + macros.app_id],
                env={"LR": "a b'c"}, num_replicas=3)  # fmt: skip
    prog = task_script(role)
    for k in range(3):
        env = {"PATH": os.environ["PATH"], "SLURM_PROCID": str(k), "SLURM_JOB_ID": "77",
               "TETHER_RANK0_HOST": "10.0.0.1"}  # fmt: skip
        out = subprocess.run(["bash", "-c", prog], env=env, capture_output=True, text=True)
        assert out.stdout == f"{k}@77 {k}/3 10.0.0.1 a b'c\n"


def test_shell_word_quotes_everything_but_placeholders() -> None:
    assert shell_word("$(rm -rf /)") == "'$(rm -rf /)'"
    assert shell_word("") == "''"


def test_comment_marker_round_trip() -> None:
    m = Marker(
        roles=[("a b", 2), ("ps", 1)],
        job_key="k;[x]=1",
        user_comment="mine [x]",
        split_streams=True,
    )
    back = parse_comment(make_comment(m))
    assert back == m
    assert parse_comment("just a comment") is None
    assert parse_comment(None) is None


def test_log_stems_unique() -> None:
    assert log_stems(["a/b", "a_b", "c"]) == ["a_b-0", "a_b-1", "c"]


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        ({"gpu_request": "gress"}, "gpu_request='gress' is not allowed (did you mean 'gres'?)"),
        ({"container_runtime": "pyxsi"}, "did you mean 'pyxis'?"),
        ({"time": "2 hours"}, "time='2 hours' is not a Slurm time limit"),
        ({"mail_type": "END,FIAL"}, "'FIAL' is not a mail type (did you mean 'FAIL'?)"),
        ({"replicas_per_node": -1}, "replicas_per_node=-1"),
        ({"job_dir": "relative/dir"}, "job_dir='relative/dir' must be an absolute path"),
        ({"sbatch_args": ["--comment=x"]}, "is set by tether"),
    ],
)
def test_bad_options_are_named(opts: dict[str, Any], needle: str) -> None:
    sched = create_scheduler("t")
    with pytest.raises(SlurmConfigError, match=None) as e:
        sched.submit_dryrun(AppDef("x", roles=[trainer(1)]), opts)
    assert needle in str(e.value)


def test_mounts_need_a_container_runtime() -> None:
    role = trainer(1, mounts=[BindMount("/data", "/mnt")])
    with pytest.raises(
        SlurmConfigError, match=r"need a container runtime.*container_runtime=pyxis"
    ):
        create_scheduler("t").submit_dryrun(AppDef("x", roles=[role]), {})


def test_capabilities_reject_secrets_volumes_and_role_retries() -> None:
    sched = create_scheduler("t")
    cases = [
        (trainer(1, secrets={"TOKEN": SecretRef("s", "k")}), "secrets"),
        (trainer(1, mounts=[VolumeMount("pvc", "/mnt")]), "volume mount"),
        (trainer(1, max_retries=1, retry_policy=RetryPolicy.ROLE), "retry_policy=ROLE"),
    ]
    for role, needle in cases:
        with pytest.raises(UnsupportedFeatureError, match=needle):
            sched.submit_dryrun(AppDef("x", roles=[role]), {"container_runtime": "pyxis"})


def test_nodelist_rejected_for_heterogeneous_jobs() -> None:
    app = AppDef("x", roles=[trainer(1), Role("ps", entrypoint="ps")])
    with pytest.raises(SlurmConfigError, match="nodelist='n1' cannot be used with 2 roles"):
        create_scheduler("t").submit_dryrun(app, {"nodelist": "n1"})


def test_dryrun_offline_masks_secret_env_and_registered() -> None:
    sched = get_scheduler_factory("slurm")("s")
    role = trainer(1)
    role.env["API_TOKEN"] = "hunter2-secret"
    info = sched.submit_dryrun(AppDef("x", roles=[role]), {"job_dir": JOB_DIR})
    assert "hunter2-secret" not in str(info)
    assert "hunter2-secret" in info.request.script  # the job itself gets the value
    assert "job_dir" in sched.run_opts()


def test_workspace_copy_is_cached_by_content(tmp_path: Path) -> None:
    from tether.schedulers.slurm.workspace import META_WORKSPACE_DIR, build_role_workspace
    from tether.workspace import Workspace

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text("print(1)\n")
    role = Role("r", entrypoint="python", args=["a.py"], workspace=Workspace({str(proj): ""}))
    build_role_workspace(role, str(tmp_path / "ws"), {})
    first = role.metadata[META_WORKSPACE_DIR]
    assert (Path(first) / "a.py").read_text() == "print(1)\n"
    build_role_workspace(role, str(tmp_path / "ws"), {})
    assert role.metadata[META_WORKSPACE_DIR] == first  # unchanged content: the same copy
    (proj / "a.py").write_text("print(2)\n")
    os.utime(proj / "a.py", ns=(1, 1))
    build_role_workspace(role, str(tmp_path / "ws"), {})
    assert role.metadata[META_WORKSPACE_DIR] != first
    text = format_request(render(AppDef("x", roles=[role]), SlurmOpts(job_dir=JOB_DIR)))
    assert f"--chdir={role.metadata[META_WORKSPACE_DIR]}" in text


def test_unbuilt_workspace_is_rejected() -> None:
    from tether.workspace import Workspace

    role = trainer(1)
    role.workspace = Workspace({"/tmp": ""})
    with pytest.raises(SlurmConfigError, match="was not copied"):
        create_scheduler("t").submit_dryrun(AppDef("x", roles=[role]), {})
