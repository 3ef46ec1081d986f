"""Native KFP steps run for real: kfp.local's DockerRunner against podman's Docker API.

The image is a busybox rootfs imported into a private podman (nothing is pulled); see
:mod:`tests.e2e.infra.podman`; a step whose job calls ``tether.runtime.report`` runs in the
tether image built from this checkout (:mod:`tests.e2e.infra.tether_image`). Where podman
cannot run the tests are skipped with the reason, except in CI (``CI`` set), where that is a
failure.

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kfp")
pytest.importorskip("docker")

from tests.adapters import progress_app
from tests.adapters.kfp import components as c
from tests.adapters.kfp.pipelines import last_report_of
from tests.e2e.infra.podman import BUSYBOX_IMAGE, PodmanService, PodmanUnavailable
from tests.e2e.infra.tether_image import TetherImage

pytestmark = [
    pytest.mark.e2e,
    # kfp.local cannot apply resources; the compiled settings are tested by the golden files
    pytest.mark.filterwarnings("ignore:Task .* have no effect in the current local runner"),
]


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanService]:
    """A private podman serving the Docker API, with the busybox image imported."""
    service = PodmanService()
    try:
        service.start()
    except PodmanUnavailable as e:
        reason = f"podman cannot run containers here: {e}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", service.docker_host)
        try:
            yield service
        finally:
            service.stop()


def _keep_containers_until_teardown(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """kfp's DockerRunner starts each container with ``auto_remove=True`` and then streams its
    logs and waits for it. Docker keeps an auto-removed container until that stream ends;
    podman 4.3 may remove a fast one before the stream attaches (its log is lost) and then
    answers with 500 instead of 404. So containers are started without auto-remove and
    removed by the fixture at teardown: the same runs, with their output kept."""
    import docker.models.containers as containers

    started: list[Any] = []
    original = containers.ContainerCollection.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["auto_remove"] = False
        container = original(self, *args, **kwargs)
        started.append(container)
        return container

    monkeypatch.setattr(containers.ContainerCollection, "run", run)
    return started


@contextlib.contextmanager
def _kfp_local_docker(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``kfp.local`` with the DockerRunner, pipeline root ``root``; containers removed after."""
    from kfp import local
    from kfp.local import config

    started = _keep_containers_until_teardown(monkeypatch)
    root.mkdir(exist_ok=True)
    local.init(runner=local.DockerRunner(), pipeline_root=str(root))
    try:
        yield root
    finally:
        config.LocalExecutionConfig.instance = None
        for container in started:
            with contextlib.suppress(Exception):
                container.remove(force=True)


@pytest.fixture
def kfp_docker(
    podman: PodmanService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """``kfp.local`` with the DockerRunner (containers run by podman)."""
    with _kfp_local_docker(tmp_path / "kfp-root", monkeypatch) as root:
        yield root


@pytest.fixture
def kfp_tether_image(
    tether_image: TetherImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """``kfp.local`` with the DockerRunner on the podman that holds the tether image."""
    monkeypatch.setenv("DOCKER_HOST", tether_image.docker_host)
    with _kfp_local_docker(tmp_path / "kfp-root", monkeypatch) as root:
        yield root


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def test_native_step_reports_live_into_its_metrics_artifact(
        kfp_tether_image: Path, tether_image: TetherImage) -> None:
    from kfp import dsl
    from kfp.dsl import Metrics

    from tether.adapters.kfp import KubernetesOptions, step

    root = kfp_tether_image
    train = step(progress_app.training_in_image, image=tether_image.image,
                 k8s=KubernetesOptions(metrics=True))

    @dsl.pipeline(name="native-metrics")
    def pipeline(gate: str) -> Metrics:
        assert train.plan(gate=gate).mode == "native"  # KFP starts the job, not tether
        return train(gate=gate).outputs["tether_metrics"]

    seen: dict[str, Any] = {}

    def first_report_written() -> bool:
        """The first report in the artifact's file and in the executor output, mid-run."""
        for f in root.rglob("tether_metrics"):
            if _read(f).get("step") == 1:
                seen["file"] = _read(f)
        for f in root.rglob("executor_output.json"):
            entry = _read(f).get("artifacts", {}).get("tether_metrics", {}).get("artifacts")
            if entry and entry[0].get("metadata", {}).get("step") == 1:
                seen["metadata"] = entry[0]["metadata"]
        return len(seen) == 2

    gate = root / "gate"  # the pipeline root is mounted at the same path in the container
    released: list[bool] = []
    releaser = threading.Thread(daemon=True, target=lambda: released.append(
        progress_app.release_when(first_report_written, gate)))
    releaser.start()
    try:
        metrics = pipeline(gate=str(gate)).output
    finally:
        gate.touch()
        releaser.join(timeout=60)

    # the job waited at the gate until the test saw its first report in the step's artifact
    assert released == [True], seen
    assert seen["file"]["metrics"] == {"loss": 0.5} and seen["file"]["total"] == 4
    assert seen["metadata"] == {"loss": 0.5, "step": 1.0, "total": 4.0}
    # what KFP records when the step ends: the last report as the Metrics artifact's scalars
    assert isinstance(metrics, Metrics)
    assert metrics.metadata == {"loss": 0.125, "step": 4.0, "total": 4.0, "eta_s": 0.0}
    saved = _read(Path(metrics.path))  # the artifact's file: the report itself
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"loss": 0.125})


def test_a_native_step_as_a_loaded_component_passes_its_metrics_on(
        kfp_tether_image: Path, tether_image: TetherImage) -> None:
    from kfp import components
    from kfp.dsl import Metrics

    from tether.adapters.kfp import KubernetesOptions, step

    train = step(progress_app.training_in_image, k8s=KubernetesOptions(metrics=True))
    assert train.plan(gate="g", image=tether_image.image).mode == "native"
    # shared as YAML, as another team would use it
    loaded = components.load_component_from_text(train.to_yaml(image=tether_image.image))
    metrics = last_report_of(loaded, "native-component-metrics", kfp_tether_image)

    assert isinstance(metrics, Metrics)
    assert metrics.metadata == {"loss": 0.125, "step": 4.0, "total": 4.0, "eta_s": 0.0}
    saved = _read(Path(metrics.path))
    assert (saved["step"], saved["total"], saved["metrics"]) == (4, 4, {"loss": 0.125})


def test_native_steps_run_in_containers(kfp_docker: Path, capfd: pytest.CaptureFixture[str]
                                        ) -> None:
    from kfp import dsl

    from tether.adapters.kfp import step

    hello = step(c.hello, image=BUSYBOX_IMAGE, mode="native")
    shout = step(c.shout, image=BUSYBOX_IMAGE, env={"EXTRA": "x"})
    tagged = step(c.tagged, image=BUSYBOX_IMAGE)
    assert shout.plan(msg="m").mode == "native"

    @dsl.pipeline(name="native-e2e")
    def pipeline(msg: str = "hello") -> None:
        first = hello(msg=msg)
        loud = shout(msg=msg, times=2)  # the pipeline value reaches `sh -c` as $0, unquoted
        loud.after(first)
        tagged(msg=msg).after(loud)

    pipeline(msg="it's a 'quoted' $HOME value")

    log = capfd.readouterr().out
    assert f"Found image '{BUSYBOX_IMAGE}'" in log  # not pulled: the imported image
    assert "it's a 'quoted' $HOME value\n" in log  # echo got the value verbatim
    # env reached the container (APP from the role), the value was never shell-parsed
    assert "it's a 'quoted' $HOME value #1 (app kfp)" in log
    assert "it's a 'quoted' $HOME value #2 (app kfp)" in log
    # macros: ${app_id} -> <run id>-<task id> filled by KFP, ${replica_id} -> 0
    m = re.search(r"msg=it's a 'quoted' \$HOME value app=(\S+) replica=0", log)
    assert m is not None, log
    assert re.fullmatch(r"\d+-\d+", m.group(1)), m.group(1)


def test_builtin_component_as_native_step(kfp_docker: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import dsl

    from tether.adapters.kfp import step

    echo = step("utils.echo", image=BUSYBOX_IMAGE)

    @dsl.pipeline(name="builtin-native")
    def pipeline(msg: str = "from a pipeline parameter") -> None:
        echo(msg=msg)

    pipeline()
    out = capfd.readouterr().out
    assert "from a pipeline parameter\n" in out
    assert re.search(r"utils-echo.*finished with status.*SUCCESS", out), out


def test_typed_pipeline_values_reach_a_native_container(kfp_docker: Path,
                                                        capfd: pytest.CaptureFixture[str]
                                                        ) -> None:
    from kfp import dsl

    from tether.adapters.kfp import step

    echo = step(c.echo_typed, image=BUSYBOX_IMAGE)

    @dsl.pipeline(name="typed-native")
    def pipeline(epochs: int = 3, ratio: float = 0.25, flag: bool = True,
                 msg: str = "typed") -> None:
        assert echo.plan(epochs=epochs, ratio=ratio, flag=flag, msg=msg).mode == "native"
        echo(epochs=epochs, ratio=ratio, flag=flag, msg=msg)

    pipeline(epochs=7, ratio=0.5, flag=False)
    out = capfd.readouterr().out
    # KFP substitutes the values at run time (a bool as JSON: false)
    assert "epochs=7 ratio=0.5 flag=false msg=typed\n" in out, out


def test_native_output_artifact_is_written_where_kfp_keeps_it(
        kfp_docker: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # kfp.local collects a container step's output artifacts only from an executor output
    # file, which plain container steps do not write, so a downstream step cannot consume it
    # here (the KFP backend records them by URI); the wiring is checked in the compiled IR
    # (tests/adapters/kfp/test_artifacts.py)
    from kfp import dsl

    from tether.adapters.kfp import step

    seq = step(c.seq_rows, image=BUSYBOX_IMAGE)

    @dsl.pipeline(name="artifacts-native")
    def pipeline(rows: int = 3) -> None:
        seq(rows=rows)

    pipeline(rows=6)
    out = capfd.readouterr().out
    assert re.search(r"seq-rows.*finished with status.*SUCCESS", out), out
    written = list(kfp_docker.rglob("seq-rows/data"))
    assert len(written) == 1, out
    assert written[0].read_text().split() == [str(i) for i in range(1, 7)]
