"""The workspace model: local project directories shipped with a role.

It is part of the spec (``Role.workspace``); building and shipping it is the schedulers'
business (:mod:`tether.workspace`, which re-exports :class:`Workspace`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Workspace:
    """Local directories to ship with a role.

    Attributes:
        projects: Local path to destination path (relative to the job's root; ``""`` is the
            root itself).
    """

    projects: dict[str, str] = field(default_factory=dict)

    def is_unmapped_single_project(self) -> bool:
        """True when the workspace is one directory shipped as the job's root."""
        return len(self.projects) == 1 and not next(iter(self.projects.values()))

    @staticmethod
    def from_str(workspace: str | None) -> Workspace | None:
        """Parses ``DIR`` or ``SRC:DST[,SRC2:DST2]`` (the CLI's ``--workspace``).

        A ``file://`` prefix (TorchX's ``file:///path`` form) is accepted on each directory.

        Args:
            workspace: The string (None or empty means no workspace).

        Returns:
            The workspace, or None.

        Raises:
            ValueError: When a source directory does not exist.
        """
        if not workspace:
            return None
        projects: dict[str, str] = {}
        for part in workspace.split(","):
            part = part.strip()
            if part.startswith("file://"):  # TorchX's form: file:///path/to/project
                part = part[len("file://") :]
            src, _, dst = part.partition(":")
            src = os.path.expanduser(src.strip())
            if not os.path.isdir(src):
                raise ValueError(
                    f"workspace directory {src!r} does not exist (from --workspace {workspace!r})"
                )
            projects[src] = dst.strip()
        return Workspace(projects)

    def __str__(self) -> str:
        if self.is_unmapped_single_project():
            return next(iter(self.projects))
        return ",".join(f"{k}:{v}" for k, v in self.projects.items())
