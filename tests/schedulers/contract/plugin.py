"""The backend contract suite as a pytest plugin: the ``harness`` fixture and its parameters.

Built-in backends are always parameters (all but ``local_cwd`` are marked ``e2e``). A third-party
backend (a ``tether.schedulers`` entry point) runs the same cases with its own
:class:`~tests.schedulers.contract.harness.BackendHarness`, from a tether checkout::

    PYTHONPATH=$TETHER_CHECKOUT:$TETHER_CHECKOUT/core:$TETHER_CHECKOUT/adapters \\
        pytest -p tests.schedulers.contract.plugin \\
        --tether-harness my_backend_tests.harness:MyHarness \\
        $TETHER_CHECKOUT/tests/schedulers/contract

With ``--tether-harness`` (repeatable) only the given harnesses run. The suite is test code:
it stays in the repository, not in the installed package.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.e2e.infra.kubelet import FakeKubelet
    from tests.schedulers.contract.harness import BackendHarness

OPTION = "--tether-harness"
BACKENDS_OPTION = "--contract-backends"

BUILTIN_HARNESSES: list[tuple[str, str, tuple[Any, ...]]] = [
    ("local_cwd", "tests.schedulers.contract.backends:LocalHarness", ()),
    ("kubernetes", "tests.schedulers.contract.kube_real:RealKubernetesHarness", (pytest.mark.e2e,)),
    ("slurm", "tests.schedulers.contract.backends:SlurmHarness", (pytest.mark.e2e,)),
    ("slurm_ssh", "tests.schedulers.contract.backends:SlurmSshHarness", (pytest.mark.e2e,)),
    ("slurm_rest", "tests.schedulers.contract.backends:SlurmRestHarness", (pytest.mark.e2e,)),
    ("aws_batch", "tests.schedulers.contract.backends:AwsBatchHarness", (pytest.mark.e2e,)),
    ("local_docker", "tests.schedulers.contract.backends:LocalDockerHarness", (pytest.mark.e2e,)),
    ("ray", "tests.schedulers.contract.backends:RayHarness", (pytest.mark.e2e,)),
]
"""``(id, "module:Class", marks)`` of the built-in backends' harnesses."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds ``--tether-harness MODULE:CLASS``."""
    parser.addoption(
        OPTION,
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="run the tether backend contract suite with this BackendHarness only "
        "(repeatable); default: the built-in backends",
    )
    parser.addoption(
        BACKENDS_OPTION,
        default="",
        metavar="ID[,ID...]",
        help="run the contract suite on these built-in backends only (comma-separated ids; "
        "`tests/run_groups.py` gives each test group its backends)",
    )


def _load(target: str) -> type[BackendHarness]:
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise pytest.UsageError(f"{OPTION} {target!r}: expected MODULE:CLASS")
    try:
        cls: type[BackendHarness] = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise pytest.UsageError(f"{OPTION} {target!r}: cannot load it: {e}") from e
    return cls


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes the contract cases over the harnesses."""
    if "harness_target" not in metafunc.fixturenames:
        return
    given: list[str] = metafunc.config.getoption(OPTION) or []
    if given:
        params = [pytest.param(t, id=_load(t).name or t) for t in given]
    else:
        only = {b for b in metafunc.config.getoption(BACKENDS_OPTION).split(",") if b}
        unknown = only - {i for i, _, _ in BUILTIN_HARNESSES}
        if unknown:
            raise pytest.UsageError(
                f"{BACKENDS_OPTION}: unknown backend(s) {sorted(unknown)}; built-in: "
                f"{[i for i, _, _ in BUILTIN_HARNESSES]}"
            )
        params = [
            pytest.param(t, id=i, marks=m)
            for i, t, m in BUILTIN_HARNESSES
            if not only or i in only
        ]
    metafunc.parametrize("harness_target", params)


@pytest.fixture
def harness(harness_target: str, request: pytest.FixtureRequest, tmp_path: Path) -> BackendHarness:
    """The backend under test, set up for this case (skipped when the harness says the case
    cannot hold on its backend, with the reason)."""
    cls = _load(harness_target)
    ids = set(getattr(getattr(request.node, "callspec", None), "id", "").split("-"))
    reason = next((why for case, why in cls.unsupported_cases.items()
                   if case.partition("[")[0] == request.node.originalname
                   and (not case.partition("[")[2] or case.partition("[")[2][:-1] in ids)),
                  None)  # fmt: skip
    if reason:
        pytest.skip(f"{cls.name}: {reason}")
    return cls(request, tmp_path)


@pytest.fixture(scope="session")
def tether_contract_kubelet(kube_api: Any) -> Iterator[FakeKubelet]:
    """A test kubelet that runs the contract suite's pods as local processes."""
    from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
    from tests.e2e.infra.kubelet_exec import PodExecutor
    from tests.schedulers.contract.backends import CONTRACT_SUITE_LABEL

    with FakeKubelet(
        kube_api,
        node_name="tether-contract-node",
        label_selector=f"e2e-suite={CONTRACT_SUITE_LABEL}",
        behaviour=Behaviour.run_process(),
        executor=PodExecutor(),
    ) as kubelet:
        yield kubelet
