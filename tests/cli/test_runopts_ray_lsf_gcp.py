"""``tether runopts`` documents every run option of ``ray``, ``lsf`` and ``gcp_batch``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.cli.conftest import Result
from tether.schedulers.gcp_batch.options import GcpBatchOpts
from tether.schedulers.lsf.options import LsfOpts
from tether.schedulers.ray.options import RayOpts
from tether.specs import StructuredOpts


@pytest.mark.parametrize(
    ("backend", "opts"), [("ray", RayOpts), ("lsf", LsfOpts), ("gcp_batch", GcpBatchOpts)]
)
def test_runopts_documents_every_option(
    tether: Callable[..., Result], backend: str, opts: type[StructuredOpts]
) -> None:
    res = tether("runopts", backend)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == f"{backend}:"
    documented = {}
    for i, line in enumerate(lines[1:-1], start=1):
        if line.startswith("    ") and not line.startswith("        "):
            name = line.split()[0]
            help_line = lines[i + 1]
            documented[name] = help_line.strip() if help_line.startswith("        ") else ""
    names = [f.name for f in dataclasses.fields(opts)]
    assert sorted(documented) == sorted(names)
    undocumented = [n for n, text in documented.items() if len(text) < 10]
    assert not undocumented, f"{backend}: options without help: {undocumented}"
