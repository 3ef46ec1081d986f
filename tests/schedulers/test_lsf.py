"""``lsf``: golden job scripts, ``bjobs`` parsing, and the command layer.

LSF cannot run here. The scripts are golden-tested, and the command layer (submit, status,
logs, cancel, job identity) runs against a FAKE ``bsub``/``bjobs``/``bkill``/``blaunch``
(tests/schedulers/fake_lsf.py) put on PATH: it records the calls and prints IBM's documented
output formats, and its ``bsub`` runs the rendered script for real with bash on this host.

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
from tether.schedulers.lsf.status import LsfOutputError, parse_bjobs, parse_submit
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
    assert "sekrit" not in text and "sekrit" in req.script  # masked in dry-runs only
    GOLDEN.check("multi_role_gpu", text)


def test_golden_single_replica_defaults() -> None:
    app = AppDef("hello", [Role("echo", entrypoint="echo", args=["hi"])])
    GOLDEN.check("single_default", render(app, LsfOpts(), "hello-x", "/l", "/w").script)


def test_roles_with_different_resources_rejected_naming_role() -> None:
    app = AppDef("x", [Role("a", entrypoint="p", resource=Resource(cpu=1, gpu=0, memMB=10)),
                       Role("b", entrypoint="p", resource=Resource(cpu=2, gpu=0, memMB=10))])
    with pytest.raises(LsfRenderError, match=r"role 'b'.*same resource"):
        LsfScheduler("s").submit_dryrun(app, {})


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
    desc = encode_description(ddp_app(), "/l/x y")
    assert '"' not in desc and " " not in desc
    assert decode_description(desc) == {"app": "train", "logs": "/l/x y",
                                        "roles": "trainer:2,eval:1", "key": "dag/run 1/task"}
    assert decode_description("someone else's job") is None


def test_overlays_merge_into_the_directives_last_golden_and_dryrun_shows_them() -> None:
    from tether.specs.overlays import DEL, PUT, set_overlay

    app = ddp_app()
    set_overlay(app, "lsf", "bsub", {"-q": "gpu-long", "-app": "ml", DEL("-W"): None,
                                     "-x": ""})  # fmt: skip
    set_overlay(app.roles[1], "lsf", "bsub", {PUT("-R"): '"span[ptile=4] select[avx512]"'})
    opts = LsfOpts(queue="gpu", wall_time="2:00", bsub_args=["-G research"])
    text = format_request(render(app, opts, "train-abcd1234", "/shared/logs", "/shared/proj"))
    GOLDEN.check("overlays", text)
    head = [ln for ln in text.splitlines() if ln.startswith("#BSUB")]
    assert "#BSUB -q gpu-long" in head and "#BSUB -app ml" in head and "#BSUB -x" in head
    assert not any(ln.startswith("#BSUB -W") for ln in head)
    assert '#BSUB -R "span[ptile=4] select[avx512]"' in head
    assert "#BSUB -G research" in head and "#BSUB -J train-abcd1234" in head
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


# ---- the command layer against the fake LSF ----------------------------------------------------
@pytest.fixture
def fake_lsf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "lsf-state"
    state.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("bsub", "bjobs", "bkill", "blaunch"):
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
    assert [c["args"] for c in calls(fake_lsf) if c["cmd"] == "bkill"] == [[app_id]]
    assert sched.describe("999999") is None


def test_missing_bsub_names_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LsfCommandError, match=r"'bsub' is not on PATH.*profile.lsf"):
        LsfScheduler("s").submit(AppDef("x", [Role("a", entrypoint="p")]),
                                 {"log_dir": str(tmp_path / "l"), "cwd": str(tmp_path)})


def test_registered_with_runopts() -> None:
    sched = get_scheduler_factory("lsf")("s")
    assert {"queue", "project", "log_dir"} <= {name for name, _ in sched.run_opts()}
