"""The ``kubernetes`` contract harness on a real kubelet (``tests/e2e/infra/kube_node.py``).

Pods run real containers of the tether image under containerd: exit codes, signals,
cancellation's grace period, logs and the Job controller's retries are the runtime's own.
``host_dir`` is bind-mounted (``hostPath``) at the same path in every container (the node is
this host). A program's pid is its pid in the container's pid namespace; :meth:`program_alive`
maps it through the pod containers' init processes (runc's state in the node's runc root).

The earlier harness, whose test kubelet runs each pod's command as a host process, stays
selectable: ``--tether-harness tests.schedulers.contract.backends:KubernetesHarness``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.contract.backends import KubernetesHarness, _pid_ns
from tether.schedulers.api import Scheduler
from tether.specs import BindMount, CfgVal, Role


class RealKubernetesHarness(KubernetesHarness):
    """``kubernetes`` on the session's real single-node cluster, running the tether image."""

    python = "python3"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        from tests.e2e.infra.kube import create_namespace

        self.request = request
        self.tmp_path = tmp_path
        real = request.getfixturevalue("real_kube")
        self.image = request.getfixturevalue("real_kube_tether_image")
        self.node = real.node
        self.api = real.api
        self.namespace = "c-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
        create_namespace(self.api, self.namespace)
        self._shared = tmp_path / "shared"
        self._shared.mkdir()
        self._shared.chmod(0o777)
        request.addfinalizer(self._delete_namespace)

    def _delete_namespace(self) -> None:
        """Removes the case's pods (they must not hold the node's two cores)."""
        from kubernetes import client

        v1 = client.CoreV1Api(self.api)
        v1.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)

    def cfg(self) -> dict[str, CfgVal]:
        return {**super().cfg(), "image_pull_policy": "Never"}

    def role(self, name: str, code: str, *, num_replicas: int = 1, **kw: Any) -> Role:
        mounts = [
            *kw.pop("mounts", []),
            BindMount(src_path=str(self._shared), dst_path=str(self._shared)),
        ]
        return super().role(name, code, num_replicas=num_replicas, mounts=mounts, **kw)

    def _container_inits(self, app_id: str) -> list[int]:
        """Host pids of the init processes of the app's running containers."""
        from kubernetes import client

        from tether.schedulers.kubernetes.naming import LABEL_APP_ID

        ns, _, name = app_id.partition(":")
        pods = client.CoreV1Api(self.api).list_namespaced_pod(
            ns, label_selector=f"{LABEL_APP_ID}={name}"
        )
        runc_root = self.node.dir / "containerd" / "runc" / "k8s.io"
        pids = []
        for pod in pods.items:
            for st in pod.status.container_statuses or []:
                cid = (st.container_id or "").rpartition("://")[2]
                if not cid:
                    continue
                out = subprocess.run(
                    ["runc", "--root", str(runc_root), "state", cid],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                if out.returncode == 0:
                    pids.append(int(json.loads(out.stdout).get("pid") or 0))
        return [p for p in pids if p > 0]

    def program_alive(self, sched: Scheduler[Any], app_id: str, pid: int) -> bool:
        spaces = {_pid_ns(p) for p in self._container_inits(app_id)} - {None}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or _pid_ns(int(proc.name)) not in spaces:
                continue
            try:
                status = (proc / "status").read_text()
            except OSError:
                continue
            nspid = next(
                (ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), []
            )
            state = next(
                (ln.split()[1] for ln in status.splitlines() if ln.startswith("State:")), ""
            )
            if nspid and nspid[-1] == str(pid) and state != "Z":
                return True
        return False
