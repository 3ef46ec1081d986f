"""The ``dir`` workspace of ``slurm``: the project is copied to a shared directory.

The copy lands in ``<workspace_dir or job_dir/workspaces>/<name>-<digest>/`` (the digest covers
every file's path, size and modification time, so an unchanged project is copied once and
roles sharing it share the copy); ``.tetherignore`` is honoured. The role then runs there: its
step is started with ``srun --chdir=<copy>`` (see :data:`META_WORKSPACE_DIR`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tether.specs import Role
from tether.workspace import Workspace
from tether.workspace.api import walk_workspace

META_WORKSPACE_DIR = "tether.slurm.workspace_dir"
"""``Role.metadata`` key: the copied workspace the role's tasks run in."""


def digest(ws: Workspace) -> str:
    """A short digest of the workspace's files (relative path, size, mtime) and mapping."""
    h = hashlib.sha256()
    for src, dst in sorted(ws.projects.items()):
        h.update(f"{os.path.abspath(src)}\0{dst}\0".encode())
        for rel in sorted(walk_workspace(src)):
            st = os.stat(os.path.join(src, rel))
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def copy_workspace(ws: Workspace, base: str) -> str:
    """Copies the workspace under ``base`` (once per content) and returns the copy's path.

    Args:
        ws: The workspace.
        base: A directory the nodes see.

    Returns:
        The absolute path of the copy.
    """
    first = os.path.basename(os.path.abspath(next(iter(ws.projects)))) or "workspace"
    dest = Path(base) / f"{first}-{digest(ws)}"
    if dest.is_dir():
        return str(dest)
    Path(base).mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=base))
    try:
        for src, dst in ws.projects.items():
            root = tmp / dst if dst else tmp
            for rel in walk_workspace(src):
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.join(src, rel), target)
        try:
            tmp.rename(dest)
        except OSError:  # another submission copied the same content first
            if not dest.is_dir():
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            if tmp.exists():
                shutil.rmtree(tmp)
    return str(dest)


def build_role_workspace(role: Role, base: str, cache: dict[object, object]) -> None:
    """Copies ``role.workspace`` (once per workspace in ``cache``) and records the copy.

    Args:
        role: The role (its metadata gets :data:`META_WORKSPACE_DIR`).
        base: Where copies go.
        cache: Shared between the roles of one submission.
    """
    assert role.workspace is not None
    key = ("slurm", str(role.workspace), base)
    if key not in cache:
        cache[key] = copy_workspace(role.workspace, base)
    role.metadata[META_WORKSPACE_DIR] = cache[key]
