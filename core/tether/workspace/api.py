"""The workspace model and the mixin schedulers use to build and ship it.

A :class:`Workspace` maps local project directories to paths inside the job
(``{"./": ""}`` ships the current directory as the job's root). Schedulers that can ship code
mix in :class:`WorkspaceMixin`: ``local_cwd`` simply runs the replicas in the directory;
container backends build an image layer from it.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tether.specs import CfgVal, runopts
from tether.specs.workspace import Workspace

if TYPE_CHECKING:
    from tether.specs import Role

T = TypeVar("T")

IGNORE_FILE = ".tetherignore"

__all__ = ["IGNORE_FILE", "Workspace", "WorkspaceMixin", "walk_workspace"]


def _ignore_patterns(root: str) -> list[str]:
    path = os.path.join(root, IGNORE_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def walk_workspace(root: str) -> Iterator[str]:
    """Yields the files of a workspace directory, relative to it, honouring ``.tetherignore``.

    Args:
        root: The directory.

    Yields:
        Relative file paths.
    """
    patterns = [*_ignore_patterns(root), ".git", "__pycache__", "*.pyc"]
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [
            d
            for d in dirnames
            if not any(fnmatch.fnmatch(d, p) or fnmatch.fnmatch(
                os.path.normpath(os.path.join(rel_dir, d)), p) for p in patterns)
        ]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) for p in patterns):
                yield rel


class WorkspaceMixin(Generic[T]):
    """Mixed into schedulers that build and ship workspaces.

    Subclasses implement :meth:`caching_build_workspace_and_update_role`; the Runner calls
    :meth:`build_workspaces` before rendering the request.
    """

    def workspace_opts(self) -> runopts:
        """Extra run options the workspace build takes (none by default)."""
        return runopts()

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """TorchX's hook: builds ``workspace`` and points ``role`` at the result.

        A plugin written for TorchX overrides this; the default
        :meth:`caching_build_workspace_and_update_role` calls it once per distinct
        workspace and image. Does nothing by default.

        Args:
            role: The role to update in place (typically ``role.image``).
            workspace: ``str(role.workspace)``: the directory for a one-directory workspace.
            cfg: Resolved run options.
        """

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Builds ``role.workspace`` and points the role at the result (image, cwd...).

        Implementations must reuse ``build_cache`` so roles sharing a workspace build once.
        The default calls :meth:`build_workspace_and_update_role` for the first role of each
        (workspace, image) pair and gives later roles of that pair the image it produced.

        Args:
            role: The role to update in place.
            cfg: Resolved run options.
            build_cache: Shared between the roles of one submission.
        """
        if role.workspace is None:
            return
        key = ("build_workspace_and_update_role", str(role.workspace), role.image)
        if key in build_cache:
            role.image = str(build_cache[key])
            return
        self.build_workspace_and_update_role(role, str(role.workspace), cfg)
        build_cache[key] = role.image

    def build_workspaces(self, roles: list[Role], cfg: Mapping[str, CfgVal]) -> None:
        """Builds every role's workspace (once per distinct workspace).

        Args:
            roles: The app's roles (updated in place).
            cfg: Resolved run options.
        """
        cache: dict[object, Any] = {}
        for role in roles:
            if role.workspace is not None:
                self.caching_build_workspace_and_update_role(role, cfg, cache)
