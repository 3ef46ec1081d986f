"""``tether run --stdin`` as TorchX users script it (real local_cwd jobs)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result


def test_stdin_json_runs_the_component(
    tether: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {
        "component_name": "utils.echo",
        "component_args": {"msg": "from stdin"},
        "scheduler": "local_cwd",
        "wait": True,
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(doc)))
    res = tether("run", "--stdin")
    assert res.code == 0, res.err
    assert "from stdin" in res.out + res.err


def test_stdin_line_adds_component_args_and_dryrun_from_json(
    tether: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("--msg 'two words'\n"))
    res = tether("run", "--stdin", "--dryrun", "utils.echo")
    assert res.code == 0, res.err
    assert "two words" in res.out
    monkeypatch.setattr(
        "sys.stdin",
        io.StringIO(json.dumps({"component": "utils.echo", "component_args": ["--msg", "x"],
                                "dryrun": True, "bogus": 1})),
    )  # fmt: skip
    res = tether("run", "--stdin")
    assert res.code != 0 and "unknown keys ['bogus']" in res.err


def test_workspace_accepts_torchx_file_uri(tmp_path: Path) -> None:
    from tether.workspace import Workspace

    ws = Workspace.from_str(f"file://{tmp_path}")
    assert ws is not None and ws.projects == {str(tmp_path): ""}
