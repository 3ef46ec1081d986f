"""What the job summary artifact shows (pure rendering, no Prefect run needed)."""

from __future__ import annotations

from tether.adapters.common import JobResult
from tether.adapters.prefect.artifacts import artifact_key, summary_markdown
from tether.specs import AppDef, AppState, AppStatus, ReplicaStatus, Role, RoleStatus


def _app() -> AppDef:
    return AppDef(name="trainer", roles=[
        Role(name="trainer", image="img:1", entrypoint="python",
             args=["-c", "print('a|b')"], num_replicas=2),
        Role(name="ps", image="img:1", entrypoint="sleep", args=["9"]),
    ])


def test_summary_lists_job_roles_replicas_and_outputs() -> None:
    result = JobResult(
        "k8s://default/trainer-x", AppState.FAILED,
        msg="replica trainer/1 exited with code 3\nlast line: boom",
        ui_url="https://ui/trainer-x", outputs={"loss": 0.5, "tags": ["a"]},
        num_restarts=1, reattached=True,
    )
    status = AppStatus(AppState.FAILED, roles=[RoleStatus("trainer", [
        ReplicaStatus(0, AppState.SUCCEEDED, "trainer", hostname="n1", exit_code=0),
        ReplicaStatus(1, AppState.FAILED, "trainer", hostname="n2", exit_code=3),
    ])])
    md = summary_markdown("train", "kubernetes", _app(), result, status, job_key="prefect-abc")
    lines = md.splitlines()
    assert lines[0] == "### tether job of task `train`"
    for row in (
        "| handle | `k8s://default/trainer-x` |",
        "| scheduler | kubernetes |",
        "| final state | **FAILED** |",
        "| message | replica trainer/1 exited with code 3 last line: boom |",
        "| UI | [https://ui/trainer-x](https://ui/trainer-x) |",
        "| re-attached | yes |",
        "| restarts | 1 |",
        "| job key | `prefect-abc` |",
        "| trainer | 2 | `img:1` | `python -c print('a\\|b')` |",
        "| ps | 1 | `img:1` | `sleep 9` |",
        "| trainer/0 | SUCCEEDED | 0 | n1 |",
        "| trainer/1 | FAILED | 3 | n2 |",
        '| loss | `0.5` |',
        '| tags | `["a"]` |',
    ):
        assert row in lines, (row, md)


def test_summary_of_a_plain_success_has_no_empty_sections() -> None:
    result = JobResult("local_cwd://s/a", AppState.SUCCEEDED)
    md = summary_markdown("t", "local_cwd", _app(), result)
    assert "message" not in md and "UI" not in md and "| output |" not in md
    assert "| replica |" not in md  # no status given


def test_long_cells_are_cut() -> None:
    result = JobResult("h", AppState.FAILED, msg="x" * 1000)
    md = summary_markdown("t", "s", _app(), result)
    (row,) = [line for line in md.splitlines() if line.startswith("| message |")]
    assert row.endswith("... |") and len(row) < 330


def test_artifact_keys_are_what_prefect_accepts() -> None:
    assert artifact_key("utils.python") == "tether-utils-python"
    assert artifact_key("Train Model_v2", "ui") == "tether-train-model-v2-ui"
    key = artifact_key("x" * 500)
    assert len(key) <= 200 and set(key) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
