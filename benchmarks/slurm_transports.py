"""Per-call overhead of the slurm transports against the local one, in the same run.

Starts the e2e test cluster (``tests/e2e/infra``: munged, slurmctld, two slurmd) with a
private sshd and slurmrestd in front of it, submits one job, then times a status call
(``describe``) over ``local``, ``ssh`` and ``rest``, alternating the three so load drifts hit
each alike. The first call of each transport (connection set-up, API negotiation) is timed
apart. Prints medians and the ratios to local; ``--json PATH`` also writes them, and
``--record LABEL`` adds the run (with the date and the machine's load) to
``benchmarks/results/slurm_transports.{json,md}``. A benchmark reports: it never fails
because of a number.

Run (root, after ``tests/e2e/infra/setup.d/30-slurm.sh`` and ``32-slurm-remote.sh``)::

    python benchmarks/slurm_transports.py --calls 50 --record "after: one subshell per call"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "slurm_transports"

from tests.e2e.infra.slurm import SlurmCluster  # noqa: E402
from tests.e2e.infra.slurm_remote import SlurmRestd, SshServer, ensure_user  # noqa: E402
from tether.schedulers.slurm.scheduler import create_scheduler  # noqa: E402
from tether.specs import AppDef, Role  # noqa: E402


def main() -> None:
    """Runs the benchmark (see the module docs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per transport")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--record", metavar="LABEL",
                        help=f"add the run to {RESULTS.relative_to(ROOT)}.{{json,md}}")
    args = parser.parse_args()

    with SlurmCluster(jwt=True) as cluster, SshServer() as sshd:
        assert cluster.dir is not None
        cluster.dir.chmod(0o711)
        with SlurmRestd(cluster) as restd:
            user = ensure_user(sshd.user)
            job_dir = Path(user.pw_dir) / "tether-bench" / uuid.uuid4().hex[:8]
            job_dir.mkdir(parents=True)
            for p in (job_dir, job_dir.parent):
                os.chown(p, user.pw_uid, user.pw_gid)
            conf = str(cluster.conf)
            scheds = {
                "local": create_scheduler("bench", slurm_conf=conf),
                "ssh": create_scheduler("bench", slurm_conf=conf, **sshd.settings()),
                "rest": create_scheduler("bench", transport="rest", rest_url=restd.url,
                                         user=sshd.user, jwt=cluster.token(sshd.user)),
            }  # fmt: skip
            app_id = scheds["ssh"].submit(
                AppDef("bench", roles=[Role("w", entrypoint="sleep", args=["600"])]),
                {"job_dir": str(job_dir)},
            )
            first: dict[str, float] = {}
            for name, s in scheds.items():
                t0 = time.perf_counter()
                assert s.describe(app_id) is not None
                first[name] = time.perf_counter() - t0
            samples: dict[str, list[float]] = {n: [] for n in scheds}
            for _ in range(args.calls):
                for name, s in scheds.items():
                    t0 = time.perf_counter()
                    s.describe(app_id)
                    samples[name].append(time.perf_counter() - t0)
            scheds["local"].cancel(app_id)
            for s in scheds.values():
                s.close()

    med = {n: statistics.median(v) for n, v in samples.items()}
    result = {
        "calls": args.calls,
        "first_call_s": first,
        "median_s": med,
        "ratio_to_local": {n: med[n] / med["local"] for n in med},
    }
    print(f"describe() over {args.calls} calls each (median; first call apart):")
    for n in med:
        print(f"  {n:5s} {med[n] * 1000:7.1f} ms  x{med[n] / med['local']:.2f} of local  "
              f"(first call {first[n] * 1000:.1f} ms)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.record:
        record(args.record, result)


def record(label: str, result: dict[str, Any]) -> None:
    """Adds a run to ``benchmarks/results/slurm_transports.json`` and renders the ``.md``.

    Args:
        label: What the run measured (the code's state).
        result: The run's numbers.
    """
    json_path = RESULTS.with_suffix(".json")
    runs = json.loads(json_path.read_text()) if json_path.exists() else []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs.append({"label": label, "date": now, "load_1m": os.getloadavg()[0], **result})
    json_path.write_text(json.dumps(runs, indent=1) + "\n")
    rows = [_row(r) for r in runs]
    RESULTS.with_suffix(".md").write_text(
        "# slurm transports: a status call against the local transport\n\n"
        "Written by `python benchmarks/slurm_transports.py --record LABEL`: the median of "
        "`describe()` of one running job over each transport, alternated in one run "
        "(the ratio is to `local` in the same run; the machine is shared, so the load "
        "column says how busy it was). Goal (issue 34): ssh at most 1.5x, rest at most "
        "1.2x.\n\n"
        "| run | date (UTC) | load (1 min) | calls | local | ssh | rest |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )



def _row(run: dict[str, Any]) -> str:
    """One run as a row of the table."""
    cells = [f"{run['median_s'][n] * 1000:.1f} ms (x{run['ratio_to_local'][n]:.2f})"
             for n in ("local", "ssh", "rest")]  # fmt: skip
    head = f"| {run['label']} | {run['date']} | {run['load_1m']:.1f} | {run['calls']} | "
    return head + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
