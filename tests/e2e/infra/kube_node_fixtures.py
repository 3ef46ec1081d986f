"""Session fixtures for a real single-node Kubernetes (a pytest plugin; see tests/conftest.py).

``real_kube`` is a control plane (``KubeCluster`` with the node controllers) plus a real node
(:class:`tests.e2e.infra.kube_node.RealNode`: containerd, CNI bridge, kube-scheduler,
kubelet, the DNS responder), started once per test session and torn down completely at its
end. It skips, with the reason, when the node cannot run here (not root, containerd or the
kubelet missing) unless ``TETHER_BUILD_KUBE=1`` asks to build the binaries first; under
``CI`` a missing piece fails instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.infra.fixtures import stop_following

if TYPE_CHECKING:
    from tests.e2e.infra.kube import KubeCluster
    from tests.e2e.infra.kube_node import RealNode


@dataclass
class RealKube:
    """A running control plane and its real node.

    Attributes:
        cluster: etcd + kube-apiserver + kube-controller-manager.
        node: The node (kubelet, containerd, ...).
        api: An admin ``kubernetes.client.ApiClient``.
    """

    cluster: KubeCluster
    node: RealNode
    api: Any


def _build_node_binaries() -> None:
    from tests.e2e.infra.kube import BUILD_SCRIPT

    env = dict(os.environ, TETHER_PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--node"],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"build_kube.sh --node failed:\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def real_kube() -> Iterator[RealKube]:
    """A real single-node cluster for the session (see the module docstring)."""
    pytest.importorskip("kubernetes")
    from tests.e2e.infra import kube_node

    reason = kube_node.node_skip_reason()
    if reason is not None and os.environ.get("TETHER_BUILD_KUBE", "") in {"1", "true", "yes"}:
        _build_node_binaries()
        reason = kube_node.node_skip_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    cluster, node = kube_node.start_cluster_with_node()
    try:
        with cluster.api_client() as api:
            yield RealKube(cluster=cluster, node=node, api=api)
            stop_following()
    finally:
        try:
            node.stop()
        finally:
            cluster.stop()


@pytest.fixture(scope="session")
def real_kube_tether_image(
    real_kube: RealKube, tether_image: Any, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The tether image (built from this checkout by the ``tether_image`` fixture's podman)
    imported into the real node's containerd; its name (pods use ``imagePullPolicy:
    Never``)."""
    archive = tmp_path_factory.mktemp("tether-image") / "tether.tar"
    podman = tether_image.podman
    proc = subprocess.run(
        [*podman.podman(), "save", "--format", "docker-archive", "-o", str(archive),
         tether_image.image],
        env={**os.environ, **podman.env()},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"podman save {tether_image.image} failed: {proc.stderr[-2000:]}")
    real_kube.node.import_image(archive)
    archive.unlink()
    return str(tether_image.image)
