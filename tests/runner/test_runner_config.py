"""``tether.runner.config``: TorchX's config functions over ``.tetherconfig`` files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tether.runner import config


def _write(d: Path, text: str) -> str:
    d.mkdir(parents=True, exist_ok=True)
    (d / ".tetherconfig").write_text(text)
    return str(d)


def test_apply_fills_missing_keys_first_dir_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHERCONFIG", raising=False)
    proj = _write(tmp_path / "proj", "[kubernetes]\nnamespace = proj\nqueue = q1\n")
    home = _write(tmp_path / "home", "[kubernetes]\nnamespace = home\nimage_repo = r\n")
    assert config.find_configs([proj, home]) == [f"{proj}/.tetherconfig", f"{home}/.tetherconfig"]
    cfg: dict[str, object] = {"queue": "explicit"}
    config.apply("kubernetes", cfg, dirs=[proj, home])  # type: ignore[arg-type]
    assert cfg == {"queue": "explicit", "namespace": "proj", "image_repo": "r"}


def test_load_converts_types_from_an_open_file() -> None:
    f = io.StringIO("[local_cwd]\nprepend_cwd = true\n")
    cfg: dict[str, object] = {}
    config.load("local_cwd", f, cfg)  # type: ignore[arg-type]
    assert cfg == {"prepend_cwd": True}


def test_get_configs_component_section_and_env_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHERCONFIG", raising=False)
    proj = _write(tmp_path / "p", "[component:dist.ddp]\nj = 2x2\n")
    home = _write(tmp_path / "h", "[component:dist.ddp]\nj = 1x1\nimage = img\n")
    assert config.get_configs("component", "dist.ddp", [proj, home]) == {"j": "2x2", "image": "img"}
    assert config.get_config("component", "dist.ddp", "j", [proj, home]) == "2x2"
    only = tmp_path / "only.ini"
    only.write_text("[component:dist.ddp]\nj = 9x9\n")
    monkeypatch.setenv("TETHERCONFIG", str(only))
    assert config.find_configs([proj, home]) == [str(only)]
    assert config.get_config("component", "dist.ddp", "j", [proj, home]) == "9x9"


def test_dump_writes_a_loadable_template() -> None:
    out = io.StringIO()
    config.dump(out, schedulers=["kubernetes"])
    text = out.getvalue()
    assert text.startswith("[kubernetes]\n") and "namespace = default" in text
    cfg: dict[str, object] = {}
    config.load("kubernetes", io.StringIO(text), cfg)  # type: ignore[arg-type]
    assert cfg["namespace"] == "default"
