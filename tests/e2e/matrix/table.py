"""The matrix's table: its adapters and backends, a cell's outcome, and ``docs/portability.md``.

Each backend's column is run by its own test module (``test_matrix*.py``), possibly in a
different pytest process (``tests/run_groups.py`` runs backends in parallel groups). Every
module records the cells it ran in ``tests/e2e/matrix/results.json`` (merged under a file
lock) and the page is rendered from that file, so it always shows every column: the cells
run last, wherever they ran.
"""

from __future__ import annotations

import fcntl
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.e2e.matrix.components import EXPECTED

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "portability.md"
RESULTS_FILE = Path(__file__).with_name("results.json")
COMMAND = "pytest tests/e2e/matrix"

ADAPTERS = {
    "cli": "CLI (`tether run --wait`; outputs read with `Runner.outputs`)",
    "runner": "Runner API (`run`, `wait`, `outputs`)",
    "airflow": "Airflow 3 (`dag.test()`, `ComponentOperator`)",
    "prefect": "Prefect 3 flow (`component_task`, real API server)",
    "kfp": "KFP v2 launcher steps (`kfp.local.SubprocessRunner`)",
}
"""Adapter key -> row title."""

BACKENDS = {
    "local_cwd": "replicas are processes of this machine.",
    "kubernetes": (
        "a real single-node Kubernetes 1.20.2 (`tests/e2e/infra/kube_node.py`): "
        "kube-apiserver, etcd, kube-controller-manager, kube-scheduler and a kubelet built "
        "from Debian's sources, containerd with runc and a CNI bridge from Debian. Each "
        "component runs as a real container of the tether image (imported, not pulled: "
        "`image_pull_policy=Never`); logs come through the kubelet. The cell's directory "
        "is mounted into the pods (`hostPath`, the node is this host) and holds the outputs "
        "root; on a real cluster set `[tether:outputs] url` to storage every pod reaches. "
        "The kubernetes end-to-end tests run real containers on this node too: the "
        "contract suite, `tests/e2e/test_kubernetes_e2e.py`, `test_kubernetes_real.py` "
        "(signals, OOM kills, a 2x2 `dist.ddp` on gloo), the KFP launcher and Airflow "
        "tests. Only the tests marked `fake_kubelet` (`test_kubernetes_failure_causes_e2e.py`"
        " and `test_kubernetes_recovery_e2e.py`: evictions with a chosen message at a chosen "
        "moment; `test_watch_hub_kube.py`: pod phases timed around "
        "injected apiserver faults) run on the test kubelet (`tests/e2e/infra/kubelet.py`), "
        "which patches pod status and starts no container."
    ),
    "slurm": (
        "a real Slurm 22.05 cluster from Debian's `slurm-wlm` and `munge` (`tests/e2e/infra`): "
        "munged, slurmctld and two slurmd nodes on this host. Each component is a batch job "
        "submitted with `sbatch`, followed with `squeue`, its logs read from its `job_dir`. "
        "Outputs go to the default `file://` root, which both nodes see because they are this "
        "host; on a real cluster put `job_dir` and `[tether:outputs] url` on storage every "
        "node reaches."
    ),
    "slurm_ssh": (
        "the same cluster reached over the `ssh` transport: a private OpenSSH server "
        "(Debian's `openssh-server`) on a loopback port, `sbatch`/`squeue` run through one "
        "multiplexed connection, logs tailed over it; configured by `TETHER_SLURM_*` "
        "variables, which the Airflow and Prefect tasks and the KFP launcher steps inherit."
    ),
    "slurm_rest": (
        "the same cluster reached over the `rest` transport: Slurm's `slurmrestd` with JWT "
        "authentication on a loopback port, no Slurm command run by tether; logs and outputs "
        "through `mount` (the cell's directory, the same path on both sides here), which "
        "also creates each `job_dir`."
    ),
    "aws_batch": (
        "moto's server (`tests/e2e/infra/moto.py`) with the AWS Batch and CloudWatch Logs "
        "APIs; each job runs as a real container of a private podman (busybox image, no "
        "registry), into which the column mounts this machine's Python, venv and checkout "
        "read-only and the cell's directory read-write as Batch host volumes "
        "(`host_volumes`), so the components' `sys.executable` runs there and their outputs "
        "land where `Runner.outputs` reads them. tether's requests, status, logs and "
        "outputs are real; AWS itself is not reached."
    ),
    "local_docker": (
        "real containers of the tether image (built from the checkout by `images/build.sh`, "
        "Debian base by debootstrap) on a private podman serving the Docker API; both "
        "components run the image's `python3`, and the outputs root is a directory "
        "bind-mounted into every container (`TETHER_OUTPUTS_ROOT`)."
    ),
    "ray": (
        "a real Ray 2.60 head on 127.0.0.1 (`ray start --head`, `tests/e2e/infra/ray.py`); "
        "each component is a Ray job submitted through the Jobs API, whose tether driver "
        "runs the replica as a Ray task (a process of this machine, so outputs use the "
        "default `file://` root)."
    ),
    "lsf": "not runnable here: IBM Spectrum LSF is licensed software that cannot be installed "
           "on this machine; the job scripts are golden-tested and the command layer runs "
           "against a fake `bsub`/`bjobs`/`bkill` (`tests/schedulers/test_lsf.py`).",
    "gcp_batch": "not runnable here: Google Cloud Batch is a cloud service this machine cannot "
                 "reach (no network, no project or credentials); the requests are "
                 "golden-tested and the client code runs against an in-test gRPC "
                 "`BatchService` (`tests/schedulers/test_gcp_batch.py`).",
    "aws_sagemaker": "not runnable here: moto's server records SageMaker training jobs but "
                     "never runs them, and AWS itself cannot be reached; the requests are "
                     "golden-tested and submit, describe and stop run against moto "
                     "(`tests/e2e/test_aws_sagemaker_e2e.py`).",
}
"""Backend (column) -> how it runs here. A new backend adds one entry and one test module."""

NOT_RUNNABLE = {
    "lsf": "LSF cannot run on this machine (render and command layer tested offline)",
    "gcp_batch": "GCP Batch cannot run on this machine (render and client tested offline)",
    "aws_sagemaker": "moto records training jobs but never runs them (requests tested on moto)",
}
"""Columns of backends that cannot run here, with why: every cell of theirs says so (no test
module runs them)."""


RECOVERY = "recovery"
"""The row key of the recovery row of the CLI and the Runner (``(RECOVERY, backend)`` cells);
each orchestrator adapter's recovery row is ``recovery-<adapter>``."""

RECOVERY_ROWS = {
    RECOVERY: "the CLI and the Runner",
    "recovery-airflow": "Airflow (`ComponentOperator`, `dag.test()`)",
    "recovery-prefect": "Prefect (`component_task`, real API server)",
    "recovery-kfp": "KFP (launcher step, `kfp.local.SubprocessRunner`)",
}
"""Recovery row key -> through what the failure is recovered (its row title says)."""

RECOVERY_TITLE = (
    "Recovery from an infrastructure failure (a `RecoveryPolicy`: the next attempt under one "
    "logical handle)"
)

RECOVERY_TESTS = {
    (RECOVERY, "kubernetes"): "`tests/e2e/test_kubernetes_recovery_e2e.py`",
    (RECOVERY, "slurm"): "`tests/e2e/test_slurm_recovery_e2e.py`",
    (RECOVERY, "slurm_ssh"): "`tests/e2e/test_slurm_recovery_remote_e2e.py`",
    (RECOVERY, "slurm_rest"): "`tests/e2e/test_slurm_recovery_remote_e2e.py`",
    ("recovery-airflow", "slurm"): "`tests/adapters/airflow/test_airflow_recovery_slurm.py`",
    ("recovery-prefect", "slurm"): "`tests/adapters/prefect/test_recovery_slurm.py`",
    ("recovery-kfp", "slurm"): "`tests/adapters/kfp/test_recovery_slurm.py`",
    ("recovery-airflow", "kubernetes"): "`tests/adapters/airflow/test_airflow_recovery_kube.py`",
    ("recovery-prefect", "kubernetes"): "`tests/adapters/prefect/test_recovery_kube.py`",
    ("recovery-kfp", "kubernetes"): "`tests/adapters/kfp/test_recovery_kube.py`",
}
"""Recovery cell -> the test module that fills it (see :func:`recovery_cell`)."""

RECOVERY_UNTESTED = {
    "local_cwd": "not applicable: one machine, no infrastructure to lose (the same loop "
                 "recovers application failures, `tests/runner/test_recovery_runner.py`)",
    "local_docker": "not applicable: one machine, no infrastructure to lose",
    # the CLI and Runner row's ssh and rest cells are filled by their test; these are the
    # adapters' rows
    "slurm_ssh": "not tested: the `slurm` column's status table and recovery loop, over ssh "
                 "(recovery tested on the `slurm` column, and on the CLI and Runner row)",
    "slurm_rest": "not tested: the `slurm` column's status table and recovery loop, over "
                  "slurmrestd (recovery tested on the `slurm` column, and on the CLI and "
                  "Runner row)",
    "aws_batch": "not tested: moto cannot terminate a host or reclaim a spot instance (the "
                 "causes are mapped in a table test)",
    "ray": "not tested: no node failure injected on the Ray head yet (`node_lost` is mapped "
           "in a unit table)",
}
"""Recovery cells no test fills, with why."""


@dataclass
class Cell:
    """The outcome of one cell: ``pass``, ``fail`` or ``not runnable here``, and why."""

    outcome: str
    reason: str = ""

    def text(self) -> str:
        """The table cell."""
        reason = self.reason.replace("|", "\\|").replace("\n", " ")
        return f"{self.outcome}: {reason}" if reason else self.outcome


def _default_cell(backend: str) -> Cell:
    if backend in NOT_RUNNABLE:
        return Cell("not runnable here", NOT_RUNNABLE[backend])
    return Cell("not run")


def _recovery_default(backend: str) -> Cell:
    if backend in RECOVERY_UNTESTED:
        outcome, _, reason = RECOVERY_UNTESTED[backend].partition(": ")
        return Cell(outcome, reason)
    return _default_cell(backend)


def recovery_cell(backend: str, outcomes: dict[str, bool], how: str, row: str = RECOVERY
                  ) -> Cell:  # fmt: skip
    """A recovery cell from its tests' outcomes (test name -> passed).

    Args:
        backend: The column.
        outcomes: The tests of :data:`RECOVERY_TESTS` that ran, and whether each passed.
        how: What the tests recover from, and through what (the cell's text when all pass).
        row: The recovery row (a key of :data:`RECOVERY_ROWS`).

    Returns:
        ``pass`` with ``how`` when every test that ran passed, else ``fail`` naming those
        that did not.
    """
    failed = sorted(name for name, ok in outcomes.items() if not ok)
    if failed:
        return Cell("fail", f"{', '.join(failed)} in {RECOVERY_TESTS[(row, backend)]}")
    return Cell("pass", how)


def recovery_outcomes(adapter: str, backend: str, outcomes: dict[str, bool], how: str) -> None:
    """Records an orchestrator adapter's recovery cell (nothing when no test of it ran).

    Args:
        adapter: ``airflow``, ``prefect`` or ``kfp``.
        backend: The column.
        outcomes: Test name -> whether it passed.
        how: What the tests recover from (the cell's text when all pass).
    """
    if outcomes:
        row = f"recovery-{adapter}"
        write_doc({(row, backend): recovery_cell(backend, outcomes, how, row)})


def render_table(results: dict[tuple[str, str], Cell]) -> str:
    """``docs/portability.md``: one cell per adapter x backend.

    Args:
        results: The known cells; a missing one reads "not run".

    Returns:
        The Markdown.
    """
    head = "| adapter \\ backend | " + " | ".join(f"`{b}`" for b in BACKENDS) + " |"
    rows = [head, "|---" * (len(BACKENDS) + 1) + "|"]
    for a, title in ADAPTERS.items():
        cells = [results.get((a, b), _default_cell(b)).text() for b in BACKENDS]
        rows.append(f"| {title} | " + " | ".join(cells) + " |")
    for row, through in RECOVERY_ROWS.items():
        cells = [results.get((row, b), _recovery_default(b)).text() for b in BACKENDS]
        rows.append(f"| {RECOVERY_TITLE}, through {through} | " + " | ".join(cells) + " |")
    tests = ", ".join(dict.fromkeys(RECOVERY_TESTS.values()))  # each module once
    how = "\n".join(f"- `{b}`: {text}" for b, text in BACKENDS.items())
    return (
        "# Portability matrix\n\n"
        f"<!-- Generated by `{COMMAND}` (tests/e2e/matrix). Do not edit: "
        "run the command again. -->\n\n"
        f"Generated by `{COMMAND}`. Each cell runs one pipeline of two components through "
        "the adapter on the backend: `produce` publishes an output (`AppRun.add_output`), "
        "the adapter passes it to `consume` (`Runner.outputs` for the CLI and the Runner, "
        "Airflow an XCom, Prefect the task's `JobResult.outputs`, KFP a step output "
        "parameter), and the "
        f"cell passes when `consume` publishes `{EXPECTED}`. The last rows are filled by the "
        f"recovery tests ({tests}): an infrastructure failure injected under a job's first "
        "attempt, which tether recovers as the next attempt, through the CLI or the Runner "
        "and through each orchestrator adapter (the step succeeds once, with one job per "
        "attempt).\n\n" + "\n".join(rows) + "\n\n"
        "Backends as they run here:\n\n" + how + "\n\n"
        "A backend added to tether adds its column here (see `docs/schedulers.md`).\n"
    )


def write_doc(ran: dict[tuple[str, str], Cell]) -> None:
    """Merges the cells a module ran into the results file and renders the page.

    Args:
        ran: The cells this module ran (or found not runnable).
    """
    if not ran:
        return
    with open(RESULTS_FILE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known: dict[str, dict[str, str]] = {}
        if RESULTS_FILE.exists():
            known = json.loads(RESULTS_FILE.read_text())
        for (a, b), cell in ran.items():
            known[f"{a}/{b}"] = asdict(cell)
        known = {k: known[k] for k in sorted(known)}
        RESULTS_FILE.write_text(json.dumps(known, indent=1) + "\n")
        results = {
            tuple(k.split("/", 1)): Cell(**v) for k, v in known.items()
        }
        DOC.write_text(render_table(results))  # type: ignore[arg-type]
