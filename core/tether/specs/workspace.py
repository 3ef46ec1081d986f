"""The workspace model: local project directories shipped with a role.

It is part of the spec (``Role.workspace``); building and shipping it is the schedulers'
business (:mod:`tether.workspace`, which re-exports :class:`Workspace`).
"""

from __future__ import annotations

import os
import pathlib
import shutil
from dataclasses import dataclass, field


@dataclass
class Workspace:
    """Local directories to ship with a role.

    A workspace is true when it has projects; equal workspaces hash alike (they key build
    caches).

    Attributes:
        projects: Local path to destination path (relative to the job's root; ``""`` is the
            root itself).
    """

    projects: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.projects)

    def __hash__(self) -> int:
        return hash(frozenset(self.projects.items()))

    def is_unmapped_single_project(self) -> bool:
        """True when the workspace is one directory shipped as the job's root."""
        return len(self.projects) == 1 and not next(iter(self.projects.values()))

    def merge_into(self, outdir: str | pathlib.Path) -> None:
        """Copies each project into ``outdir/<destination>`` (a file project as a file).

        Args:
            outdir: The directory to copy into (created as needed).
        """
        for src, dst in self.projects.items():
            target = pathlib.Path(outdir) / dst
            source = pathlib.Path(os.path.expanduser(src))
            if source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
            else:
                shutil.copytree(source, target, dirs_exist_ok=True)

    @staticmethod
    def from_str(workspace: str | None) -> Workspace | None:
        """Parses the CLI's ``--workspace``: ``DIR``, ``SRC:DST`` items separated by ``,`` or
        ``;``, or TorchX's YAML mapping (``"/src/a:\\n/src/b: b\\n"``, one project a line).

        A ``file://`` prefix (TorchX's ``file:///path`` form) is accepted on each directory.
        Directories are not checked here (as TorchX): the scheduler that ships the workspace
        reports one that is missing.

        Args:
            workspace: The string (None or empty means no workspace).

        Returns:
            The workspace, or None.
        """
        if not workspace or not workspace.strip():
            return None
        if "\n" in workspace.strip():
            return Workspace(_yaml_projects(workspace))
        projects: dict[str, str] = {}
        for part in workspace.replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            if part.startswith("file://"):  # TorchX's form: file:///path/to/project
                part = part[len("file://") :]
            src, _, dst = part.partition(":")
            projects[os.path.expanduser(src.strip())] = dst.strip()
        return Workspace(projects)

    def __str__(self) -> str:
        """The directory of a one-directory workspace, else ``src;src2:dst2`` (TorchX's
        form; :meth:`from_str` reads it back)."""
        if self.is_unmapped_single_project():
            return next(iter(self.projects))
        return ";".join(k if not v else f"{k}:{v}" for k, v in self.projects.items())


def _yaml_projects(text: str) -> dict[str, str]:
    import yaml  # only for this form (specs imports no third-party package at import time)

    from tether.errors import SpecError

    doc = yaml.safe_load(text)
    if isinstance(doc, str):
        return {os.path.expanduser(doc): ""}
    if not isinstance(doc, dict):
        raise SpecError(
            f"workspace {text!r} is neither a directory nor a mapping of directory -> "
            "destination"
        )
    return {os.path.expanduser(str(k)): "" if v is None else str(v) for k, v in doc.items()}
