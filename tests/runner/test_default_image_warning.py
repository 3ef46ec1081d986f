"""A dry-run warns when a role runs tether's default image on a remote backend."""

from __future__ import annotations

import logging

import pytest

from tether.components import DEFAULT_IMAGE
from tether.runner import get_runner


def test_warns_on_remote_backend_only(caplog: pytest.LogCaptureFixture, tmp_path: object
                                      ) -> None:
    caplog.set_level(logging.WARNING, logger="tether.runner")
    with get_runner("t") as runner:
        runner.dryrun_component("utils.echo", ["--msg", "hi"], "kubernetes")
        warned = [r.getMessage() for r in caplog.records]
        assert any(DEFAULT_IMAGE in m and "kubernetes" in m and "make image" in m
                   for m in warned), warned
        caplog.clear()
        runner.dryrun_component("utils.echo", ["--msg", "hi", "--image", "me/mine:1"],
                                "kubernetes")
        runner.dryrun_component("utils.echo", ["--msg", "hi"], "local_cwd")
        runner.dryrun_component("utils.echo", ["--msg", "hi"], "local_docker")
        assert not [r for r in caplog.records if DEFAULT_IMAGE in r.getMessage()]
