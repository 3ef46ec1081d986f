"""The harnesses of the built-in backends that run on this machine.

``local_cwd`` always runs. ``kubernetes`` runs against the session's real kube-apiserver,
etcd and kube-controller-manager (``tests/e2e/infra``) with the test kubelet in process mode:
each pod's container command runs as a local process (``tests/e2e/infra/kubelet_exec.py``),
so programs, exit codes, logs, restarts and cancellation are real; only the container
runtime is replaced by the host. ``slurm`` runs on the session's real Slurm cluster (munged,
slurmctld and two slurmd "nodes" on this host, ``tests/e2e/infra/slurm.py``): jobs are real
batch jobs, and the test's directories are shared with the nodes because they are this host.
``aws_batch`` runs against moto's server, whose Batch jobs are real podman containers
(``tests/e2e/infra/moto.py``).
``local_docker`` runs real containers (the tether image) on the session's private podman
(``tests/e2e/infra/tether_image.py``).
``ray`` runs on the session's real local Ray head (``tests/e2e/infra/ray.py``): every case
submits real Ray jobs through the Jobs API.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.contract.harness import BackendHarness
from tether.schedulers.api import Scheduler
from tether.specs import AppDef, BindMount, CfgVal, Resource, Role

_MOTO_ONE_STREAM = (
    "moto writes every node of a multi-node job to the job's one log stream, so a replica's "
    "log is not its own there (Batch writes one stream per node)"
)
_MOTO_LOG_AT_END = "moto publishes a job's log only when its container has exited"
_MOTO_NO_RETRIES = "moto records retryStrategy but never retries a job"

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
        from tether.schedulers.local.proctable import pid_alive

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

        from tether.schedulers.kubernetes.naming import LABEL_APP_ID

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
        from tether.schedulers.kubernetes.naming import replica_hostname

        ns, _, name = app_id.partition(":")
        if sum(r.num_replicas for r in app.roles) == 1:
            return "localhost"
        host = replica_hostname(name, app.roles[0].name, 0)
        return f"{host}.{name}.{ns}.svc.cluster.local"


SLURM_JOB_FIELDS = (
    "job_state", "state_reason", "restart_cnt", "comment", "exit_code", "derived_exit_code",
    "start_time", "end_time", "nodes", "requeue", "batch_flag",
)
"""The ``squeue --json`` fields of a job that a change to it would touch (not the scheduler's
own bookkeeping, such as ``last_sched_evaluation``)."""


class SlurmHarness(BackendHarness):
    """``slurm`` on the session cluster; a job directory per case (shared: nodes are this host).

    Slurm keeps no tether controller per job (``kill_controller`` is False) and names the
    rank-0 host by the first node's ``NodeAddr`` (127.0.0.1 here).
    """

    name = "slurm"
    image = ""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.cluster = request.getfixturevalue("slurm_cluster")
        self._shared = tmp_path / "shared"
        self._shared.mkdir()
        self.job_dir = tmp_path / "jobs"
        request.addfinalizer(self._cancel_leftovers)

    def _cancel_leftovers(self) -> None:
        """Cancels the case's jobs that still run (a failed case must not hold the nodes)."""
        res = self.cluster.run("squeue", "--json", check=False)
        if res.returncode != 0:
            return
        for job in json.loads(res.stdout).get("jobs", []):
            if job.get("current_working_directory") == str(self.job_dir):
                self.cluster.run("scancel", str(job["job_id"]), check=False)

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.slurm import create_scheduler

        return create_scheduler("contract", slurm_conf=str(self.cluster.conf))

    def offline_scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.slurm import create_scheduler

        return create_scheduler("contract", slurm_conf=str(self.tmp_path / "no-slurm.conf"))

    def cfg(self) -> dict[str, CfgVal]:
        # Slurm places the replicas (--ntasks=N): the components of a heterogeneous job never
        # share a node, so one node per replica (the default) cannot fit the cases' 2+1
        # replicas on the two nodes
        # split_streams: the stdout and stderr streams can be read alone (test_log_streams)
        return {"job_dir": str(self.job_dir), "replicas_per_node": 0, "split_streams": True}

    def scheduler_params(self) -> dict[str, Any]:
        return {"slurm": {"slurm_conf": str(self.cluster.conf)}}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def state_snapshot(self, sched: Scheduler[Any]) -> object:
        return sorted(str(p) for p in self.job_dir.rglob("*")) if self.job_dir.exists() else []

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        res = self.cluster.run("squeue", "--json", "--states=all", f"--jobs={app_id}")
        jobs = [  # Slurm 22.05's squeue --json ignores --jobs: other cases' jobs, which end
            {k: j.get(k) for k in SLURM_JOB_FIELDS}  # and get purged meanwhile, are dropped
            for j in json.loads(res.stdout).get("jobs", [])
            if app_id in (str(j.get("job_id")), str(j.get("het_job_id")))
        ]
        files = sorted(
            (str(p.relative_to(self.job_dir)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in self.job_dir.rglob("*") if p.is_file()
        )  # fmt: skip
        return jobs, files

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str:
        return "127.0.0.1"  # the NodeAddr of the first node of the first role


REST_USER = "tether-rest"
"""The Slurm user of the ``rest`` harness's jobs (created when missing)."""


class SlurmSshHarness(SlurmHarness):
    """``slurm`` over the ``ssh`` transport: the session cluster behind the e2e sshd
    (``tests/e2e/infra/slurm_remote.py``), jobs submitted and files read as its dedicated
    user. That user cannot enter this machine's home directories, so the programs run the
    system Python, the job directory is in the user's home and the shared directory is a
    world-writable one under /tmp.
    """

    python = "/usr/bin/python3"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        import shutil
        import tempfile
        import uuid

        from tests.e2e.infra.slurm_remote import ensure_user

        self.sshd = request.getfixturevalue("slurm_sshd")
        user = ensure_user(self.sshd.user)
        self._shared = Path(tempfile.mkdtemp(prefix="tether-contract-", dir="/tmp"))
        self._shared.chmod(0o1777)
        self.job_dir = Path(user.pw_dir) / "tether-contract" / uuid.uuid4().hex[:12]
        self.job_dir.mkdir(parents=True)
        for p in (self.job_dir, self.job_dir.parent):
            os.chown(p, user.pw_uid, user.pw_gid)
        request.addfinalizer(lambda: shutil.rmtree(self._shared, ignore_errors=True))
        request.addfinalizer(lambda: shutil.rmtree(self.job_dir, ignore_errors=True))

    def _remote(self) -> dict[str, Any]:
        return {**self.sshd.settings(), "slurm_conf": str(self.cluster.conf)}

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.slurm import create_scheduler

        return create_scheduler("contract", **self._remote())

    def scheduler_params(self) -> dict[str, Any]:
        return {"slurm": self._remote()}


class SlurmRestHarness(SlurmHarness):
    """``slurm`` over the ``rest`` transport: the session cluster behind the e2e slurmrestd,
    jobs submitted with a JWT of a user of their own (:data:`REST_USER`: the cases' job keys
    are the same as the ssh harness's, whose jobs that user's ``list`` does not show).
    slurmrestd serves no files: logs, delete and workspaces go through ``mount``, the user's
    home "mounted" at a path of this machine (a symbolic link), as a worker would mount the
    cluster's home directories. Like over ssh, the programs run the system Python and the
    shared directory is a world-writable one under /tmp.
    """

    python = "/usr/bin/python3"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        import shutil
        import tempfile
        import uuid

        from tests.e2e.infra.slurm_remote import ensure_user

        self.restd = request.getfixturevalue("slurm_restd")
        user = ensure_user(REST_USER)
        self.token = self.cluster.token(REST_USER)
        self._shared = Path(tempfile.mkdtemp(prefix="tether-contract-", dir="/tmp"))
        self._shared.chmod(0o1777)
        self.job_dir = Path(user.pw_dir) / "tether-contract" / uuid.uuid4().hex[:12]
        self.job_dir.mkdir(parents=True)
        for p in (self.job_dir, self.job_dir.parent):
            os.chown(p, user.pw_uid, user.pw_gid)
        request.addfinalizer(lambda: shutil.rmtree(self._shared, ignore_errors=True))
        request.addfinalizer(lambda: shutil.rmtree(self.job_dir, ignore_errors=True))
        self._mount = tmp_path / "hpc-home"
        self._mount.symlink_to(user.pw_dir)
        self._mount_setting = f"{user.pw_dir}={self._mount}"

    def scheduler(self) -> Scheduler[Any]:
        from tether.schedulers.slurm import create_scheduler

        return create_scheduler("contract", **self._remote())

    def scheduler_params(self) -> dict[str, Any]:
        return {"slurm": self._remote()}

    def _remote(self) -> dict[str, Any]:
        return {"transport": "rest", "rest_url": self.restd.url, "jwt": self.token,
                "mount": self._mount_setting}  # fmt: skip


class AwsBatchHarness(BackendHarness):
    """``aws_batch`` on moto's server (reset per case); jobs run as podman containers.

    The busybox image has no Python: each role bind-mounts (as Batch host volumes) this
    machine's ``/usr``, ``/lib``, ``/lib64``, the interpreter's prefix and the venv read-only,
    so ``sys.executable`` runs inside the container, and the case's shared directory
    read-write. Cases that cannot hold on moto are skipped with the reason
    (:attr:`unsupported_cases`).
    """

    name = "aws_batch"
    unsupported_cases = {
        "test_env_and_args_with_macros": _MOTO_ONE_STREAM,
        "test_multi_role_multi_replica_environment": _MOTO_ONE_STREAM,
        "test_logs_per_replica": _MOTO_ONE_STREAM,
        "test_logs_since_until": _MOTO_LOG_AT_END,
        "test_log_tail_follows_until_the_replica_ends": _MOTO_LOG_AT_END,
        "test_cancel_reaches_every_replica_is_idempotent_and_keeps_the_record": (
            "it checks the replicas' process ids from the host, but each container has its "
            "own pid namespace (cancel itself is tested in tests/e2e/test_aws_batch_e2e.py)"
        ),
        "test_stop_signal_reaches_the_program": (
            "moto stops a terminated job's containers with SIGKILL, never SIGTERM first"
        ),
        "test_retry_policy[APPLICATION]": _MOTO_NO_RETRIES,
        "test_retries_exhausted_fail_the_app": _MOTO_NO_RETRIES,
        "test_application_retries_are_the_apps_budget": _MOTO_NO_RETRIES,
    }

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        from tests.e2e.infra.moto import create_batch_queue

        self.moto = request.getfixturevalue("aws_moto")
        self.image = self.moto.image
        mp = request.getfixturevalue("monkeypatch")
        self.moto.reset()
        for k, v in self.moto.env().items():
            mp.setenv(k, v)
        create_batch_queue(self.moto.env())
        self._shared = tmp_path / "shared"
        self._shared.mkdir()

    def role(self, name: str, code: str, *, num_replicas: int = 1, **kw: Any) -> Role:
        import sys

        role = super().role(name, code, num_replicas=num_replicas, **kw)
        # unbuffered, print() writes the text and its newline apart; podman may then log them
        # as two timestamped pieces, which moto joins into one line with the second timestamp
        role.env.pop("PYTHONUNBUFFERED", None)
        paths = {"/usr": "/usr", "/lib": "/lib", "/lib64": "/lib64",
                 sys.base_prefix: sys.base_prefix, sys.prefix: sys.prefix}  # fmt: skip
        role.mounts = [
            *role.mounts,
            *(BindMount(os.path.realpath(src), dst, read_only=True)
              for src, dst in paths.items() if os.path.exists(src)),
            BindMount(str(self._shared), str(self._shared)),
        ]  # fmt: skip
        return role

    def scheduler(self) -> Scheduler[Any]:
        from tests.e2e.infra.moto import QUEUE, REGION
        from tether.schedulers.aws_batch import create_scheduler

        return create_scheduler("contract", region=REGION, queue=QUEUE)

    def offline_scheduler(self) -> Scheduler[Any]:
        from tests.e2e.infra.moto import REGION
        from tether.schedulers.aws_batch import create_scheduler

        return create_scheduler("contract", region=REGION, endpoint_url="http://127.0.0.1:9")

    def cfg(self) -> dict[str, CfgVal]:
        from tests.e2e.infra.moto import QUEUE

        return {"queue": QUEUE}

    def scheduler_params(self) -> dict[str, Any]:
        from tests.e2e.infra.moto import QUEUE, REGION

        return {"aws_batch": {"region": REGION, "queue": QUEUE}}

    @property
    def host_dir(self) -> Path:
        return self._shared

    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        desc = sched.describe(app_id)
        if desc is None:
            return None
        (job,) = sched.client("batch", "us-east-1").describe_jobs(  # type: ignore[attr-defined]
            jobs=[desc.metadata["job_id"]])["jobs"]
        # moto appends AWS_BATCH_JOB_ID to the container environment it returns on every
        # describe; the record is everything else
        return json.dumps({k: job.get(k) for k in (
            "status", "statusReason", "attempts", "tags", "startedAt", "stoppedAt",
            "jobDefinition", "nodeProperties")}, sort_keys=True)


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
        from tests.e2e.infra.ports import free_port
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
