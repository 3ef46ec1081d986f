"""The harnesses of the built-in backends that run on this machine.

``local_cwd`` always runs. ``kubernetes`` runs against the session's real kube-apiserver,
etcd and kube-controller-manager (``tests/e2e/infra``) with the test kubelet in process mode:
each pod's container command runs as a local process (``tests/e2e/infra/kubelet_exec.py``),
so programs, exit codes, logs, restarts and cancellation are real; only the container
runtime is replaced by the host. ``ray`` runs on the session's real local Ray head
(``tests/e2e/infra/ray.py``): every case submits real Ray jobs through the Jobs API.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.contract.harness import BackendHarness
from tether.schedulers.api import Scheduler
from tether.specs import AppDef, CfgVal, Resource, Role

CONTRACT_SUITE_LABEL = "contract"
"""Value of the ``e2e-suite`` label of the contract suite's pods (the test kubelet runs them)."""


class LocalHarness(BackendHarness):
    """``local_cwd``: replicas are processes of this machine, state under TETHER_STATE_DIR."""

    name = "local_cwd"
    image = ""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self._shared = tmp_path / "shared"
        self._shared.mkdir()

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.local import create_scheduler

        return create_scheduler("contract")

    def offline_scheduler(self) -> Scheduler[Any]:
        return self.scheduler()

    def cfg(self) -> dict[str, CfgVal]:
        return {"grace_period": 2.0}

    def scheduler_params(self) -> dict[str, Any]:
        return {}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def state_snapshot(self, sched: Scheduler[Any]) -> object:
        root = Path(os.environ["TETHER_STATE_DIR"])
        return sorted(
            (str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"")
            for p in root.rglob("*")
        )

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        store = sched.store  # type: ignore[attr-defined]
        path = store.state_path(app_id)
        return path.read_bytes() if path.exists() else None

    def kill_controller(self, sched: Scheduler[Any], app_id: str) -> bool:
        from tests.schedulers.contract.harness import wait_for
        from tether.schedulers.local.supervisor import pid_alive

        rec = sched.store.load(app_id)  # type: ignore[attr-defined]
        assert rec is not None and rec.supervisor_pid is not None, rec
        os.kill(rec.supervisor_pid, signal.SIGKILL)
        wait_for("the supervisor to die",
                 lambda: not pid_alive(rec.supervisor_pid, rec.supervisor_start_time))  # fmt: skip
        return True

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str:
        return "localhost"


class KubernetesHarness(BackendHarness):
    """``kubernetes`` on the session cluster; a namespace per case; pods run as processes."""

    name = "kubernetes"
    image = "tether-contract/host-python:1"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        from tests.e2e.infra.kube import create_namespace

        request.getfixturevalue("tether_contract_kubelet")
        self.api = request.getfixturevalue("kube_api")
        self.namespace = "c-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
        create_namespace(self.api, self.namespace)
        self._shared = tmp_path / "shared"
        self._shared.mkdir()

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.kubernetes import create_scheduler

        return create_scheduler("contract", client=self.api, namespace=self.namespace)

    def offline_scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.kubernetes import create_scheduler

        return create_scheduler("contract", kubeconfig=str(self.tmp_path / "no-kubeconfig"))

    def cfg(self) -> dict[str, CfgVal]:
        return {"namespace": self.namespace, "labels": {"e2e-suite": CONTRACT_SUITE_LABEL}}

    def scheduler_params(self) -> dict[str, Any]:
        return {"kubernetes": {"client": self.api, "namespace": self.namespace}}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        from kubernetes import client

        from tether.schedulers.kubernetes.render import LABEL_APP_ID

        ns, _, name = app_id.partition(":")
        sel = f"{LABEL_APP_ID}={name}"
        v1, batch = client.CoreV1Api(self.api), client.BatchV1Api(self.api)
        objs = [
            *batch.list_namespaced_job(ns, label_selector=sel).items,
            *v1.list_namespaced_pod(ns, label_selector=sel).items,
            *v1.list_namespaced_service(ns, label_selector=sel).items,
        ]
        return sorted(
            (type(o).__name__, o.metadata.name, o.metadata.resource_version) for o in objs
        )

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str:
        # documented: replica 0 of the first role under the app's headless Service
        from tether.schedulers.kubernetes.render import replica_hostname

        ns, _, name = app_id.partition(":")
        if sum(r.num_replicas for r in app.roles) == 1:
            return "localhost"
        host = replica_hostname(name, app.roles[0].name, 0)
        return f"{host}.{name}.{ns}.svc.cluster.local"


class RayHarness(BackendHarness):
    """``ray`` on the session's local Ray head; replicas are Ray tasks on this machine.

    The head advertises 2 CPUs (the machine has 2), so each replica asks for a quarter CPU:
    the cases' three-replica apps fit in one placement group. The programs run on this host,
    so they see ``host_dir``. Jobs a case left running are stopped when it ends, so the next
    case finds the head's CPUs free.
    """

    name = "ray"
    image = ""
    REPLICA_CPU = 0.25

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.head = request.getfixturevalue("ray_head")
        self._shared = tmp_path / "shared"
        self._shared.mkdir()
        self._started_ms = int(time.time() * 1000)
        request.addfinalizer(self._stop_leftovers)

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.ray import create_scheduler

        return create_scheduler("contract", address=self.head.address)

    def offline_scheduler(self) -> Scheduler[Any]:
        from tests.e2e.infra.ray import free_port
        from tether.schedulers.ray import create_scheduler

        return create_scheduler("contract", address=f"http://127.0.0.1:{free_port()}")

    def cfg(self) -> dict[str, CfgVal]:
        return {"python": self.python}

    def scheduler_params(self) -> dict[str, Any]:
        return {"ray": {"address": self.head.address}}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def role(self, name: str, code: str, *, num_replicas: int = 1, **kw: Any) -> Role:
        kw.setdefault("resource", Resource(cpu=self.REPLICA_CPU, gpu=0, memMB=0))
        return super().role(name, code, num_replicas=num_replicas, **kw)

    def _job(self, sched: Scheduler[Any], app_id: str) -> Any:
        return sched.client().get_job_info(app_id)  # type: ignore[attr-defined]

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        """Everything the Jobs API keeps of the job (status, message, times, driver, exit
        code). A running job's driver registers with Ray a moment after the job turned
        RUNNING (Ray fills ``driver_info`` by itself): that is waited for first."""
        from tests.schedulers.contract.harness import wait_for

        info = self._job(sched, app_id)
        if info.status == "RUNNING" and info.driver_info is None:
            info = wait_for("Ray to register the job's driver", lambda: (
                (i := self._job(sched, app_id)).status != "RUNNING" or i.driver_info) and i)
        return info.dict()

    def kill_controller(self, sched: Scheduler[Any], app_id: str) -> bool:
        """Kills tether's driver (the job's entrypoint) and waits until Ray has cleaned up
        natively: the job is terminal and no program of this case runs any more."""
        from tests.schedulers.contract.harness import wait_for
        from tether.specs.status import is_terminal

        info = wait_for("the driver to run", lambda: (
            (i := self._job(sched, app_id)).driver_info and i.driver_info.pid and i))  # fmt: skip
        os.kill(int(info.driver_info.pid), signal.SIGKILL)
        wait_for("Ray to record the job's end",
                 lambda: is_terminal(sched.describe(app_id).state))  # type: ignore[union-attr]
        wait_for("Ray to stop the job's replicas", lambda: not self._case_processes())
        return True

    def _case_processes(self) -> list[int]:
        """Processes whose environment names this case's ``host_dir``."""
        mark = f"CONTRACT_DIR={self._shared}".encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in environ:
                found.append(int(pid))
        return found

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str:
        # documented: the address of the node holding replica 0 of the first role
        return "localhost" if sum(r.num_replicas for r in app.roles) == 1 else "127.0.0.1"

    def _stop_leftovers(self) -> None:
        from ray.job_submission import JobStatus, JobSubmissionClient

        client = JobSubmissionClient(self.head.address)
        for job in client.list_jobs():
            if job.submission_id and (job.start_time or 0) >= self._started_ms and \
                    job.status in (JobStatus.PENDING, JobStatus.RUNNING):
                client.stop_job(job.submission_id)
