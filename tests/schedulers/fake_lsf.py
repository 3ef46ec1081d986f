"""A FAKE of LSF's ``bsub``/``bjobs``/``bkill``/``blaunch`` for tests (LSF cannot run here).

Not IBM's software: a stand-in that records every call (``$FAKE_LSF_DIR/calls.jsonl``) and
prints output in the formats IBM documents (``Job <id> is submitted to queue <q>.``;
``bjobs -o "..." -json``: ``{"COMMAND": "bjobs", "JOBS": n, "RECORDS": [...]}`` with upper-case
field names and an ``ERROR`` record for an unknown job). ``bsub`` runs the submitted script
for real with ``bash`` on this host (``$LSB_MCPU_HOSTS`` lists ``localhost`` once per replica
host), ``blaunch HOST CMD...`` runs CMD here, and ``bkill`` stops the script's process group.

Usage: ``python fake_lsf.py bsub|bjobs|bkill|blaunch ARGS...`` (tests write wrappers named
after each command onto PATH).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("FAKE_LSF_DIR", "."))


def _record(cmd: str, args: list[str], stdin: str | None = None) -> None:
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"cmd": cmd, "args": args, "stdin": stdin}) + "\n")


def _jobs() -> dict[str, dict[str, object]]:
    path = STATE / "jobs.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save(jobs: dict[str, dict[str, object]]) -> None:
    (STATE / "jobs.json").write_text(json.dumps(jobs))


def _directive(script: str, flag: str) -> str | None:
    m = re.search(rf"^#BSUB {re.escape(flag)} (.*)$", script, re.M)
    return m.group(1).strip().strip('"') if m else None


def bsub(args: list[str]) -> int:
    script = sys.stdin.read()
    _record("bsub", args, script)
    jobs = _jobs()
    job_id = str(1000 + len(jobs) + 1)
    n = int(_directive(script, "-n") or 1)
    ptile = int(re.search(r"ptile=(\d+)", _directive(script, "-R") or "ptile=1").group(1))  # type: ignore[union-attr]
    hosts = " ".join(f"localhost {ptile}" for _ in range(max(1, n // ptile)))
    job_dir = STATE / job_id
    job_dir.mkdir()
    (job_dir / "script.sh").write_text(script)
    cwd = (_directive(script, "-cwd") or ".").strip("'")
    env = {**os.environ, "LSB_JOBID": job_id, "LSB_MCPU_HOSTS": hosts}
    proc = subprocess.Popen(
        ["bash", "-c", 'bash "$1"; echo $? > "$2"', "job", str(job_dir / "script.sh"),
         str(job_dir / "rc")],
        cwd=cwd, env=env, start_new_session=True,
        stdout=(job_dir / "out").open("wb"), stderr=(job_dir / "err").open("wb"),
    )
    jobs[job_id] = {
        "pid": proc.pid, "name": _directive(script, "-J"), "desc": _directive(script, "-Jd"),
        "queue": _directive(script, "-q") or "normal", "killed": False,
        "submit_time": time.strftime("%b %d %H:%M"),
    }
    _save(jobs)
    print(f"Job <{job_id}> is submitted to queue <{jobs[job_id]['queue']}>.")
    return 0


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _record_of(job_id: str, job: dict[str, object]) -> dict[str, str]:
    rc_path = STATE / job_id / "rc"
    stat, code, reason = "RUN", "", ""
    if job["killed"] and not _alive(int(job["pid"])):  # type: ignore[call-overload]
        stat, code, reason = "EXIT", "143", "TERM_OWNER: job killed by owner"
    elif rc_path.exists() and rc_path.read_text().strip():
        rc = int(rc_path.read_text().strip())
        if job["killed"]:
            stat, code, reason = "EXIT", str(rc), "TERM_OWNER: job killed by owner"
        elif rc == 0:
            stat = "DONE"
        else:
            stat, code, reason = "EXIT", str(rc), ""
    return {
        "JOBID": job_id, "STAT": stat, "EXIT_CODE": code, "EXIT_REASON": reason,
        "JOB_NAME": str(job["name"]), "JOB_DESCRIPTION": str(job["desc"] or ""),
        "SUBMIT_TIME": str(job["submit_time"]), "PEND_REASON": "",
        "EXEC_HOST": "localhost",
    }


def bjobs(args: list[str]) -> int:
    _record("bjobs", args)
    jobs = _jobs()
    ids = [a for a in args if a.isdigit()]
    records: list[dict[str, str]] = []
    for job_id in ids or list(jobs):
        if job_id in jobs:
            records.append(_record_of(job_id, jobs[job_id]))
        else:
            records.append({"JOBID": job_id, "ERROR": f"Job <{job_id}> is not found"})
    print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}, indent=2))
    return 0


def bkill(args: list[str]) -> int:
    _record("bkill", args)
    jobs = _jobs()
    job_id = args[-1]
    if job_id not in jobs:
        print(f"Job <{job_id}>: No matching job found", file=sys.stderr)
        return 255
    if _record_of(job_id, jobs[job_id])["STAT"] != "RUN":
        print(f"Job <{job_id}>: Job has already finished", file=sys.stderr)
        return 255
    jobs[job_id]["killed"] = True
    _save(jobs)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int(jobs[job_id]["pid"]), signal.SIGTERM)  # type: ignore[call-overload]
    print(f"Job <{job_id}> is being terminated")
    return 0


def blaunch(args: list[str]) -> int:
    _record("blaunch", args)
    os.execvp(args[1], args[1:])  # the host (args[0]) is this one


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    sys.exit({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "blaunch": blaunch}[cmd](rest))
