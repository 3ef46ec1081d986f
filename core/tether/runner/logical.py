"""Logical handles: ``chain://<session>/<app name>-<digest>``, one job over attempts.

Only the test of a handle lives here, so that a Runner tells logical handles apart without
loading the machinery of :mod:`tether.runner.chains` until it meets one.
"""

from __future__ import annotations

from tether.specs.handles import AppHandle, MalformedAppHandleException, parse_app_handle

CHAIN_SCHEME = "chain"
"""The scheme of a logical handle: ``chain://<session>/<app name>-<digest>``."""


def is_chain_handle(app_handle: AppHandle) -> bool:
    """Whether a handle is a logical job's (see :mod:`tether.runner.chains`).

    Args:
        app_handle: The handle.

    Returns:
        True for ``chain://...`` handles.
    """
    try:
        return parse_app_handle(app_handle).scheduler_backend == CHAIN_SCHEME
    except MalformedAppHandleException:
        return False
