"""Session-scoped real backends, shared by every test that needs them (a pytest plugin).

Registered by ``tests/conftest.py`` (``pytest_plugins``), so the end-to-end tests and the
backend contract suite (``tests/schedulers/contract``) share one cluster per session.

Slurm: munged + slurmctld + two slurmd "nodes" (``tests/e2e/infra/slurm.py``) for the whole
session; the tests skip, with the reason, when Debian's slurm-wlm/munge are not installed
(``tests/e2e/infra/setup.d/30-slurm.sh`` installs them).

Ray: a head on 127.0.0.1 (``tests/e2e/infra/ray.py``); skips without ``ray``.

AWS: moto's server whose Batch jobs run as podman containers (``tests/e2e/infra/moto.py``);
skips without podman or ``moto[server]``.

Kubernetes: one etcd + kube-apiserver + kube-controller-manager (``tests/e2e/infra/kube.py``)
for the whole session. The tests skip, with the reason, only when the binaries are missing
and ``TETHER_BUILD_KUBE`` is not set; with ``TETHER_BUILD_KUBE=1`` (CI) they are built first
(cached outside the repository).

The tether image: ``tether_image`` is one private podman (Docker API on a unix socket) with
the tether image built from the checkout (``tests/e2e/infra/tether_image.py``), shared by
``test_tether_image.py``, the ``local_docker`` contract harness and the matrix's local_docker
column. It skips (fails under ``CI``) without a cached Debian base or podman.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.e2e.infra.kube import KubeBinaries, KubeCluster
    from tests.e2e.infra.slurm import SlurmCluster
    from tests.e2e.infra.slurm_remote import SlurmRestd, SshServer
    from tests.e2e.infra.tether_image import TetherImage



def stop_following() -> None:
    """Stops the process's watch hub views before a session's backend stops: they linger
    after their last subscriber (30 s) and would reconnect to a dead server, logging from
    their threads after pytest closed its streams (a crash of the session in 3.11, whose
    traceback printing is not thread-safe against pytest's own ``ast.parse``)."""
    from tether.schedulers.watch.hub import get_hub

    get_hub().close()
@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running two-node Slurm cluster shared by the session (stopped by PID at the end);
    it also accepts JWTs (for slurmrestd) where Slurm's JWT plugin is installed."""
    from tests.e2e.infra.slurm import SlurmCluster, jwt_available, missing_tools

    missing = missing_tools()
    if missing:
        pytest.skip(
            f"Slurm is not installed (missing {', '.join(missing)}); run "
            "tests/e2e/infra/setup.d/30-slurm.sh"
        )
    with SlurmCluster(jwt=jwt_available()) as cluster:
        yield cluster
        stop_following()


@pytest.fixture(scope="session")
def slurm_acct_cluster() -> Iterator[SlurmCluster]:
    """A second Slurm cluster with accounting (MariaDB + slurmdbd: ``sacct``, QOS and
    association limits), shared by the session; skips without slurmdbd/MariaDB
    (``tests/e2e/infra/setup.d/31-slurmdbd.sh``)."""
    from tests.e2e.infra.slurm import (
        SlurmCluster,
        SlurmUnavailable,
        jwt_available,
        missing_accounting_tools,
    )

    missing = missing_accounting_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; run tests/e2e/infra/setup.d/31-slurmdbd.sh")
    try:
        cluster = SlurmCluster(accounting=True, jwt=jwt_available()).start()
    except SlurmUnavailable as e:
        pytest.fail(f"the accounting cluster did not start: {e}")
    try:
        yield cluster
        stop_following()
    finally:
        cluster.stop()


def _need_remote_tools() -> None:
    from tests.e2e.infra.slurm_remote import INSTALL_HINT, missing_remote_tools

    missing = missing_remote_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; {INSTALL_HINT}")


@pytest.fixture(scope="session")
def slurm_sshd(slurm_cluster: SlurmCluster) -> Iterator[SshServer]:
    """An sshd on a loopback port in front of the Slurm cluster: a dedicated user and key,
    its host key in its own known_hosts (``tests/e2e/infra/slurm_remote.py``)."""
    _need_remote_tools()
    from tests.e2e.infra.slurm_remote import SshServer

    assert slurm_cluster.dir is not None
    slurm_cluster.dir.chmod(0o711)  # the login user's Slurm commands read slurm.conf
    with SshServer() as server:
        yield server


@pytest.fixture(scope="session")
def slurm_restd(slurm_cluster: SlurmCluster) -> Iterator[SlurmRestd]:
    """slurmrestd with auth/jwt in front of the Slurm cluster, on a loopback port."""
    _need_remote_tools()
    from tests.e2e.infra.slurm_remote import SlurmRestd

    with SlurmRestd(slurm_cluster) as restd:
        yield restd


@pytest.fixture(scope="session")
def kube_binaries() -> KubeBinaries:
    """The control plane binaries; built first when TETHER_BUILD_KUBE=1, else skip."""
    pytest.importorskip("kubernetes")
    from tests.e2e.infra.kube import SKIP_REASON, ensure_binaries

    found = ensure_binaries()
    if found is None:
        pytest.skip(SKIP_REASON)
    return found


@pytest.fixture(scope="session")
def kube_cluster(kube_binaries: KubeBinaries) -> Iterator[KubeCluster]:
    """A running control plane shared by the session (stopped by PID at the end)."""
    from tests.e2e.infra.kube import KubeCluster

    with KubeCluster(kube_binaries, insecure_kubeconfig=False) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube_api(kube_cluster: KubeCluster) -> Iterator[Any]:
    """An admin ``kubernetes.client.ApiClient`` for the session cluster."""
    with kube_cluster.api_client() as api:
        yield api
        stop_following()


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    """A real Ray head on 127.0.0.1 (free ports, temp dir) for the session; skips without
    ``ray``. Stopped by its process group at the end."""
    pytest.importorskip("ray.job_submission")
    from tests.e2e.infra.ray import RayHead

    with RayHead(num_cpus=2) as head:
        yield head
        stop_following()


@pytest.fixture(scope="session")
def aws_moto() -> Iterator[Any]:
    """moto's server on 127.0.0.1 whose AWS Batch jobs run as containers of a private podman
    (``tests/e2e/infra/moto.py``) for the session; skips, with the reason, without podman or
    ``moto[server]``. Tests reset it (``POST /moto-api/reset``) before use."""
    pytest.importorskip("boto3")
    from tests.e2e.infra.moto import MotoServer, MotoUnavailable, moto_server_binary
    from tests.e2e.infra.podman import PodmanService, PodmanUnavailable

    if moto_server_binary() is None:
        pytest.skip("moto_server is not installed: pip install 'moto[server,batch]'")
    try:
        podman = PodmanService().start()
    except PodmanUnavailable as e:
        pytest.skip(f"podman cannot run containers here: {e}")
    try:
        with MotoServer(podman.docker_host, image=podman.image, podman=podman) as moto:
            yield moto
            stop_following()
    except MotoUnavailable as e:
        pytest.skip(str(e))
    finally:
        podman.stop()


@pytest.fixture(scope="session")
def tether_image() -> Iterator[TetherImage]:
    """A private podman holding the tether image built from this checkout, for the session."""
    import os

    pytest.importorskip("docker")
    from tests.e2e.infra import tether_image as ti

    def unavailable(reason: str) -> None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)

    reason = ti.skip_reason()
    if reason is not None:
        unavailable(reason)
    try:
        built = ti.start()
    except ti.PodmanUnavailable as e:
        unavailable(f"podman cannot run containers here: {e}")
        raise  # unreachable: for the type checker
    try:
        yield built
    finally:
        built.podman.stop()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the test services an earlier, killed run left behind (see
    :func:`tests.e2e.infra.reaper.reap_at_session_start`)."""
    from tests.e2e.infra.reaper import reap_at_session_start

    for what in reap_at_session_start():
        print(f"stopped a test service left by an earlier run: {what}", file=sys.stderr)
