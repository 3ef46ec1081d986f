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



def _free_port() -> int:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_context_kubeconfig(path: Path) -> dict[str, int]:
    ports = {"alpha": _free_port(), "beta": _free_port()}
    clusters = "".join(
        f"- name: {n}\n  cluster:\n    server: http://127.0.0.1:{p}\n" for n, p in ports.items()
    )
    contexts = "".join(
        f"- name: {n}\n  context:\n    cluster: {n}\n    user: u\n" for n in ports
    )
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: alpha\n"
        f"clusters:\n{clusters}contexts:\n{contexts}users:\n- name: u\n  user: {{}}\n"
    )
    return ports


def test_context_run_option_picks_the_cluster_of_a_submission(tmp_path: Path) -> None:
    from tether.runner import get_runner
    from tether.specs import AppDef, Role

    ports = _two_context_kubeconfig(tmp_path / "kubeconfig")
    app = AppDef(name="ctx", roles=[Role(name="r", image="busybox", entrypoint="true")])
    with get_runner(kubeconfig=str(tmp_path / "kubeconfig")) as runner:
        assert "context" in runner.scheduler_run_opts("kubernetes")
        # offline: the dry-run records the context and needs no cluster
        info = runner.dryrun(app, "kubernetes", cfg={"context": "beta"})
        assert info.request.context == "beta"
        # submitting talks to beta's apiserver (nothing listens there: the error says where)
        with pytest.raises(KubernetesApiError, match=f"port={ports['beta']}\\b"):
            runner.run(app, "kubernetes", cfg={"context": "beta"})
        with pytest.raises(KubernetesApiError, match=f"port={ports['alpha']}\\b"):
            runner.run(app, "kubernetes")


def test_context_from_tetherconfig_is_the_schedulers_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = _two_context_kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "tetherconfig").write_text("[kubernetes]\ncontext = beta\nnamespace = ml\n")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig"))
    sched = create_scheduler("test", kubeconfig=str(tmp_path / "kubeconfig"))
    # status of an app goes to beta's apiserver (unreachable: UNKNOWN, with the address)
    desc = sched.describe("ml:train-abc123")
    assert desc is not None and desc.state == AppState.UNKNOWN
    assert f"port={ports['beta']})" in desc.msg
