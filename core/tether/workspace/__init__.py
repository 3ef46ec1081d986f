"""Workspaces: the user's project directory shipped with a role.

See :mod:`tether.workspace.api`.
"""

from tether.workspace.api import Workspace, WorkspaceMixin, walk_workspace

__all__ = ["Workspace", "WorkspaceMixin", "walk_workspace"]
