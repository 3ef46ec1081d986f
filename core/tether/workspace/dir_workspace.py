"""Workspaces copied to a directory that becomes the role's image (TorchX's
``torchx.workspace.dir_workspace``).

For schedulers whose "image" is a directory on a shared filesystem (Slurm-like backends):

* :class:`DirWorkspaceMixin` copies the workspace into the run option ``job_dir`` (which must
  not exist yet) and sets ``role.image`` to it; without ``job_dir`` it does nothing;
* :class:`TmpDirWorkspaceMixin` copies it into a new temporary directory.

Files matched by ``.tetherignore`` (and ``.git``, ``__pycache__``, ``*.pyc``) are skipped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.specs import CfgVal, SpecTypeError
from tether.specs.workspace import Workspace
from tether.workspace.api import WorkspaceMixin, walk_workspace

if TYPE_CHECKING:
    from tether.specs import Role

__all__ = ["DirWorkspaceMixin", "TmpDirWorkspaceMixin", "copy_workspace"]


def copy_workspace(workspace: Workspace | str, target: str) -> None:
    """Copies a workspace's files into ``target`` (each project under its destination).

    Args:
        workspace: The workspace, or one project directory.
        target: The directory to copy into (created if missing).
    """
    ws = Workspace({workspace: ""}) if isinstance(workspace, str) else workspace
    for src, dst in ws.projects.items():
        src = os.path.expanduser(src)
        if src.startswith("file://"):
            src = src[len("file://") :]
        root = os.path.join(target, dst) if dst else target
        if os.path.isfile(src):
            os.makedirs(root, exist_ok=True)
            shutil.copy2(src, root)
            continue
        for rel in walk_workspace(src):
            out = os.path.join(root, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), out)


def _source(role: Role, workspace: str) -> Workspace | str:
    return role.workspace if role.workspace is not None else workspace


class TmpDirWorkspaceMixin(WorkspaceMixin[None]):
    """Copies the workspace into a new temporary directory and makes it ``role.image``."""

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """Copies ``workspace`` to a fresh temporary directory; ``role.image`` becomes it.

        Args:
            role: The role (its ``image`` is replaced).
            workspace: The workspace directory (``role.workspace`` wins when set).
            cfg: Run options (unused).
        """
        job_dir = tempfile.mkdtemp(prefix="tether_workspace")
        copy_workspace(_source(role, workspace), job_dir)
        role.image = job_dir


class DirWorkspaceMixin(WorkspaceMixin[None]):
    """Copies the workspace into the run option ``job_dir`` and makes it ``role.image``."""

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """Copies ``workspace`` into ``cfg["job_dir"]``; ``role.image`` becomes it.

        Does nothing when ``job_dir`` is not set.

        Args:
            role: The role (its ``image`` is replaced).
            workspace: The workspace directory (``role.workspace`` wins when set).
            cfg: Run options; ``job_dir`` names a directory that must not exist yet.

        Raises:
            SpecTypeError: When ``job_dir`` is not a string.
            FileExistsError: When ``job_dir`` already exists (a job never reuses another's).
        """
        job_dir = cfg.get("job_dir")
        if job_dir is None:
            return
        if not isinstance(job_dir, str):
            raise SpecTypeError(
                f"run option job_dir must be a str (a directory to create), got "
                f"{type(job_dir).__name__} {job_dir!r}"
            )
        os.mkdir(job_dir)
        copy_workspace(_source(role, workspace), job_dir)
        role.image = job_dir
