"""Planning an image workspace (pure): ignore files, content hash, names, the build context."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tether.workspace import Workspace
from tether.workspace.image import GENERATED_DOCKERFILE, context_tar, plan_image


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    p = tmp_path / "My Proj"
    (p / "pkg").mkdir(parents=True)
    (p / "pkg" / "a.py").write_text("a = 1\n")
    (p / "data").mkdir()
    (p / "data" / "big.bin").write_text("x")
    (p / "data" / "keep.txt").write_text("k")
    (p / "x.log").write_text("log")
    (p / ".dockerignore").write_text("# comment\ndata\n!data/keep.txt\n*.log\n")
    (p / ".tetherignore").write_text("pkg/skip*\n")
    (p / "pkg" / "skip_me.py").write_text("")
    return p


def test_ignores_and_context(proj: Path) -> None:
    plan = plan_image("base:1", Workspace({str(proj): ""}))
    assert [a for _, a in plan.files] == [".dockerignore", ".tetherignore", "data/keep.txt",
                                          "pkg/a.py"]
    assert plan.dockerfile == GENERATED_DOCKERFILE and plan.dockerfile_source == "generated"
    assert plan.image == f"tether-workspace-my-proj:{plan.content_hash[:16]}"
    with tarfile.open(fileobj=context_tar(plan)) as tar:
        assert sorted(tar.getnames()) == sorted([*(a for _, a in plan.files), "Dockerfile"])
        assert all(m.mtime == 0 for m in tar.getmembers())


def test_hash_changes_only_with_content(proj: Path) -> None:
    ws = Workspace({str(proj): ""})
    first = plan_image("base:1", ws)
    (proj / "data" / "big.bin").write_text("changed but ignored")
    assert plan_image("base:1", ws).image == first.image
    assert plan_image("base:2", ws).image != first.image
    (proj / "pkg" / "a.py").write_text("a = 2\n")
    assert plan_image("base:1", ws).image != first.image


def test_mapped_projects_repo_and_user_dockerfile(proj: Path, tmp_path: Path) -> None:
    other = tmp_path / "lib"
    other.mkdir()
    (other / "l.py").write_text("")
    (proj / "Dockerfile.tether").write_text("ARG IMAGE\nFROM $IMAGE\nCOPY . /app\n")
    plan = plan_image("b", Workspace({str(proj): "", str(other): "vendor/lib"}),
                      image_repo="reg:5000/team/")
    assert "vendor/lib/l.py" in [a for _, a in plan.files]
    assert plan.dockerfile_source == "Dockerfile.tether" and plan.push
    assert plan.image.startswith("reg:5000/team/tether-workspace-my-proj:")
    with pytest.raises(ValueError, match="image is empty"):
        plan_image("", Workspace({str(proj): ""}))
