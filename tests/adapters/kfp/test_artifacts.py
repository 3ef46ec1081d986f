"""KFP artifacts: component parameters annotated ``Input[...]`` / ``Output[...]`` are the
paths/URIs the job reads and writes; they round-trip between steps (kfp.local runs them).

No ``from __future__ import annotations``: KFP reads the pipelines' real annotations.
"""

from pathlib import Path

import pytest
import yaml

pytest.importorskip("kfp")

from tests.adapters.kfp import components as c
from tether.adapters.kfp import LauncherOptions, StepArgumentError, step
from tether.adapters.kfp.artifacts import ArtifactDeclarationError

pytestmark = pytest.mark.filterwarnings(
    "ignore:You may be attemping to run a task:RuntimeWarning")  # kfp.local: image name

COMP = "tests.adapters.kfp.components"
FAST = LauncherOptions(wait_interval=0.2, cancel_grace=10.0)


def test_artifacts_round_trip_through_launcher_jobs(kfp_subprocess: Path,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    from kfp import dsl

    write = step(f"{COMP}:write_rows", scheduler="local_cwd", launcher=FAST)
    count = step(f"{COMP}:count_rows", scheduler="local_cwd", launcher=FAST, outputs={"rows": int})

    @dsl.pipeline(name="artifacts")
    def pipeline(rows: int = 4) -> int:
        written = write(rows=rows)
        counted = count(data=written.outputs["data"])
        return counted.outputs["rows"]

    task = pipeline(rows=5)
    assert task.output == 5  # the second job read what the first wrote
    log = capfd.readouterr().out
    assert "write/0 wrote 5 rows" in log and "count/0 counted 5 rows" in log
    # the jobs wrote KFP's artifacts: under the pipeline root, where KFP tracks them
    models = list(kfp_subprocess.rglob("count-rows/model"))
    assert len(models) == 1 and models[0].read_text() == "rows=5\n"
    data = list(kfp_subprocess.rglob("write-rows/data"))
    assert len(data) == 1 and data[0].read_text().count("row ") == 5


def test_native_artifacts_are_kfp_path_placeholders(tmp_path: Path) -> None:
    from kfp import compiler, dsl

    seq = step(c.seq_rows)
    wc = step(c.wc_rows)

    @dsl.pipeline(name="native-artifacts")
    def pipeline(rows: int = 4) -> None:
        wc(data=seq(rows=rows).outputs["data"])

    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(out))
    spec = next(yaml.safe_load_all(out.read_text()))
    assert spec["components"]["comp-seq-rows"]["outputDefinitions"]["artifacts"]["data"][
        "artifactType"]["schemaTitle"] == "system.Dataset"
    execs = spec["deploymentSpec"]["executors"]
    assert execs["exec-seq-rows"]["container"]["args"][2:] == [
        "{{$.outputs.artifacts['data'].path}}", "{{$.inputs.parameters['rows']}}"]
    assert execs["exec-wc-rows"]["container"]["args"][2] == "{{$.inputs.artifacts['data'].path}}"
    assert spec["root"]["dag"]["tasks"]["wc-rows"]["inputs"]["artifacts"]["data"] == {
        "taskOutputArtifact": {"outputArtifactKey": "data", "producerTask": "seq-rows"}}


def test_artifact_mistakes_are_explained() -> None:
    from kfp.dsl import Dataset, Output

    with pytest.raises(StepArgumentError, match=r"'data' is an output artifact; do not pass it"):
        step(c.seq_rows).plan(data="/tmp/x")
    with pytest.raises(StepArgumentError, match=r"'data' is an input artifact; wire an artifact"):
        step(c.wc_rows).plan(data="/tmp/x")
    with pytest.raises(ArtifactDeclarationError, match=r"artifact parameter 'times' has type int"):
        step(c.shout, artifacts={"times": Output[Dataset]})
    with pytest.raises(ArtifactDeclarationError, match=r"declare Input\[X\] or Output\[X\]"):
        step(c.shout, artifacts={"msg": Dataset})
    # a builtin component's str parameter declared an artifact by the step
    st = step("utils.echo", artifacts={"msg": Output[Dataset]})
    assert [i.artifact for i in st.inputs if i.name == "msg"] == ["output"]
