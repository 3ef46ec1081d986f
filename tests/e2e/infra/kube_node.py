"""A real Kubernetes node for tests: containerd + runc + CNI bridge + kube-scheduler + kubelet.

Joined to a :class:`tests.e2e.infra.kube.KubeCluster` started with :data:`NODE_CONTROLLERS`
(``nodelifecycle`` removes the node's ``not-ready`` taint; ``endpoint``/``endpointslice``
fill headless Services; ``podgc``). Pods really run: a container's exit code, signals, OOM
kills and logs come from runc/containerd through the kubelet.

Facts this relies on (``/work/shared/testinfra/README.md``): containerd needs
``restrict_oom_score_adj = true`` here (root lacks CAP_SYS_RESOURCE, else every sandbox fails
in runc); the kubelet must not install its iptables chains (``KUBE-FIREWALL`` would drop
non-loopback traffic to 127/8); no registry, so images are imported (``imagePullPolicy:
Never``). Each node uses its own bridge, pod subnet, runc root, cgroup root, ports and
directory under :data:`tests.e2e.infra.kube_reap.NODES_ROOT`, so concurrent test runs do not
meet; a killed run's node is reaped at the next start (:func:`kube_reap.reap_stale`).

The 1.20 kubelet hard-codes ``/var/log/pods`` (and ``/var/log/containers``) and its garbage
collector deletes there every log directory of a pod it does not know, so two nodes on one
host would delete each other's pod logs. containerd therefore runs in a mount namespace of
its own (``unshare --mount --propagation slave``) in which both directories are bind mounts
of directories under the node's own; the kubelet joins that namespace (``nsenter``). The
namespace's mounts (root filesystems, volumes, network namespaces) are thus invisible to the
host and vanish with its last process, which the tear-down kills.

Example (by hand: ``python -m tests.e2e.infra.kube_node``)::

    with KubeCluster(controllers=NODE_CONTROLLERS, ...) as cluster, RealNode(cluster) as node:
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tests.e2e.infra import kube_reap
from tests.e2e.infra.kube import (
    DEFAULT_CONTROLLERS,
    KubeUnavailable,
    default_cache_dir,
    stop_process,
)
from tests.e2e.infra.kube_images import PAUSE_IMAGE, write_busybox_archive
from tests.e2e.infra.ports import free_port
from tests.e2e.infra.reaper import forget, start_service

if TYPE_CHECKING:
    from tests.e2e.infra.kube import KubeCluster

NODE_CONTROLLERS = (
    *DEFAULT_CONTROLLERS,
    "nodelifecycle",
    "endpoint",
    "endpointslice",
    "podgc",
)
NODE_CONTROLLER_MANAGER_ARGS = ("--node-monitor-period=1s",)
CNI_BIN_DIR = Path("/usr/lib/cni")
REPO_ROOT = Path(__file__).resolve().parents[3]
CLUSTER_DOMAIN = "cluster.local"
NODE_TOOLS = (
    "containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip", "umount", "unshare", "nsenter",
)  # fmt: skip
POD_LOG_DIRS = ("/var/log/pods", "/var/log/containers")
"""Where the kubelet puts pods' logs; private to each node (see the module docstring)."""
_PRIVATE_LOGS_SH = (
    'set -e; mkdir -p "$1" "$2" "$3" "$4"; mount --bind "$1" "$3"; mount --bind "$2" "$4"; '
    'shift 4; exec "$@"'
)


@dataclass(frozen=True)
class NodeBinaries:
    """kubelet and kube-scheduler, built by ``build_kube.sh --node``."""

    kubelet: Path
    scheduler: Path


def find_node_binaries(cache_dir: Path | None = None) -> NodeBinaries | None:
    """The cached kubelet and kube-scheduler, or None when either is missing."""
    cache = cache_dir or default_cache_dir()
    kubelet, scheduler = cache / "kubelet", cache / "kube-scheduler"
    if all(p.is_file() and os.access(p, os.X_OK) for p in (kubelet, scheduler)):
        return NodeBinaries(kubelet=kubelet, scheduler=scheduler)
    return None


def node_skip_reason() -> str | None:
    """Why a real node cannot start here, or None when it can."""
    if os.geteuid() != 0:
        return "a real kubelet needs root (containerd, mounts, the CNI bridge)"
    missing = [t for t in NODE_TOOLS if shutil.which(t) is None]
    if missing or not (CNI_BIN_DIR / "bridge").exists():
        return (
            f"containerd/runc/CNI plugins missing ({', '.join(missing) or 'CNI bridge'}): "
            "run tests/e2e/infra/setup.d/15-kube-node.sh"
        )
    if find_node_binaries() is None:
        return (
            f"kubelet/kube-scheduler not built in {default_cache_dir()}: run "
            "tests/e2e/infra/build_kube.sh --node (about 9 minutes once)"
        )
    return None


def host_ip() -> str:
    """The address of the host's default route (the node's InternalIP)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "route", "get", "192.0.2.255"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if "src" in out:
        return out[out.index("src") + 1]
    return "127.0.0.1"


class RealNode:
    """One real node joined to a running control plane; a context manager.

    Attributes:
        cluster: The control plane.
        name: Node name (``tether-<id>``), also the prefix of its bridge and cgroup root.
        dir: The node's directory (state, sockets, logs) under ``NODES_ROOT``.
        gateway: The CNI bridge's address (pods' default gateway; the DNS responder binds it).
        subnet: The pod subnet (``10.<a>.<b>.0/24``).
        cluster_dns: Address given to pods as their nameserver (``--cluster-dns``), or "".
        start_seconds: How long :meth:`start` took (until the node was Ready).
    """

    def __init__(
        self,
        cluster: KubeCluster,
        *,
        images: Sequence[Path] = (),
        cluster_dns: bool = True,
        start_timeout: float = 90.0,
    ) -> None:
        """Prepares (does not start) a node.

        Args:
            cluster: A started control plane with :data:`NODE_CONTROLLERS`.
            images: Extra Docker image archives to import (e.g. the tether image).
            cluster_dns: Point pods at a DNS responder on the bridge gateway.
            start_timeout: Seconds to wait for the node to be Ready.

        Raises:
            KubeUnavailable: If the node binaries are missing.
        """
        found = find_node_binaries()
        if found is None:
            raise KubeUnavailable(node_skip_reason() or "node binaries missing")
        self.binaries = found
        self.cluster = cluster
        self.images = tuple(images)
        self.start_timeout = start_timeout
        ident = secrets.token_hex(3)
        self.name = f"tether-{ident}"
        self.dir = kube_reap.NODES_ROOT / self.name
        octets = secrets.randbelow(100 * 250)  # 10.100.0.0 - 10.199.249.0
        self.subnet = f"10.{100 + octets // 250}.{octets % 250}.0/24"
        self.gateway = self.subnet.replace(".0/24", ".1")
        self.bridge = f"tk{ident}"
        self.cgroup_root = f"/{self.name}"
        self.cluster_dns = self.gateway if cluster_dns else ""
        self.kubelet_port = 0
        self.start_seconds = 0.0
        self._procs: list[tuple[str, subprocess.Popen[Any], Any]] = []

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> RealNode:
        """Starts the node."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stops the node and removes every trace of it."""
        self.stop()

    def start(self) -> RealNode:
        """Reaps nodes of dead test runs, then starts containerd, imports the images, starts
        kube-scheduler and the kubelet, and waits for the node to be Ready.

        Returns:
            self.

        Raises:
            KubeUnavailable: If a process exits early or the node is not Ready in time.
        """
        t0 = time.monotonic()
        kube_reap.reap_stale()
        try:
            self._start(t0 + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Deletes the pods (so the kubelet tears their sandboxes down), stops the kubelet,
        scheduler and containerd, then removes what is left (shims, netns, mounts, bridge,
        cgroups, the directory)."""
        with contextlib.suppress(Exception):
            self._delete_pods(timeout=10.0)
        while self._procs:
            _name, proc, log = self._procs.pop()
            try:
                stop_process(proc, grace=5.0)
                forget(proc)
            finally:
                log.close()
        kube_reap.teardown_dir(self.dir)

    def log_path(self, name: str) -> Path:
        """Log file of ``containerd``, ``kube-scheduler`` or ``kubelet``."""
        return self.dir / "logs" / f"{name}.log"

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Runs ``ctr -n k8s.io`` against this node's containerd."""
        return subprocess.run(
            ["ctr", "--address", str(self.sock), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def import_image(self, archive: Path) -> None:
        """Imports a Docker image archive (``docker save``/``podman save`` format)."""
        proc = self.ctr("images", "import", str(archive))
        if proc.returncode != 0:
            raise KubeUnavailable(f"ctr images import {archive} failed: {proc.stderr[-2000:]}")

    @property
    def namespace_pid(self) -> int:
        """containerd's pid: its ``/proc/<pid>/ns/mnt`` is the node's mount namespace, its
        ``/proc/<pid>/root/var/log/pods`` the node's pod logs as the kubelet sees them."""
        return next(proc.pid for name, proc, _ in self._procs if name == "containerd")

    def pod_log_dir(self, which: str = "/var/log/pods") -> Path:
        """The host directory behind the node's private ``/var/log/pods`` (or
        ``/var/log/containers``)."""
        if which not in POD_LOG_DIRS:
            raise ValueError(f"which={which!r}: expected one of {POD_LOG_DIRS}")
        return self.dir / "var-log" / Path(which).name

    def _containerd_argv(self) -> list[str]:
        """containerd in a new mount namespace whose ``/var/log/pods`` and
        ``/var/log/containers`` are the node's own (``unshare`` and ``sh`` exec, so the
        pid stays containerd's and its command line names the node's directory)."""
        dirs = [str(self.pod_log_dir(d)) for d in POD_LOG_DIRS]
        return [
            "unshare", "--mount", "--propagation", "slave",
            "sh", "-c", _PRIVATE_LOGS_SH, "sh", *dirs, *POD_LOG_DIRS,
            "containerd", "--config", str(self.dir / "containerd.toml"),
        ]  # fmt: skip

    @property
    def sock(self) -> Path:
        """containerd's socket."""
        return self.dir / "containerd" / "containerd.sock"

    # ----------------------------------------------------------------- internals
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = (logs / f"{name}.log").open("wb")
        from tests.e2e.infra.kube import _die_with_parent

        # guarded: its group dies with the test process; what escapes the group (containerd's
        # shims, the pods) is torn down by kube_reap at the next session's start
        proc = start_service(
            argv,
            f"kube-node-{name}",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            env=env,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self._procs.append((name, proc, log))

    def _check_alive(self) -> None:
        for name, proc, _ in self._procs:
            if proc.poll() is not None:
                tail = self.log_path(name).read_text(errors="replace").splitlines()[-30:]
                raise KubeUnavailable(
                    f"{name} exited with code {proc.returncode}:\n" + "\n".join(tail)
                )

    def _wait(self, what: str, probe: Any, deadline: float, log: str) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(Exception):
                if probe():
                    return
            time.sleep(0.1)
        tail = self.log_path(log).read_text(errors="replace").splitlines()[-30:]
        raise KubeUnavailable(f"timed out waiting for {what}\n--- {log} ---\n" + "\n".join(tail))

    def _start(self, deadline: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=False)
        kube_reap.write_owner(self.dir)
        (self.dir / kube_reap.BRIDGE_FILE).write_text(self.bridge + "\n")
        (self.dir / kube_reap.CGROUP_FILE).write_text(self.cgroup_root + "\n")
        self._write_containerd_config()
        self._spawn("containerd", self._containerd_argv())
        self._wait("containerd", lambda: self.ctr("version", timeout=5).returncode == 0,
                   deadline, "containerd")  # fmt: skip
        archive = write_busybox_archive(self.dir / "busybox.tar")
        for image in (archive, *self.images):
            self.import_image(image)
        self._spawn("kube-scheduler", self._scheduler_argv())
        self._make_cgroup_root()
        self._make_bridge()
        if self.cluster_dns:
            paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
            self._spawn("kube-dns", self._dns_argv(), env=env)
        self.kubelet_port = free_port()
        ns = f"--mount=/proc/{self.namespace_pid}/ns/mnt"
        self._spawn("kubelet", ["nsenter", ns, "--", *self._kubelet_argv()])
        self._wait("node Ready", self._node_ready, deadline, "kubelet")

    def _make_cgroup_root(self) -> None:
        """The kubelet's ``--cgroup-root`` must exist in every hierarchy (cpuset needs its
        cpus/mems filled before children can hold tasks)."""
        rel = self.cgroup_root.strip("/")
        for hierarchy in kube_reap.CGROUP_FS.iterdir():
            if not (hierarchy / "cgroup.procs").exists():
                continue
            (hierarchy / rel).mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / knob).exists():
                    (hierarchy / rel / knob).write_text((hierarchy / knob).read_text())

    def _make_bridge(self) -> None:
        """Creates the CNI bridge with the gateway address before the first pod, so that the
        DNS responder can bind the gateway at once (the bridge plugin reuses it)."""
        prefix = self.subnet.split("/")[1]
        for cmd in (
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
            if proc.returncode != 0:
                raise KubeUnavailable(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")

    def _dns_argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.e2e.infra.kube_dns",
            f"--bind={self.gateway}",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--domain={CLUSTER_DOMAIN}",
            f"--node-dir={self.dir}",
        ]

    def _write_containerd_config(self) -> None:
        c = self.dir / "containerd"
        cni = self.dir / "cni"
        cni.mkdir(parents=True)
        bridge = {
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": True,
            "ipMasq": False,  # nothing outside is reachable; no iptables rules to leave
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "subnet": self.subnet,
                "dataDir": str(c / "ipam"),
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        }
        conflist = {
            "cniVersion": "0.4.0",
            "name": self.bridge,
            "plugins": [bridge, {"type": "loopback"}],
        }
        (cni / "10-tether.conflist").write_text(json.dumps(conflist, indent=1))
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        (self.dir / "containerd.toml").write_text(
            f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{c / "containerd.sock.ttrpc"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"
{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{c / "runc"}"
{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{cni}"
"""
        )

    def _scheduler_argv(self) -> list[str]:
        kubeconfig = self.cluster.kubeconfig_path
        return [
            str(self.binaries.scheduler),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--profiling=false",
        ]

    def _kubelet_argv(self) -> list[str]:
        root = self.dir / "kubelet"
        sock = f"unix://{self.sock}"
        argv = [
            str(self.binaries.kubelet),
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--root-dir={root}",
            f"--cert-dir={root / 'pki'}",
            f"--volume-plugin-dir={root / 'volume-plugins'}",
            f"--hostname-override={self.name}",
            f"--node-ip={host_ip()}",
            f"--port={self.kubelet_port}",
            "--healthz-port=0",
            "--read-only-port=0",
            "--container-runtime=remote",
            f"--container-runtime-endpoint={sock}",
            f"--image-service-endpoint={sock}",
            "--runtime-request-timeout=2m",
            "--cgroup-driver=cgroupfs",
            f"--cgroup-root={self.cgroup_root}",
            "--fail-swap-on=false",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            "--make-iptables-util-chains=false",
            "--eviction-hard=memory.available<1Mi,nodefs.available<1%,imagefs.available<1%",
            "--image-gc-high-threshold=100",
            "--image-gc-low-threshold=99",
            "--node-status-update-frequency=1s",
            "--serialize-image-pulls=false",
            "--max-pods=60",
        ]
        if self.cluster_dns:
            argv += [f"--cluster-dns={self.cluster_dns}", f"--cluster-domain={CLUSTER_DOMAIN}"]
        return argv

    def _node_ready(self) -> bool:
        from kubernetes import client

        with self.cluster.api_client() as api:
            node = client.CoreV1Api(api).read_node(self.name)
        ready = any(
            c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])
        )
        tainted = any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])
        return ready and not tainted

    def _delete_pods(self, timeout: float) -> None:
        """Deletes every pod and waits until containerd runs no task (sandboxes torn down by
        the kubelet, with their network namespaces)."""
        from kubernetes import client

        if not any(n == "kubelet" and p.poll() is None for n, p, _ in self._procs):
            return
        with self.cluster.api_client() as api:
            v1 = client.CoreV1Api(api)
            for ns in v1.list_namespace().items:
                v1.delete_collection_namespaced_pod(ns.metadata.name, grace_period_seconds=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tasks = self.ctr("tasks", "ls", timeout=10)
            # columns: TASK PID STATUS; stopped tasks stay listed until their container goes
            if tasks.returncode != 0 or " RUNNING" not in tasks.stdout:
                return
            time.sleep(0.2)


def start_cluster_with_node(**node_kwargs: Any) -> tuple[KubeCluster, RealNode]:
    """Starts a control plane with the node controllers and a real node joined to it.

    Returns:
        The started cluster and node (stop the node first, then the cluster).
    """
    from tests.e2e.infra.kube import KubeCluster

    cluster = KubeCluster(
        controllers=NODE_CONTROLLERS,
        extra_controller_manager_args=NODE_CONTROLLER_MANAGER_ARGS,
        insecure_kubeconfig=False,
    ).start()
    try:
        node = RealNode(cluster, **node_kwargs).start()
    except BaseException:
        cluster.stop()
        raise
    return cluster, node


def main() -> int:
    """Starts the real single-node cluster by hand and keeps it up until Ctrl-C.

    Usage: ``sudo .venv/bin/python -m tests.e2e.infra.kube_node`` (from the checkout).

    Returns:
        Exit status.
    """
    import signal

    reason = node_skip_reason()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 1
    cluster, node = start_cluster_with_node()
    try:
        print(f"KUBECONFIG={cluster.kubeconfig_path}", flush=True)
        print(f"node {node.name} Ready in {node.start_seconds:.1f}s; pod subnet {node.subnet},"
              f" DNS {node.cluster_dns or 'off'}; images: {PAUSE_IMAGE} and its busybox tag"
              f" (imagePullPolicy: Never)", flush=True)  # fmt: skip
        print(f"import more: ctr --address {node.sock} -n k8s.io images import IMAGE.tar",
              flush=True)  # fmt: skip
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        try:
            node.stop()
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
