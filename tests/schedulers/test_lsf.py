"""``lsf``: golden job scripts, ``bjobs`` parsing, and the command layer.

LSF cannot run here. The scripts are golden-tested, and the command layer (submit, status,
logs, cancel, job identity) runs against a FAKE ``bsub``/``bjobs``/``bkill``/``bresume``/
``blaunch`` (tests/schedulers/fake_lsf.py) put on PATH: it records the calls and prints IBM's
documented output formats, and its ``bsub`` runs the rendered script for real with bash on
this host.

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenDir
from tether.schedulers import get_scheduler_factory
from tether.schedulers.api import JOB_KEY
from tether.schedulers.lsf.options import LsfOpts
from tether.schedulers.lsf.render import (
    LsfRenderError,
    decode_description,
    encode_description,
    format_request,
    render,
)
from tether.schedulers.lsf.scheduler import LsfCommandError, LsfScheduler
from tether.schedulers.lsf.status import LsfOutputError, aggregate, parse_bjobs, parse_submit
from tether.schedulers.watch import Subscription, WatchHub
from tether.specs import AppDef, AppState, Resource, Role
from tether.specs.status import is_terminal

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "lsf", suffix=".sh")
FAKE = Path(__file__).parent / "fake_lsf.py"
PY = sys.executable


def ddp_app() -> AppDef:
    res = Resource(cpu=4, gpu=2, memMB=8192)
    return AppDef(
        "train",
        [
            Role("trainer", entrypoint="python", args=["-m", "train", "--rank", "${replica_id}"],
                 num_replicas=2, resource=res, env={"LR": "0.1", "HF_TOKEN": "sekrit"}),
            Role("eval", entrypoint="python", args=["eval.py", "it's"], resource=res),
        ],
        metadata={JOB_KEY: "dag/run 1/task"},
    )


# ---- render (golden) ---------------------------------------------------------------------------
def test_golden_multi_role_gpu_script() -> None:
    opts = LsfOpts(queue="gpu", project="ml", wall_time="2:00", gpu_mode="exclusive_process",
                   resource="select[type==X86_64]", bsub_args=["-G research"])
    req = render(ddp_app(), opts, "train-abcd1234", "/shared/logs", "/shared/proj")
    text = format_request(req)
    assert "sekrit" not in text and "sekrit" in req.jobs[0].script  # masked in dry-runs only
    GOLDEN.check("multi_role_gpu", text)


def test_golden_single_replica_defaults() -> None:
    app = AppDef("hello", [Role("echo", entrypoint="echo", args=["hi"])])
    req = render(app, LsfOpts(), "hello-x", "/l", "/w")
    assert [j.name for j in req.jobs] == ["hello-x.echo"]
    GOLDEN.check("single_default", req.jobs[0].script)


def trainer_evaluator(trainer: str = "pass", evaluator: str = "pass", py: str = PY) -> AppDef:
    """Two roles asking for different slots, GPUs and memory (one LSF job each)."""
    return AppDef("te", [
        Role("trainer", entrypoint=py, args=["-c", trainer], num_replicas=2,
             resource=Resource(cpu=4, gpu=2, memMB=8192)),
        Role("evaluator", entrypoint=py, args=["-c", evaluator],
             resource=Resource(cpu=1, gpu=0, memMB=1024)),
    ])


def test_roles_with_different_resources_render_one_job_each_golden() -> None:
    info = LsfScheduler("s").submit_dryrun(trainer_evaluator(), {"queue": "gpu"})
    req = info.request
    assert [j.name for j in req.jobs] == [f"{req.name}.trainer", f"{req.name}.evaluator"]
    head = [[ln for ln in j.script.splitlines() if ln.startswith("#BSUB")] for j in req.jobs]
    assert {"#BSUB -n 8", '#BSUB -R "span[ptile=4] rusage[mem=2048]"', '#BSUB -gpu "num=2"',
            "#BSUB -H"} <= set(head[0])
    assert {"#BSUB -n 1", '#BSUB -R "span[ptile=1] rusage[mem=1024]"', "#BSUB -H",
            f"#BSUB -w 'started(\"{req.name}.trainer\")'"} <= set(head[1])
    assert not any(ln.startswith("#BSUB -gpu") for ln in head[1])
    te = trainer_evaluator("train()", "evaluate()", py="python")
    fixed = render(te, LsfOpts(queue="gpu"), "te-abcd1234", "/shared/logs", "/shared/proj")
    GOLDEN.check("trainer_evaluator", format_request(fixed))


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"gpu_mode": "exclusive"},
         r"gpu_mode='exclusive' is not one of shared, exclusive_process \(did you mean "
         r"exclusive_process\?\)"),
        ({"wall_time": "2h"}, r"wall_time='2h' is not \[hours:\]minutes"),
        ({"bsub_args": ["G x"]}, "bsub_args item 'G x'"),
    ],
)
def test_bad_options(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(LsfRenderError, match=match):
        LsfScheduler("s").submit_dryrun(AppDef("x", [Role("a", entrypoint="p")]), cfg)


def test_description_round_trip() -> None:
    desc = encode_description(ddp_app(), "/l/x y", "eval")
    assert '"' not in desc and " " not in desc
    assert decode_description(desc) == {"app": "train", "logs": "/l/x y",
                                        "roles": "trainer:2,eval:1", "role": "eval",
                                        "key": "dag/run 1/task"}
    assert decode_description("someone else's job") is None


def test_overlays_merge_into_the_directives_last_golden_and_dryrun_shows_them() -> None:
    from tether.specs.overlays import DEL, PUT, set_overlay

    app = ddp_app()
    set_overlay(app, "lsf", "bsub", {"-q": "gpu-long", "-app": "ml", DEL("-W"): None,
                                     "-x": ""})  # fmt: skip
    set_overlay(app.roles[1], "lsf", "bsub", {PUT("-R"): '"span[ptile=4] select[avx512]"'})
    opts = LsfOpts(queue="gpu", wall_time="2:00", bsub_args=["-G research"])
    req = render(app, opts, "train-abcd1234", "/shared/logs", "/shared/proj")
    GOLDEN.check("overlays", format_request(req))
    trainer, evaluator = ([ln for ln in j.script.splitlines() if ln.startswith("#BSUB")]
                          for j in req.jobs)
    for head in (trainer, evaluator):  # the app's overlay goes into every job
        assert "#BSUB -q gpu-long" in head and "#BSUB -app ml" in head and "#BSUB -x" in head
        assert not any(ln.startswith("#BSUB -W") for ln in head)
        assert "#BSUB -G research" in head
    # the role's overlay goes into its own job only
    assert '#BSUB -R "span[ptile=4] select[avx512]"' in evaluator
    assert '#BSUB -R "span[ptile=4] rusage[mem=2048]"' in trainer
    assert "#BSUB -J train-abcd1234.eval" in evaluator
    info = LsfScheduler("s").submit_dryrun(app, {"queue": "gpu"})
    assert "#BSUB -q gpu-long" in str(info) and "#BSUB -app ml" in str(info)


@pytest.mark.parametrize(
    ("overlay", "match"),
    [
        ({"-J": "other"}, "role 'eval': lsf bsub overlay may not change -J"),
        ({"q": "x"}, "entry 'q'"),
        ({"-q": "a\nrm -rf /"}, "one-line text"),
    ],
)
def test_bad_overlays_name_the_entry(overlay: dict[str, Any], match: str) -> None:
    from tether.specs.overlays import set_overlay

    app = ddp_app()
    set_overlay(app.roles[1], "lsf", "bsub", overlay)
    with pytest.raises(LsfRenderError, match=match):
        LsfScheduler("s").submit_dryrun(app, {})


# ---- parsers (IBM's documented formats) --------------------------------------------------------
def test_parse_submit() -> None:
    assert parse_submit("Job <4711> is submitted to queue <normal>.\n") == "4711"
    with pytest.raises(LsfOutputError, match="no job id"):
        parse_submit("Request aborted by esub.")


def test_parse_bjobs_states_and_reasons() -> None:
    out = json.dumps({"COMMAND": "bjobs", "JOBS": 4, "RECORDS": [
        {"JOBID": "1", "STAT": "PEND", "PEND_REASON": "New job is waiting for scheduling;",
         "EXIT_CODE": "", "JOB_DESCRIPTION": ""},
        {"JOBID": "2", "STAT": "EXIT", "EXIT_CODE": "3", "EXIT_REASON": ""},
        {"JOBID": "3", "STAT": "EXIT", "EXIT_CODE": "130",
         "EXIT_REASON": "TERM_OWNER: job killed by owner"},
        {"JOBID": "4", "STAT": "DONE", "EXIT_CODE": ""},
        {"JOBID": "5", "ERROR": "Job <5> is not found"},
    ]})
    jobs = parse_bjobs(out)
    assert [(j.job_id, j.state) for j in jobs] == [
        ("1", AppState.PENDING), ("2", AppState.FAILED), ("3", AppState.CANCELLED),
        ("4", AppState.SUCCEEDED)]
    assert jobs[0].reason.startswith("New job is waiting")
    assert jobs[1].exit_code == 3
    with pytest.raises(LsfOutputError):
        parse_bjobs("bjobs: not json")


@pytest.mark.parametrize(
    ("states", "missing", "want"),
    [
        ([AppState.FAILED, AppState.CANCELLED], False, AppState.FAILED),
        ([AppState.CANCELLED, AppState.SUCCEEDED], False, AppState.CANCELLED),
        ([AppState.SUCCEEDED, AppState.SUCCEEDED], False, AppState.SUCCEEDED),
        ([AppState.SUCCEEDED], True, AppState.FAILED),  # a role's bsub never happened
        ([AppState.FAILED, AppState.RUNNING], False, AppState.RUNNING),  # sibling being ended
        ([AppState.PENDING, AppState.RUNNING], False, AppState.RUNNING),
        ([AppState.PENDING, AppState.PENDING], True, AppState.PENDING),
        ([AppState.UNKNOWN, AppState.RUNNING], False, AppState.UNKNOWN),
    ],
)
def test_app_state_combines_the_roles_jobs(
    states: list[AppState], missing: bool, want: AppState
) -> None:
    assert aggregate(states, missing) == want


# ---- the command layer against the fake LSF ----------------------------------------------------
@pytest.fixture
def fake_lsf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "lsf-state"
    state.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("bsub", "bjobs", "bkill", "bresume", "blaunch"):
        w = bindir / cmd
        w.write_text(f'#!/bin/sh\nexec {PY} {FAKE} {cmd} "$@"\n')
        w.chmod(w.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LSF_DIR", str(state))
    return state


def calls(state: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (state / "calls.jsonl").read_text().splitlines()]


def wait_terminal(sched: LsfScheduler, app_id: str) -> Any:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        desc = sched.describe(app_id)
        assert desc is not None
        if is_terminal(desc.state):
            return desc
        time.sleep(0.2)
    raise AssertionError(f"{app_id} did not finish")


def test_submit_status_logs_and_identity(fake_lsf: Path, tmp_path: Path) -> None:
    script = ("import os; print('rank', os.environ['TETHER_REPLICA_ID'], "
              "os.environ['TETHER_RANK0_HOST'], os.environ['TETHER_NUM_REPLICAS'])")
    app = AppDef("ranks", [Role("w", entrypoint=PY, args=["-c", script], num_replicas=2)],
                 metadata={JOB_KEY: "k1"})
    sched = LsfScheduler("s")
    app_id = sched.submit(app, {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path),
                                "queue": "short"})
    bsub = calls(fake_lsf)[0]
    assert bsub["cmd"] == "bsub" and "#BSUB -q short" in bsub["stdin"]
    desc = wait_terminal(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert desc.job_key == "k1"
    assert list(sched.log_iter(app_id, "w", 0)) == ["rank 0 localhost 2\n"]
    assert list(sched.log_iter(app_id, "w", 1)) == ["rank 1 localhost 2\n"]
    assert [a.app_id for a in sched.find_jobs("k1")] == [app_id]
    assert [c["args"][-1] for c in calls(fake_lsf) if c["cmd"] == "blaunch"] != []


def test_failure_names_the_replica(fake_lsf: Path, tmp_path: Path) -> None:
    # replica 1 fails only once replica 0's exit is recorded: the job ends at its first
    # failure and stops the replicas still running (whose exit code is then unknown)
    script = (
        "import glob, os, sys, time\n"
        "if os.environ['TETHER_REPLICA_ID'] == '1':\n"
        "    while not glob.glob('logs/*/w/0.exit'): time.sleep(0.01)\n"
        "    sys.exit(3)\n"
    )
    app = AppDef("f", [Role("w", entrypoint=PY, args=["-c", script], num_replicas=2)])
    sched = LsfScheduler("s")
    app_id = sched.submit(app, {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    desc = wait_terminal(sched, app_id)
    assert desc.state == AppState.FAILED
    assert "role 'w' replica 1 exited with code 3" in desc.msg
    assert [r.exit_code for r in desc.roles_statuses[0].replicas] == [0, 3]


def test_cancel_with_bkill_is_idempotent(fake_lsf: Path, tmp_path: Path) -> None:
    app = AppDef("c", [Role("w", entrypoint=PY, args=["-c", "import time; time.sleep(600)"])])
    sched = LsfScheduler("s")
    app_id = sched.submit(app, {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id).state == AppState.CANCELLED
    sched.cancel(app_id)  # finished: no second bkill
    job_ids = list(json.loads((fake_lsf / "jobs.json").read_text()))
    assert [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bkill"] == [job_ids]
    assert sched.describe("nosuch-app") is None and sched.describe("x.*") is None


# ---- roles with different resources: one job per role, one app (against the fake LSF) -------
REPORT = ("import os; print(os.environ['TETHER_ROLE_NAME'], os.environ['TETHER_REPLICA_ID'], "
          "os.environ['TETHER_RANK0_HOST'])")
SLEEP = "import os, time; open(f'pid-{os.getpid()}', 'w').close(); time.sleep(600)"


def lsf_states(sched: LsfScheduler, app_id: str) -> dict[str, AppState]:
    """Each role's LSF job state as ``bjobs`` reports it (role -> state)."""
    return {role: job.state for role, job in sched._app_jobs(app_id).items()}


def test_trainer_and_evaluator_with_different_resources_run_as_one_app(
    fake_lsf: Path, tmp_path: Path
) -> None:
    sched = LsfScheduler("s")
    app = trainer_evaluator(REPORT, REPORT)
    app.metadata[JOB_KEY] = "te-key"
    app_id = sched.submit(app, {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    bsubs = [c["stdin"] for c in calls(fake_lsf) if c["cmd"] == "bsub"]
    assert len(bsubs) == 2 and "#BSUB -n 8" in bsubs[0] and "#BSUB -n 1" in bsubs[1]
    assert [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bresume"] == [["1001", "1002"]]
    desc = wait_terminal(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert [(r.role, len(r.replicas)) for r in desc.roles_statuses] == [("trainer", 2),
                                                                       ("evaluator", 1)]
    assert list(sched.log_iter(app_id, "trainer", 1)) == ["trainer 1 localhost\n"]
    assert list(sched.log_iter(app_id, "evaluator", 0)) == ["evaluator 0 localhost\n"]
    listed = sched.list()
    assert [(a.app_id, a.state, a.job_key) for a in listed] == [
        (app_id, AppState.SUCCEEDED, "te-key")]
    # the evaluator read the rank-0 host from the trainer's job
    assert any(c["cmd"] == "bjobs" and f"{app_id}.trainer" in c["args"] and
               "first_host" in c["args"] for c in calls(fake_lsf))


def _pids(cwd: Path, n: int) -> list[int]:
    deadline = time.monotonic() + 60
    while len(found := list(cwd.glob("pid-*"))) < n:
        assert time.monotonic() < deadline, "the replicas did not start"
        time.sleep(0.05)
    return [int(p.name[4:]) for p in found]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_cancel_ends_every_role_job(fake_lsf: Path, tmp_path: Path) -> None:
    sched = LsfScheduler("s")
    app_id = sched.submit(trainer_evaluator(SLEEP, SLEEP),
                          {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    pids = _pids(tmp_path, 3)
    assert sched.describe(app_id).state == AppState.RUNNING  # type: ignore[union-attr]
    sched.cancel(app_id)
    assert wait_terminal(sched, app_id).state == AppState.CANCELLED
    assert lsf_states(sched, app_id) == {"trainer": AppState.CANCELLED,
                                                   "evaluator": AppState.CANCELLED}
    deadline = time.monotonic() + 60
    while not all(_gone(p) for p in pids):
        assert time.monotonic() < deadline, "replicas outlived the cancel"
        time.sleep(0.05)


def test_a_failed_replica_fails_the_app_and_ends_the_other_role(
    fake_lsf: Path, tmp_path: Path
) -> None:
    # trainer replica 1 fails once the evaluator runs; the trainer's job then ends the
    # evaluator's job, which would otherwise sleep for 10 minutes
    fail = ("import glob, os, sys, time\n"
            "if os.environ['TETHER_REPLICA_ID'] == '1':\n"
            "    while not glob.glob('pid-*'): time.sleep(0.01)\n"
            "    sys.exit(3)\n")
    sched = LsfScheduler("s")
    app_id = sched.submit(trainer_evaluator(fail, SLEEP),
                          {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    desc = wait_terminal(sched, app_id)
    assert desc.state == AppState.FAILED
    assert "role 'trainer' replica 1 exited with code 3" in desc.msg
    assert lsf_states(sched, app_id) == {"trainer": AppState.FAILED,
                                                   "evaluator": AppState.CANCELLED}
    assert [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bkill"] == [
        ["-J", f"{app_id}.evaluator", "0"]]


def test_a_failed_submission_kills_the_jobs_already_submitted(
    fake_lsf: Path, tmp_path: Path
) -> None:
    app = trainer_evaluator()
    from tether.specs.overlays import set_overlay

    set_overlay(app.roles[1], "lsf", "bsub", {"-q": "nosuch"})
    (fake_lsf / "reject_queue").write_text("nosuch")
    with pytest.raises(LsfCommandError, match="No such queue"):
        LsfScheduler("s").submit(app, {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
    assert [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bkill"] == [["1001"]]
    assert [c["cmd"] for c in calls(fake_lsf)] == ["bsub", "bsub", "bkill"]


def test_missing_bsub_names_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LsfCommandError, match=r"'bsub' is not on PATH.*profile.lsf"):
        LsfScheduler("s").submit(AppDef("x", [Role("a", entrypoint="p")]),
                                 {"log_dir": str(tmp_path / "l"), "cwd": str(tmp_path)})


def test_registered_with_runopts() -> None:
    sched = get_scheduler_factory("lsf")("s")
    assert {"queue", "project", "log_dir"} <= {name for name, _ in sched.run_opts()}


def test_the_watch_hub_reads_every_followed_app_with_one_bjobs(
    fake_lsf: Path, tmp_path: Path
) -> None:
    """Against the FAKE bjobs (LSF cannot run here): one bjobs per read of the view covers
    every followed app, each end is heard once, and an app LSF knows no job of ends as gone
    after one direct read."""
    sched = LsfScheduler("s")
    want = {}
    for code in (0, 0, 3):
        role = Role("w", entrypoint=PY, args=["-c", f"import sys; sys.exit({code})"])
        app_id = sched.submit(AppDef("w", [role]),
                              {"log_dir": str(tmp_path / "logs"), "cwd": str(tmp_path)})
        want[app_id] = AppState.SUCCEEDED if code == 0 else AppState.FAILED
    hub = WatchHub()
    with Subscription(hub) as sub:
        for app_id in [*want, "nope-app"]:
            sub.follow(sched, app_id)
        events = list(sub.events(timeout=120))
        rounds = next(iter(hub._views.values())).driver.rounds
    hub.close()
    finals = [e for e in events if e.final]
    assert {e.app_id: e.state for e in finals if not e.gone} == want
    (gone,) = [e for e in finals if e.gone]
    assert gone.app_id == "nope-app" and "no longer exists on lsf" in gone.msg
    assert len(finals) == 4  # each heard once
    bjobs = [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bjobs"]
    by_app = [a for a in bjobs if "-J" in a]
    # one bjobs per read of the view, for all the apps; one direct read: the unknown app's
    assert len(bjobs) - len(by_app) == rounds, (bjobs, rounds)
    assert by_app == [[*by_app[0][:-2], "-J", "nope-app.*"]], by_app
