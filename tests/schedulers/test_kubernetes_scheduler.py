"""The kubernetes scheduler without a cluster: configuration errors and an unreachable API."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tether.schedulers.kubernetes.client import KubernetesApiError
from tether.schedulers.kubernetes.scheduler import create_scheduler
from tether.specs import AppState

pytest.importorskip("kubernetes")


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    sched = create_scheduler("test", kubeconfig=str(tmp_path / "nope.yaml"))
    with pytest.raises(KubernetesApiError) as ei:
        sched.describe("default:x")
    msg = str(ei.value)
    assert "cannot load a Kubernetes configuration from" in msg and "nope.yaml" in msg
    assert "--dryrun` needs no cluster" in msg


def test_unreachable_apiserver_is_unknown_not_a_crash() -> None:
    from kubernetes import client

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    sched = create_scheduler("test", client=client.ApiClient(cfg))
    desc = sched.describe("ml:train-abc123")
    assert desc is not None and desc.state == AppState.UNKNOWN
    assert "cannot reach the apiserver" in desc.msg and desc.app_id == "ml:train-abc123"

