"""A KFP step with an ordered list of schedulers: a launcher step whose job is one logical
job (``kfp.local``, real local_cwd jobs), and bad lists refused when the step is made. The
failover on a real capacity refusal (a kube namespace's ResourceQuota) is
``tests/adapters/kfp/test_failover_kube.py``."""

from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tether.adapters.common import SchedulerListError
from tether.adapters.kfp import LauncherOptions, step
from tether.runner import get_runner

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*is deprecated.*:DeprecationWarning", "ignore::FutureWarning")

FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)
PLACED = "tests.adapters.recovering_app:placed"


def test_a_list_is_a_launcher_step_on_the_first_candidate_with_room(
    kfp_subprocess: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``namespace`` is kubernetes's only: local_cwd takes the job without it."""
    from kfp import dsl

    placed = step(PLACED, scheduler=["local_cwd", "kubernetes"], cfg={"namespace": "ml"},
                  launcher=FAST)  # fmt: skip
    assert placed.plan().mode == "launcher"

    @dsl.pipeline(name="fails-over")
    def pipeline() -> None:
        placed()

    pipeline()
    log = capfd.readouterr().out
    assert "[tether] launched chain://" in log
    assert "placed attempt 0" in log and "finished SUCCEEDED" in log
    handle = log.split("[tether] launched ", 1)[1].split()[0]
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["refused"] == []


def test_the_compiled_step_carries_the_list(tmp_path: Path) -> None:
    from kfp import compiler, dsl

    placed = step(PLACED, scheduler="kubernetes,local_cwd", cfg={"namespace": "ml"})

    @dsl.pipeline(name="fails-over")
    def pipeline() -> None:
        placed()

    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    spec = yaml.safe_load(out.read_text())  # the step's code, unwrapped from the YAML text
    [executor] = spec["deploymentSpec"]["executors"].values()
    assert '"scheduler":"kubernetes,local_cwd"' in executor["container"]["command"][-1]


@pytest.mark.parametrize(
    ("scheduler", "cfg", "error"),
    [
        (["kubernets", "local_cwd"], {},
         r"step '[^']+placed': scheduler: unknown scheduler 'kubernets'; did you mean "
         r"kubernetes\?"),
        (["local_cwd", "kubernetes"], {"namespce": "ml"},
         r"step '[^']+placed': cfg: run option 'namespce' is not an option of any of the "
         r"schedulers local_cwd, kubernetes"),
        ([], {}, r"scheduler: \[\] names no scheduler"),
    ],
)
def test_bad_lists_are_refused_when_the_step_is_made(
    scheduler: list[str], cfg: dict[str, str], error: str
) -> None:
    with pytest.raises(SchedulerListError, match=error):
        step(PLACED, scheduler=scheduler, cfg=cfg)


def test_a_native_step_with_a_list_is_refused_when_the_step_is_made() -> None:
    """A native step is one KFP container step: it cannot move to another scheduler, so
    the list is refused up front, naming the step, the mode and the list."""
    from tether.adapters.kfp.native import NativeStepError

    with pytest.raises(NativeStepError, match=(
        r"step '[^']+placed': mode='native' with scheduler=\['kubernetes', 'local_cwd'\]: a "
        r"native step .* cannot move to another scheduler; give one scheduler, or use "
        r"mode='launcher'")):  # fmt: skip
        step(PLACED, scheduler="kubernetes,local_cwd", mode="native")


def test_an_automatic_step_with_a_list_says_why_it_is_a_launcher_step() -> None:
    plan = step(PLACED, scheduler=["kubernetes", "local_cwd"]).plan()
    assert plan.mode == "launcher"
    assert "scheduler names 2 schedulers to try in order (kubernetes,local_cwd)" in plan.reason
