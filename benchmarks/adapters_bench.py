"""Adapter overheads: tether's adapters against the orchestrators' own primitives.

Each case runs a script in tether's venv that measures both sides in one process launch per
sample: an Airflow DAG of 200 tether operators vs 200 BashOperators (parse time), a KFP
pipeline of 200 tether steps vs 200 plain container components (compile time), and a Prefect
task running ``utils.echo`` through tether vs a plain Prefect task running the same command.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import CaseResult, Measurement, run_cmd

SCRIPTS = Path(__file__).resolve().parent / "scripts"

_CASES = {
    "airflow dag parse": ("adapter_airflow.py", "parse time of a 200-task DAG", "BashOperator"),
    "kfp compile": ("adapter_kfp.py", "compile time of a 200-step pipeline", "plain kfp"),
    "prefect task": ("adapter_prefect.py", "per-task overhead running utils.echo", "plain task"),
}


def adapter_cases(smoke: bool, repeats: int, warmup: int, python: Path,
                  work: Path) -> list[CaseResult]:
    results = []
    n = 20 if smoke else 200
    for name, (script, desc, other) in _CASES.items():
        path = SCRIPTS / script
        if not path.exists():
            continue
        ms = {"tether": Measurement("tether", "time", "s"), other: Measurement(other, "time", "s")}
        for i in range(warmup + repeats):
            _, _, rc, out = run_cmd([str(python), str(path), "--n", str(n), "--work", str(work)])
            if rc != 0:
                raise RuntimeError(f"{script} exited {rc}:\n{out}")
            data = json.loads(out.strip().splitlines()[-1])
            if i >= warmup:
                ms["tether"].values.append(data["tether"])
                ms[other].values.append(data["native"])
        results.append(CaseResult(name, f"{desc} (n={n})", list(ms.values()),
                                  note=data.get("note", "")))
    return results
