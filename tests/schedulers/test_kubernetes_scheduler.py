"""The kubernetes scheduler without a cluster: configuration errors and an unreachable API."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from tests.e2e.infra.ports import free_port
from tether.schedulers.kubernetes.client import KubernetesApiError, KubernetesUnreachableError
from tether.schedulers.kubernetes.scheduler import create_scheduler
from tether.specs import AppState

pytest.importorskip("kubernetes")


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    sched = create_scheduler("test", kubeconfig=str(tmp_path / "nope.yaml"))
    with pytest.raises(KubernetesApiError) as ei:
        sched.describe("default:x")
    msg = str(ei.value)
    assert "no Kubernetes configuration" in msg and "nope.yaml" in msg
    assert "does not exist" in msg and "--dryrun` needs no cluster" in msg


class _EmptyApiserver(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 404: an apiserver where the app has no objects.

    A stand-in: the real kube-apiserver of tests/e2e/infra is shared by the test session and
    cannot be stopped in the middle of a test, which is what this test needs.
    """

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_an_apiserver_never_reached_is_an_error_a_lost_one_is_unknown() -> None:
    from kubernetes import client

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EmptyApiserver)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    # nothing listens yet: a configuration problem, said as such
    with pytest.raises(KubernetesUnreachableError, match=f"at http://127.0.0.1:{port}: "):
        create_scheduler("test", client=client.ApiClient(cfg)).describe("ml:train-abc123")
    sched = create_scheduler("test", client=client.ApiClient(cfg))
    thread.start()
    try:
        assert sched.describe("ml:train-abc123") is None  # reached: no such app
    finally:
        server.shutdown()
        server.server_close()
    # the apiserver answered before: a blip that a waiter polls through
    desc = sched.describe("ml:train-abc123")
    assert desc is not None and desc.state == AppState.UNKNOWN
    assert "cannot reach the Kubernetes apiserver" in desc.msg
    assert desc.app_id == "ml:train-abc123"


def _two_context_kubeconfig(path: Path) -> dict[str, int]:
    ports = {"alpha": free_port(), "beta": free_port()}
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
        with pytest.raises(KubernetesApiError, match=f"127.0.0.1:{ports['beta']} .*context beta"):
            runner.run(app, "kubernetes", cfg={"context": "beta"})
        with pytest.raises(KubernetesApiError, match=f"127.0.0.1:{ports['alpha']} .*context alpha"):
            runner.run(app, "kubernetes")


def test_context_from_tetherconfig_is_the_schedulers_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = _two_context_kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "tetherconfig").write_text("[kubernetes]\ncontext = beta\nnamespace = ml\n")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig"))
    sched = create_scheduler("test", kubeconfig=str(tmp_path / "kubeconfig"))
    # status of an app goes to beta's apiserver (never reached: an error with the address)
    with pytest.raises(KubernetesUnreachableError,
                       match=f"127.0.0.1:{ports['beta']} .*context beta"):
        sched.describe("ml:train-abc123")
