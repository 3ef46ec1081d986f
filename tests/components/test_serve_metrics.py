"""serve.torchserve and metrics.tensorboard: AppDefs, and the serve app against a live API."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.components.args import ComponentArgError, materialize
from tether.components.finder import get_component
from tether.specs import AppDef


def mat(name: str, argv: list[str]) -> AppDef:
    return materialize(get_component(name).fn, argv, prog=name)


def test_torchserve_appdef() -> None:
    app = mat("serve.torchserve", [
        "--model_path", "s3://b/m.mar", "--management_api", "http://ts:8081",
        "--params", "initial_workers=2,batch_size=4", "--port", "9000",
    ])
    role = app.roles[0]
    assert role.entrypoint == "python"
    assert role.args == [
        "-m", "tether.apps.serve.serve", "--model_path", "s3://b/m.mar",
        "--management_api", "http://ts:8081", "--port", "9000",
        "--param", "initial_workers=2", "--param", "batch_size=4",
    ]
    assert role.port_map == {"model-download": 9000}
    assert "--dryrun" in mat("serve.torchserve", ["--model_path", "a", "--management_api", "b",
                                                  "--dryrun"]).roles[0].args
    with pytest.raises(ComponentArgError, match="missing required argument"):
        mat("serve.torchserve", ["--model_path", "a"])


def test_tensorboard_appdef() -> None:
    app = mat("metrics.tensorboard", ["--logdir", "s3://b/tb", "--port", "7007",
                                      "--exit_on_file", "/tmp/done", "--timeout", "60"])
    role = app.roles[0]
    assert role.args == [
        "-m", "tether.apps.utils.process_monitor", "--timeout", "60.0",
        "--exit_on_file", "/tmp/done",
        "--", "tensorboard", "--bind_all", "--port", "7007", "--logdir", "s3://b/tb",
    ]
    assert role.port_map == {"http": 7007}
    with pytest.raises(ComponentArgError, match="--timeout must be positive"):
        mat("metrics.tensorboard", ["--logdir", "x", "--timeout", "0"])


class _FakeTorchServe(http.server.BaseHTTPRequestHandler):
    """A management API that downloads the archive it is asked to register, like TorchServe."""

    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        parsed = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        body = urllib.request.urlopen(query["url"], timeout=30).read()
        self.received.append({"path": parsed.path, "query": query, "body": body})
        status = 200 if parsed.path == "/models" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'{"status": "Model registered"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_torchserve() -> Iterator[str]:
    _FakeTorchServe.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeTorchServe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_serve_app_registers_the_model(tmp_path: Path, fake_torchserve: str) -> None:
    from tether.apps.serve.serve import main

    mar = tmp_path / "resnet.mar"
    mar.write_bytes(b"model-bytes" * 100)
    code = main(["--model_path", str(mar), "--management_api", fake_torchserve, "--port", "0",
                 "--host", "127.0.0.1", "--param", "initial_workers=2"])
    assert code == 0
    (req,) = _FakeTorchServe.received
    assert req["path"] == "/models" and req["body"] == mar.read_bytes()
    assert req["query"]["initial_workers"] == "2" and req["query"]["synchronous"] == "true"
    assert req["query"]["url"].endswith("/resnet.mar")


def test_serve_app_dryrun_and_errors(tmp_path: Path, fake_torchserve: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tether.apps.serve.serve import main

    mar = tmp_path / "m.mar"
    mar.write_bytes(b"x")
    assert main(["--model_path", str(mar), "--management_api", fake_torchserve, "--port", "0",
                 "--dryrun"]) == 0
    assert _FakeTorchServe.received == []
    assert main(["--model_path", str(tmp_path / "nope.mar"), "--management_api",
                 fake_torchserve, "--port", "0"]) == 1
    assert "cannot download" in capsys.readouterr().err
    assert main(["--model_path", str(mar), "--management_api", fake_torchserve + "/wrong",
                 "--port", "0", "--host", "127.0.0.1"]) == 1
    assert "TorchServe answered 404" in capsys.readouterr().err
