"""Runs the test suite as independent groups in parallel (what `make test` and CI run).

Each group is its own pytest process with its own session fixtures (one kube-apiserver, one
Slurm cluster, one Ray head...), so groups share no infrastructure and can run side by side:
most end-to-end tests wait on real backends, so two cores serve five groups well. Every test
belongs to exactly one group: the unit group takes everything not marked ``e2e``; the e2e
groups take the ``e2e`` tests under their paths, and the last one every other ``e2e`` test. The
contract suite is the one path in several groups: each runs the cases of its own backends.

Each group's output goes to ``build/test-groups/<group>.log``; its summary is printed when it
ends, and the run ends with one combined ``N passed, N failed`` line. The exit status is 0 only
when every group passed (pytest's "no tests collected" counts as passed).

Usage: ``python tests/run_groups.py [GROUP ...] [-- PYTEST_ARGS]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG_DIR = ROOT / "build" / "test-groups"


@dataclass
class Group:
    """One pytest process.

    Attributes:
        name: The group's name.
        paths: Test paths it runs.
        marker: The ``-m`` expression.
        ignore: Paths it leaves to other groups.
        args: Further pytest arguments (e.g. ``--contract-backends``: which backends' contract
            cases this group runs).
    """

    name: str
    paths: list[str]
    marker: str
    ignore: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def argv(self, extra: list[str]) -> list[str]:
        """The pytest command line."""
        args = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider",
                "--durations=15", "-m", self.marker, *self.paths]
        args += [f"--ignore={p}" for p in self.ignore]
        return args + self.args + extra


CONTRACT = "tests/schedulers/contract"
"""The contract suite: every group that runs some backends' cases takes it, with
``--contract-backends`` naming them (each backend's cases run in exactly one group)."""
KUBE = [
    "tests/e2e/test_kubernetes_e2e.py",
    "tests/e2e/test_kubernetes_real.py",
    "tests/e2e/infra/test_infra_kube.py",
    "tests/e2e/infra/test_infra_kube_node.py",
    "tests/e2e/test_kfp_kube_launcher.py",
    "tests/adapters/airflow/test_airflow_kubernetes.py",
    CONTRACT,
    "tests/e2e/matrix/test_matrix.py",
    "tests/e2e/test_watch_hub_kube.py",
    "tests/e2e/test_kubernetes_failure_causes_e2e.py",
    "tests/e2e/test_kubernetes_recovery_e2e.py",
    "tests/e2e/test_kubernetes_disruption_e2e.py",
    "tests/e2e/test_kubernetes_ddp_recovery_e2e.py",
    "tests/e2e/test_kube_log_follow.py",
    "tests/adapters/airflow/test_airflow_failover_kube.py",
    "tests/adapters/prefect/test_failover_kube.py",
    "tests/adapters/kfp/test_failover_kube.py",
    "tests/adapters/airflow/test_airflow_recovery_kube.py",
    "tests/adapters/prefect/test_recovery_kube.py",
    "tests/adapters/kfp/test_recovery_kube.py",
    "tests/e2e/test_kubernetes_placement_e2e.py",
]
SLURM_RAY = [
    "tests/e2e/test_slurm_e2e.py",
    "tests/e2e/test_slurm_accounting_e2e.py",
    "tests/e2e/test_slurm_ssh_e2e.py",
    "tests/e2e/test_slurm_rest_e2e.py",
    "tests/adapters/airflow/test_airflow_slurm_remote.py",
    "tests/adapters/prefect/test_slurm_connection.py",
    "tests/e2e/matrix/test_matrix_slurm.py",
    "tests/e2e/infra/test_reaper_slurm.py",
    "tests/e2e/test_ray_e2e.py",
    "tests/e2e/matrix/test_matrix_ray.py",
    "tests/e2e/test_slurm_watch.py",
    "tests/e2e/test_ray_watch.py",
    "tests/e2e/test_slurm_failure_causes_e2e.py",
    "tests/e2e/test_slurm_recovery_e2e.py",
    "tests/adapters/airflow/test_airflow_recovery_slurm.py",
    "tests/adapters/prefect/test_recovery_slurm.py",
    "tests/adapters/kfp/test_recovery_slurm.py",
    "tests/adapters/airflow/test_airflow_failover_slurm.py",
    "tests/adapters/prefect/test_failover_slurm.py",
    "tests/adapters/kfp/test_failover_slurm.py",
    "tests/e2e/test_slurm_recovery_cli_e2e.py",
    "tests/e2e/test_slurm_recovery_remote_e2e.py",
    "tests/e2e/test_slurm_recovery_ddp_e2e.py",
    "tests/e2e/test_slurm_placement_e2e.py",
    "tests/e2e/test_ray_failure_causes_e2e.py",
    "tests/adapters/airflow/test_airflow_links.py",
]
SLURM_RAY_CONTRACT = ["slurm", "slurm_ssh", "slurm_rest", "ray"]
"""The backends whose contract cases the slurm+ray group runs (a backend adds its id here)."""
CONTAINERS = [
    "tests/e2e/test_local_docker.py",
    "tests/e2e/test_image_workspace.py",
    "tests/e2e/test_tether_image.py",
    "tests/e2e/test_kfp_docker.py",
    "tests/e2e/test_aws_batch_e2e.py",
    "tests/e2e/test_aws_sagemaker_e2e.py",
    "tests/e2e/matrix/test_matrix_aws_batch.py",
    "tests/e2e/matrix/test_matrix_local_docker.py",
    "tests/e2e/test_aws_batch_watch.py",
    "tests/e2e/infra/test_reaper_podman.py",
    "tests/e2e/test_aws_batch_recovery_e2e.py",
    "tests/e2e/infra/test_ports_retry.py",
]
CONTAINERS_CONTRACT = ["aws_batch", "local_docker"]
"""The backends whose contract cases the containers group runs (podman, moto)."""
BACKENDS = [*SLURM_RAY, *CONTAINERS]

GROUPS = [
    Group("unit", ["tests"], "not e2e"),
    Group("kubernetes", KUBE, "e2e", args=["--contract-backends=local_cwd,kubernetes"]),
    # one group per private infrastructure: a Slurm cluster and a Ray head; one podman
    # service (its CNI network configuration is host-wide) for containers and moto's Batch
    Group("slurm_ray", [CONTRACT, *SLURM_RAY], "e2e",
          args=[f"--contract-backends={','.join(SLURM_RAY_CONTRACT)}"]),
    Group("containers", [CONTRACT, *CONTAINERS], "e2e",
          args=[f"--contract-backends={','.join(CONTAINERS_CONTRACT)}"]),
    # every other e2e test: the orchestrators against their real servers, the README, ...
    Group("orchestrators", ["tests"], "e2e", ignore=KUBE + BACKENDS),
]

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def summary_counts(text: str) -> dict[str, int]:
    """The counts in pytest's closing line.

    Args:
        text: The group's output.

    Returns:
        ``passed``, ``failed``, ``error``... as found on the last summary line.
    """
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)
             or "no tests ran" in ln]
    counts: dict[str, int] = {}
    for n, what in _COUNT.findall(lines[-1] if lines else ""):
        counts[what.rstrip("s") if what.startswith("error") else what] = int(n)
    return counts


def main(argv: list[str]) -> int:
    """Runs the chosen groups (all by default) and reports.

    Args:
        argv: Group names, then ``--`` and extra pytest arguments.

    Returns:
        The exit status.
    """
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    chosen = [g for g in GROUPS if not argv or g.name in argv]
    unknown = set(argv) - {g.name for g in GROUPS}
    if unknown:
        print(f"unknown group(s) {sorted(unknown)}; groups: {[g.name for g in GROUPS]}")
        return 2
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    started = time.monotonic()
    running: dict[str, tuple[subprocess.Popen[bytes], Path, float]] = {}
    for g in chosen:
        log = LOG_DIR / f"{g.name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(g.argv(extra), cwd=ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        running[g.name] = (proc, log, time.monotonic())
        print(f"[tests] {g.name}: started ({' '.join(g.paths)} -m '{g.marker}'), log {log}",
              flush=True)
    totals: dict[str, int] = {}
    bad: list[str] = []
    while running:
        time.sleep(2)
        for name, (proc, log, t0) in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            del running[name]
            text = log.read_text(errors="replace")
            counts = summary_counts(text)
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
            ok = code in (0, 5)
            if not ok:
                bad.append(name)
            tail = [ln for ln in text.splitlines() if ln.startswith(("FAILED", "ERROR"))]
            print(f"[tests] {name}: {'ok' if ok else f'FAILED (exit {code})'} in "
                  f"{time.monotonic() - t0:.0f}s: {counts}", flush=True)
            for ln in tail[:30]:
                print(f"[tests] {name}: {ln}", flush=True)
            if not ok and not tail:
                print("\n".join(text.splitlines()[-40:]), flush=True)
    print(f"[tests] all groups done in {time.monotonic() - started:.0f}s"
          + (f"; failed groups: {', '.join(bad)}" if bad else ""))
    failed = totals.get("failed", 0) + totals.get("error", 0)
    line = f"{totals.get('passed', 0)} passed, {failed} failed"
    if totals.get("skipped"):
        line += f", {totals['skipped']} skipped"
    print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
