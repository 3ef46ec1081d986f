"""A FAKE of LSF's ``bsub``/``bjobs``/``bkill``/``bresume``/``blaunch`` for tests (LSF cannot
run here).

Not IBM's software: a stand-in that records every call (``$FAKE_LSF_DIR/calls.jsonl``) and
prints output in the formats IBM documents (``Job <id> is submitted to queue <q>.``;
``bjobs -o "..." -json``: ``{"COMMAND": "bjobs", "JOBS": n, "RECORDS": [...]}`` with upper-case
field names and an ``ERROR`` record for an unknown job; ``bjobs -noheader -o first_host``: one
host per line). ``bsub`` runs the submitted script for real with ``bash`` on this host
(``$LSB_MCPU_HOSTS`` lists ``localhost`` once per replica host); a script with ``#BSUB -H``
is held (PSUSP) until ``bresume``. ``bjobs``/``bkill`` take job ids or ``-J NAME`` (``*``
wildcards; ``bkill -J NAME 0`` kills every job of that name). ``blaunch HOST CMD...`` runs
CMD here, and ``bkill`` stops the script's process group. A queue named in
``$FAKE_LSF_DIR/reject_queue`` does not exist (``bsub`` refuses it). ``-w`` dependencies are
recorded, not enforced (the jobs here start in submission order).

Usage: ``python fake_lsf.py bsub|bjobs|bkill|bresume|blaunch ARGS...`` (tests write wrappers
named after each command onto PATH).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

STATE = Path(os.environ.get("FAKE_LSF_DIR", "."))
Job = dict[str, object]


def _record(cmd: str, args: list[str], stdin: str | None = None) -> None:
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"cmd": cmd, "args": args, "stdin": stdin}) + "\n")


@contextlib.contextmanager
def _locked() -> Iterator[dict[str, Job]]:
    """The jobs table, read and written back under a lock (commands run concurrently)."""
    with (STATE / "jobs.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = STATE / "jobs.json"
        jobs = json.loads(path.read_text()) if path.exists() else {}
        yield jobs
        path.write_text(json.dumps(jobs))


def _jobs() -> dict[str, Job]:
    path = STATE / "jobs.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _directive(script: str, flag: str) -> str | None:
    m = re.search(rf"^#BSUB {re.escape(flag)}( (.*))?$", script, re.M)
    if m is None:
        return None
    return (m.group(2) or "").strip().strip('"')


def _start(job_id: str, job: Job) -> None:
    job_dir = STATE / job_id
    script = (job_dir / "script.sh").read_text()
    n = int(_directive(script, "-n") or 1)
    ptile = int(re.search(r"ptile=(\d+)", _directive(script, "-R") or "ptile=1").group(1))  # type: ignore[union-attr]
    hosts = " ".join(f"localhost {ptile}" for _ in range(max(1, n // ptile)))
    cwd = (_directive(script, "-cwd") or ".").strip("'")
    env = {**os.environ, "LSB_JOBID": job_id, "LSB_MCPU_HOSTS": hosts}
    proc = subprocess.Popen(
        ["bash", "-c", 'bash "$1"; echo $? > "$2"', "job", str(job_dir / "script.sh"),
         str(job_dir / "rc")],
        cwd=cwd, env=env, start_new_session=True,
        stdout=(job_dir / "out").open("wb"), stderr=(job_dir / "err").open("wb"),
    )
    job["pid"] = proc.pid


def bsub(args: list[str]) -> int:
    script = sys.stdin.read()
    _record("bsub", args, script)
    reject = STATE / "reject_queue"  # a test names a queue this cluster lacks
    queue = _directive(script, "-q")
    if reject.exists() and queue == reject.read_text():
        print(f"{queue}: No such queue. Job not submitted.", file=sys.stderr)
        return 255
    with _locked() as jobs:
        job_id = str(1000 + len(jobs) + 1)
        (STATE / job_id).mkdir()
        (STATE / job_id / "script.sh").write_text(script)
        job: Job = {
            "pid": None, "name": _directive(script, "-J"), "desc": _directive(script, "-Jd"),
            "queue": _directive(script, "-q") or "normal", "killed": False,
            "submit_time": time.strftime("%b %d %H:%M"),
        }
        if _directive(script, "-H") is None:
            _start(job_id, job)
        jobs[job_id] = job
    print(f"Job <{job_id}> is submitted to queue <{job['queue']}>.")
    return 0


def bresume(args: list[str]) -> int:
    _record("bresume", args)
    with _locked() as jobs:
        for job_id in args:
            job = jobs.get(job_id)
            if job is None or job["pid"] is not None or job["killed"]:
                print(f"Job <{job_id}>: Job has already been resumed", file=sys.stderr)
                continue
            _start(job_id, job)
            print(f"Job <{job_id}> is being resumed")
    return 0


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _stat(job_id: str, job: Job) -> tuple[str, str, str]:
    """STAT, EXIT_CODE and EXIT_REASON of one job."""
    killed = "TERM_OWNER: job killed by owner"
    rc_path = STATE / job_id / "rc"
    if job["pid"] is None:
        return ("EXIT", "130", killed) if job["killed"] else ("PSUSP", "", "")
    if job["killed"] and not _alive(int(job["pid"])):  # type: ignore[call-overload]
        return "EXIT", "143", killed
    if rc_path.exists() and rc_path.read_text().strip():
        rc = int(rc_path.read_text().strip())
        if job["killed"]:
            return "EXIT", str(rc), killed
        return ("DONE", "", "") if rc == 0 else ("EXIT", str(rc), "")
    return "RUN", "", ""


def _record_of(job_id: str, job: Job) -> dict[str, str]:
    stat, code, reason = _stat(job_id, job)
    return {
        "JOBID": job_id, "STAT": stat, "EXIT_CODE": code, "EXIT_REASON": reason,
        "JOB_NAME": str(job["name"]), "JOB_DESCRIPTION": str(job["desc"] or ""),
        "SUBMIT_TIME": str(job["submit_time"]),
        "PEND_REASON": "Job was suspended by the user while pending;" if stat == "PSUSP" else "",
        "EXEC_HOST": "" if job["pid"] is None else "localhost",
    }


def _select(args: list[str], jobs: dict[str, Job]) -> tuple[list[str], list[str]]:
    """The ids that ``args`` name (ids, or ``-J NAME`` with ``*``), and the ones unknown."""
    if "-J" in args:
        pattern = args[args.index("-J") + 1]
        found = [i for i, j in jobs.items() if fnmatch.fnmatchcase(str(j["name"]), pattern)]
        return found, [] if found else [pattern]
    ids = [a for a in args if a.isdigit() and a != "0"]
    return [i for i in ids if i in jobs], [i for i in ids if i not in jobs]


def bjobs(args: list[str]) -> int:
    _record("bjobs", args)
    jobs = _jobs()
    named = "-J" in args or any(a.isdigit() for a in args)
    found, unknown = _select(args, jobs) if named else (list(jobs), [])
    if "-json" not in args:  # bjobs -noheader -o first_host (the scripts' rank-0 host)
        for job_id in found:
            print("-" if jobs[job_id]["pid"] is None else "localhost")
        return 0
    records: list[dict[str, str]] = [_record_of(i, jobs[i]) for i in found]
    records += [{"JOBID": u, "ERROR": f"Job <{u}> is not found"} for u in unknown]
    print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}, indent=2))
    return 0


def bkill(args: list[str]) -> int:
    _record("bkill", args)
    rc = 0
    with _locked() as jobs:
        found, unknown = _select(args, jobs)
        for u in unknown:
            print(f"Job <{u}>: No matching job found", file=sys.stderr)
            rc = 255
        for job_id in found:
            job = jobs[job_id]
            if _stat(job_id, job)[0] not in ("RUN", "PSUSP"):
                print(f"Job <{job_id}>: Job has already finished", file=sys.stderr)
                rc = 255
                continue
            job["killed"] = True
            if job["pid"] is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(job["pid"]), signal.SIGTERM)  # type: ignore[call-overload]
            print(f"Job <{job_id}> is being terminated")
    return rc


def blaunch(args: list[str]) -> int:
    _record("blaunch", args)
    os.execvp(args[1], args[1:])  # the host (args[0]) is this one


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    commands = {"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "bresume": bresume,
                "blaunch": blaunch}
    sys.exit(commands[cmd](rest))
