"""``.tetherconfig`` lookup, precedence and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import ConfigError, dump_config, load_config
from tether.specs import StructuredOpts


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("TETHERCONFIG", raising=False)
    return h


def test_project_wins_over_home(home: Path, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (home / ".tetherconfig").write_text("[local_cwd]\nlog_dir = /home/logs\ncwd = /h\n")
    (proj / ".tetherconfig").write_text("[local_cwd]\nlog_dir = /proj/logs\n")
    cfg = load_config(cwd=str(proj))
    assert cfg.section("local_cwd") == {"log_dir": "/proj/logs", "cwd": "/h"}
    assert cfg.files == [str(home / ".tetherconfig"), str(proj / ".tetherconfig")]


def test_env_var_alone(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".tetherconfig").write_text("[a]\nx = 1\n")
    only = tmp_path / "only.ini"
    only.write_text("[b]\ny = 2\n")
    monkeypatch.setenv("TETHERCONFIG", str(only))
    cfg = load_config(cwd=str(tmp_path))
    assert cfg.sections == {"b": {"y": "2"}}


def test_missing_env_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHERCONFIG", "/nonexistent/cfg")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("x = 1\n", ":1: expected a [section] header"),
        ("[a]\nx = 1\n[a]\ny = 2\n", ":3: section [a] repeated"),
        ("[a]\nx = 1\nx = 2\n", ":3: key 'x' repeated in [a]"),
        ("[a]\njust words\n", ":2: cannot parse line 'just words'"),
    ],
)
def test_malformed_names_file_and_line(home: Path, tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / ".tetherconfig"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config(cwd=str(tmp_path))
    assert str(ei.value).startswith(str(f))
    assert needle in str(ei.value)


def test_sections_for_components_cli_trackers(home: Path, tmp_path: Path) -> None:
    (tmp_path / ".tetherconfig").write_text(
        "[component:dist.ddp]\nj = 2x2\n[cli:run]\nscheduler = local_cwd\n"
        "[tether:tracker]\nfsspec =\nmlflow =\n[tracker:fsspec]\nconfig = /tmp/t\n"
    )
    cfg = load_config(cwd=str(tmp_path))
    assert cfg.component_defaults("dist.ddp") == {"j": "2x2"}
    assert cfg.cli_defaults("run") == {"scheduler": "local_cwd"}
    assert cfg.trackers() == {"fsspec": "/tmp/t", "mlflow": None}


def test_scheduler_cfg_converts_types(home: Path, tmp_path: Path) -> None:
    from dataclasses import dataclass, field

    @dataclass
    class Opts(StructuredOpts):
        n: int = 1
        """n."""
        tags: list[str] = field(default_factory=list)
        """tags."""
        name: str = "x"
        """name."""

    (tmp_path / ".tetherconfig").write_text("[s]\nn = 4\ntags = a,b\nname = p,q\n")
    cfg = load_config(cwd=str(tmp_path))
    opts = Opts.as_runopts()
    assert cfg.scheduler_cfg("s", opts) == {"n": 4, "tags": ["a", "b"], "name": "p,q"}
    # explicit values win over the file
    assert cfg.apply("s", {"n": 9}, opts)["n"] == 9


def test_dump_roundtrip(home: Path, tmp_path: Path) -> None:
    path = tmp_path / ".tetherconfig"
    dump_config({"local_cwd": {"log_dir": "/x"}}, str(path))
    assert load_config(cwd=str(tmp_path)).section("local_cwd") == {"log_dir": "/x"}
