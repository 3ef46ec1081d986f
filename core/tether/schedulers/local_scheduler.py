"""TorchX's module path ``torchx.schedulers.local_scheduler``: the local scheduler with
TorchX's constructor and image providers.

:class:`LocalScheduler` here is ``local_cwd``'s scheduler
(:class:`tether.schedulers.local.scheduler.LocalScheduler`) built as TorchX builds it:
``LocalScheduler(session_name, image_provider_class=CWDImageProvider, cache_size=100,
extra_paths=None)``. The image provider decides where each role's replicas run
(:class:`LocalDirectoryImageProvider`: in the directory ``role.image`` names), and as in
TorchX a replica's working directory is appended to its ``PATH`` (prepended with the run
option ``prepend_cwd=True``), after ``extra_paths``. Apps stay durable, as every
``local_cwd`` app: ``cache_size`` is checked (it must be positive) but apps are kept on disk,
not in the process's memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from tether.schedulers.local.images import (
    CWDImageProvider,
    ImageProvider,
    LocalDirectoryImageProvider,
    SignalException,
    apply_image_provider,
    join_path,
)
from tether.schedulers.local.options import LocalOpts
from tether.schedulers.local.render import LocalRequest, role_cwd
from tether.schedulers.local.scheduler import LocalScheduler as _LocalCwdScheduler
from tether.specs import AppDef, AppDryRunInfo, CfgVal, SpecError

__all__ = [
    "CWDImageProvider",
    "ImageProvider",
    "LocalDirectoryImageProvider",
    "LocalScheduler",
    "SignalException",
    "create_scheduler",
]

ImageProviderFactory = Callable[[Mapping[str, CfgVal]], ImageProvider]


class LocalScheduler(_LocalCwdScheduler):
    """``local_cwd`` with TorchX's constructor (see the module docs).

    Args:
        session_name: The runner's session.
        image_provider_class: Builds the image provider from the run options.
        cache_size: TorchX's bound on apps held in memory; must be > 0 (apps are on disk).
        extra_paths: Directories put first on every replica's ``PATH``.
        **kwargs: tether's ``state_dir`` and ``gpu_count``.

    Raises:
        SpecError: When ``cache_size`` is not positive (a ``ValueError``).
    """

    def __init__(
        self,
        session_name: str,
        image_provider_class: ImageProviderFactory = CWDImageProvider,
        cache_size: int = 100,
        extra_paths: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(cache_size, int) or cache_size <= 0:
            raise SpecError(f"cache size must be greater than zero, got {cache_size!r}")
        super().__init__(session_name, **kwargs)
        self._image_provider_class = image_provider_class
        self._cache_size = cache_size
        self._extra_paths = list(extra_paths or [])

    def _placed(self, app: AppDef, opts: LocalOpts) -> AppDef:
        return apply_image_provider(app, self._image_provider_class(opts))

    def _validate(self, app: AppDef, scheduler: str, opts: LocalOpts) -> None:
        placed = self._placed(app, opts)
        default_cwd = os.path.expanduser(opts.cwd) if opts.cwd else os.getcwd()
        for role in placed.roles:  # an entrypoint found on the PATH the replica gets is fine
            if self._extra_paths and os.path.isdir(role_cwd(role, default_cwd)):
                base = role.env.get("PATH", os.environ.get("PATH", os.defpath))
                role.env["PATH"] = join_path(*self._extra_paths, base)
        super()._validate(placed, scheduler, opts)

    def _submit_dryrun(self, app: AppDef, opts: LocalOpts) -> AppDryRunInfo[LocalRequest]:
        info = super()._submit_dryrun(self._placed(app, opts), opts)
        for replicas in info.request.roles.values():
            for rep in replicas:
                path = rep.env.get("PATH") or os.environ.get("PATH", "")
                if opts.prepend_cwd:  # the cwd is already first
                    first, _, rest = path.partition(os.pathsep)
                    rep.env["PATH"] = join_path(first, *self._extra_paths, rest)
                else:  # the cwd is already last
                    rep.env["PATH"] = join_path(*self._extra_paths, path)
        return info


def create_scheduler(session_name: str, **kwargs: Any) -> LocalScheduler:
    """Creates the local scheduler as TorchX's ``local_cwd`` (``CWDImageProvider``).

    Args:
        session_name: The runner's session.
        **kwargs: ``cache_size``, ``extra_paths``, ``state_dir``, ``gpu_count``; others are
            ignored (options meant for other backends).

    Returns:
        The scheduler.
    """
    known = ("cache_size", "extra_paths", "state_dir", "gpu_count")
    return LocalScheduler(
        session_name,
        image_provider_class=CWDImageProvider,
        **{k: v for k, v in kwargs.items() if k in known},
    )
