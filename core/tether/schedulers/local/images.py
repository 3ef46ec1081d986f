"""Image providers of the local scheduler: where a role's "image" is on this host (TorchX's
``ImageProvider``, ``LocalDirectoryImageProvider``, ``CWDImageProvider``).

A provider answers, for a role, the image's root directory on this host (``fetch``), the
directory its replicas run in (``get_cwd``) and the program to run (``get_entrypoint``):

* :class:`CWDImageProvider` (``local_cwd``): the image is ignored; replicas run in the current
  directory;
* :class:`LocalDirectoryImageProvider`: ``role.image`` is a directory on this host; replicas
  run in it and ``${img_root}`` is it.

:func:`apply_image_provider` gives a copy of an app whose roles run where the provider says
(as a one-directory workspace, which ``local_cwd`` runs replicas in); :func:`join_path` builds
a ``PATH`` value. :class:`SignalException` is TorchX's exception for a termination signal.
"""

from __future__ import annotations

import abc
import copy
import os
import signal
from collections.abc import Mapping

from tether.errors import TetherError
from tether.specs import AppDef, CfgVal, Role, SpecError
from tether.specs.workspace import Workspace

__all__ = [
    "CWDImageProvider",
    "ImageProvider",
    "LocalDirectoryImageProvider",
    "SignalException",
    "apply_image_provider",
    "join_path",
]


class SignalException(TetherError):
    """A termination signal (SIGTERM, SIGINT) turned into an exception (TorchX's name).

    Args:
        msg: The message.
        sigval: The signal.
    """

    def __init__(self, msg: str, sigval: signal.Signals) -> None:
        super().__init__(msg)
        self.sigval = sigval


class ImageProvider(abc.ABC):
    """Finds a role's image on this host for the local scheduler."""

    def fetch_role(self, role: Role) -> str:
        """The image root of ``role`` (``fetch(role.image)`` unless overridden).

        Args:
            role: The role.

        Returns:
            A directory on this host ("" when there is none).
        """
        return self.fetch(role.image)

    @abc.abstractmethod
    def fetch(self, image: str) -> str:
        """Makes ``image`` available on this host and returns its root directory.

        Args:
            image: The role's image.

        Returns:
            A directory ("" when there is nothing to fetch).
        """

    def get_cwd(self, image: str) -> str | None:
        """The directory replicas of ``image`` run in (None: the scheduler's default).

        Args:
            image: The role's image.
        """
        return None

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        """The program to run: ``role.entrypoint`` under ``img_root`` by default.

        Args:
            img_root: What :meth:`fetch_role` returned.
            role: The role.
        """
        return os.path.join(img_root, role.entrypoint)


class LocalDirectoryImageProvider(ImageProvider):
    """``role.image`` is a directory on this host; replicas run in it.

    Args:
        cfg: The run options (unused; TorchX's constructor signature).
    """

    def __init__(self, cfg: Mapping[str, CfgVal] | None = None) -> None:
        self.cfg = dict(cfg or {})

    def fetch(self, image: str) -> str:
        """Checks that ``image`` is a directory and returns it.

        Args:
            image: The directory.

        Returns:
            ``image``.

        Raises:
            SpecError: (a ``ValueError``) When it does not exist or is not a directory.
        """
        if not os.path.isdir(image):
            raise SpecError(
                f"Invalid image name: {image!r}, does not exist or is not a directory "
                "(with LocalDirectoryImageProvider a role's image is a directory on this host)"
            )
        return image

    def get_cwd(self, image: str) -> str | None:
        """The image directory itself."""
        return image

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        """``role.entrypoint`` as it is (relative paths resolve in the image directory)."""
        return role.entrypoint


class CWDImageProvider(ImageProvider):
    """Ignores the image: replicas run in the current directory (``local_cwd``).

    Args:
        cfg: The run options (unused; TorchX's constructor signature).
    """

    def __init__(self, cfg: Mapping[str, CfgVal] | None = None) -> None:
        self.cfg = dict(cfg or {})

    def fetch(self, image: str) -> str:
        """The current directory."""
        return os.getcwd()

    def get_cwd(self, image: str) -> str | None:
        """The current directory."""
        return os.getcwd()

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        """``role.entrypoint`` as it is."""
        return role.entrypoint


def apply_image_provider(app: AppDef, provider: ImageProvider) -> AppDef:
    """A copy of ``app`` whose roles run where ``provider`` puts them.

    A role without a workspace whose provider names a directory gets that directory as its
    one-directory workspace (``local_cwd`` runs replicas in it and fills ``${img_root}`` with
    it) and the provider's entrypoint. A role with a workspace keeps it.

    Args:
        app: The app (not modified).
        provider: The image provider.

    Returns:
        The copy.
    """
    out = copy.deepcopy(app)
    for role in out.roles:
        if role.workspace is not None:
            continue
        img_root = provider.fetch_role(role)
        cwd = provider.get_cwd(role.image)
        if cwd:
            role.workspace = Workspace({os.path.abspath(cwd): ""})
        if img_root or cwd:
            role.entrypoint = provider.get_entrypoint(img_root, role)
    return out


def join_path(*paths: str | None) -> str:
    """Joins ``PATH`` parts, dropping empty ones and stray separators at their ends.

    Args:
        *paths: Parts, in order (``join_path(os.environ["PATH"], cwd)`` appends ``cwd``).

    Returns:
        The ``PATH`` value.
    """
    return os.pathsep.join(p.strip(os.pathsep) for p in paths if p and p.strip(os.pathsep))
