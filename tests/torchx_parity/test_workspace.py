"""TorchX's ``Workspace`` behaviour, renamed to tether."""

from __future__ import annotations

from pathlib import Path

from tether.specs import Workspace


def test_truthiness() -> None:
    assert not Workspace(projects={})
    assert not Workspace.from_str("")
    assert Workspace(projects={"/home/foo/bar": ""})
    assert Workspace.from_str("/home/foo/bar")


def test_hash_and_equality() -> None:
    a = Workspace({"/a": "", "/b": "b"})
    b = Workspace({"/b": "b", "/a": ""})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Workspace({"/a": "x"}) != a


def test_str_single_and_multi_project() -> None:
    assert str(Workspace(projects={"/home/foo/bar": ""})) == "/home/foo/bar"
    multi = Workspace({"/home/foo/workspace/myproj": "", "/home/foo/github/torch": "torch"})
    assert str(multi) == "/home/foo/workspace/myproj;/home/foo/github/torch:torch"
    back = Workspace.from_str(str(multi))
    assert back is not None and back.projects == multi.projects


def test_from_str_does_not_check_directories() -> None:
    ws = Workspace.from_str("/home/foo/bar")
    assert ws is not None and ws.projects == {"/home/foo/bar": ""}
    ws = Workspace.from_str("/home/foo/bar: baz")
    assert ws is not None and ws.projects == {"/home/foo/bar": "baz"}


def test_from_str_multi_project_yaml() -> None:
    ws = Workspace.from_str("#\n/home/foo/bar:\n/home/foo/third-party/verl: verl\n")
    assert ws is not None
    assert ws.projects == {"/home/foo/bar": "", "/home/foo/third-party/verl": "verl"}


def test_merge_into(tmp_path: Path) -> None:
    for rel in ("workspace/myproj/README.md", "workspace/myproj/bin/cli",
                "workspace/torch/setup.py", "workspace/torch/torch/__init__.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).touch()
    ws = Workspace({str(tmp_path / "workspace/myproj"): "",
                    str(tmp_path / "workspace/torch"): "torch"})  # fmt: skip
    out = tmp_path / "out"
    ws.merge_into(out)
    assert (out / "README.md").is_file() and (out / "bin/cli").is_file()
    assert (out / "torch/setup.py").is_file() and (out / "torch/torch/__init__.py").is_file()
