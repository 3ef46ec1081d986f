"""The harnesses of the built-in backends that run on this machine.

``local_cwd`` always runs. ``kubernetes`` runs against the session's real kube-apiserver,
etcd and kube-controller-manager (``tests/e2e/infra``) with the test kubelet in process mode:
each pod's container command runs as a local process (``tests/e2e/infra/kubelet_exec.py``),
so programs, exit codes, logs, restarts and cancellation are real; only the container
runtime is replaced by the host. ``local_docker`` runs real containers (the tether image)
on the session's private podman (``tests/e2e/infra/tether_image.py``).
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.contract.harness import BackendHarness
from tether.schedulers.api import Scheduler
from tether.specs import AppDef, BindMount, CfgVal, Role

CONTRACT_SUITE_LABEL = "contract"
CASE_LABEL = "tether-contract-case"
"""Label of a ``local_docker`` case's containers and network (the harness deletes them)."""
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


class LocalDockerHarness(BackendHarness):
    """``local_docker`` on the session's private podman (Docker API) running the tether image.

    The programs run ``python3`` of the tether image (``tests/e2e/infra/tether_image.py``);
    ``host_dir`` is bind-mounted at the same path in every container. What the containers
    cannot do like host processes is declared here, not skipped silently:

    - a program's pid is its pid in the container's own pid namespace: :meth:`program_alive`
      finds it on the host through the container's init process (the engine's ``State.Pid``)
      and that process's pid namespace.
    - podman stamps log lines with whole seconds (:attr:`log_time_precision`).
    """

    name = "local_docker"
    python = "python3"
    log_time_precision = 1.0

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        built = request.getfixturevalue("tether_image")
        self.image = built.image
        self.docker_host: str = built.docker_host
        self._shared = tmp_path / "shared"
        self._shared.mkdir()
        # every app of the case carries this label; they are deleted after it, so `list`
        # stays short and no network outlives the case
        self.case_label = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
        request.addfinalizer(self._delete_apps)

    def _delete_apps(self) -> None:
        from tether.schedulers.local_docker.render import LABEL_APP_ID

        api = self._api()
        try:
            nets = api.networks(filters={"label": [f"{CASE_LABEL}={self.case_label}"]})
        finally:
            api.close()
        with self.open_scheduler() as sched:
            for net in nets:
                app_id = (net.get("Labels") or {}).get(LABEL_APP_ID)
                if app_id:
                    sched.delete(app_id)

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.local_docker import create_scheduler

        return create_scheduler("contract", docker_host=self.docker_host)

    def offline_scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.local_docker import create_scheduler

        return create_scheduler("contract", docker_host=f"unix://{self.tmp_path}/no.sock")

    def cfg(self) -> dict[str, CfgVal]:
        # nothing can be pulled here; SIGTERM is ignored by a pid 1 without a handler, so
        # cancel kills after stop_timeout
        return {"pull": False, "stop_timeout": 2, "labels": {CASE_LABEL: self.case_label}}

    def scheduler_params(self) -> dict[str, Any]:
        return {"local_docker": {"docker_host": self.docker_host}}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def role(self, name: str, code: str, *, num_replicas: int = 1, **kw: Any) -> Role:
        mounts = [*kw.pop("mounts", []), BindMount(src_path=str(self._shared),
                                                   dst_path=str(self._shared))]
        return super().role(name, code, num_replicas=num_replicas, mounts=mounts, **kw)

    def _api(self) -> Any:
        import docker

        return docker.APIClient(base_url=self.docker_host, version="auto", timeout=60)

    def state_snapshot(self, sched: Scheduler[Any]) -> object:
        # containers and volumes are private to the session's podman (networks are not:
        # podman instances on one host share the network configuration)
        api = self._api()
        try:
            vols = (api.volumes() or {}).get("Volumes") or []
            return (sorted(c["Id"] for c in api.containers(all=True)),
                    sorted(v["Name"] for v in vols))
        finally:
            api.close()

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        from tether.schedulers.local_docker.render import LABEL_APP_ID

        api = self._api()
        try:
            sel = {"label": [f"{LABEL_APP_ID}={app_id}"]}
            out = []
            for c in api.containers(all=True, filters=sel):
                i = api.inspect_container(c["Id"])
                st = i.get("State") or {}
                out.append((i["Id"], st.get("Status"), st.get("StartedAt"),
                            st.get("FinishedAt"), st.get("ExitCode"), i.get("RestartCount")))
            vols = (api.volumes(filters=sel) or {}).get("Volumes") or []
            return sorted(out), sorted(v["Name"] for v in vols)
        finally:
            api.close()

    def program_alive(self, sched: Scheduler[Any], app_id: str, pid: int) -> bool:
        from tether.schedulers.local_docker.render import LABEL_APP_ID

        api = self._api()
        try:
            inits = [api.inspect_container(c["Id"]).get("State", {}).get("Pid") or 0
                     for c in api.containers(all=True,
                                             filters={"label": [f"{LABEL_APP_ID}={app_id}"]})]
        finally:
            api.close()
        spaces = {_pid_ns(p) for p in inits if p > 0} - {None}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or _pid_ns(int(proc.name)) not in spaces:
                continue
            try:
                status = (proc / "status").read_text()
            except OSError:
                continue
            nspid = next((ln.split()[1:] for ln in status.splitlines()
                          if ln.startswith("NSpid:")), [])
            state = next((ln.split()[1] for ln in status.splitlines()
                          if ln.startswith("State:")), "")
            if nspid and nspid[-1] == str(pid) and state != "Z":
                return True
        return False

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str:
        from tether.schedulers.local_docker.render import rank0_hostname

        return rank0_hostname(app, app_id)


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
