"""One secret policy on the adapters' shared surfaces: dry-runs, log fan-in, results, tracker.

The app of :mod:`tests.adapters.secret_app` plants a secret of every kind in env, args and a
secret-named parameter; its job prints them all to stdout and stderr, records them in the
tracker and fails. The KFP dry-run (both modes), the AppDef summary every adapter shows, the
lines of the log fan-in every orchestrator's task log is fed from, the job's failure message
and the tracker's store are searched for the values. (Airflow's dry-run:
``tests/adapters/airflow/test_airflow_api.py``; Prefect's logs, artifacts and dry-run:
``tests/adapters/prefect/test_task.py``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.secret_app import PARAM_SECRET, leaks, leaky
from tether.adapters.common import JobFailedError, JobSession, describe_app
from tether.specs import AppState


def test_appdef_summary_masks_env_args_and_parameters() -> None:
    summary = describe_app(leaky(PARAM_SECRET))
    command = summary["roles"][0]["command"]
    assert command[-6:] == ["--db-password=****", "--token", "****",
                            "https://bob:****@git.example/repo.git", "--api-token", "****"]
    assert summary["roles"][0]["env"]["PLAIN"] == "visible-value"
    assert not leaks({"describe_app": repr(summary)})


@pytest.mark.parametrize("mode", ["native", "launcher"])
def test_kfp_dryrun_masks_every_layer(mode: str) -> None:
    pytest.importorskip("kfp")
    from tether.adapters.kfp import step

    st = step("tests.adapters.secret_app:leaky", scheduler="kubernetes" if mode == "native"
              else "local_cwd", mode=mode, env={"EXTRA_TOKEN": "SEKRIT_stepenv"})
    dr = st.dryrun(api_token=PARAM_SECRET)
    assert dr.mode == mode
    text = str(dr)
    assert "--token" in text and "visible-value" in text  # the layers are really there
    if mode == "launcher":
        assert dr.scheduler_request is not None and "--api-token" in dr.scheduler_request
    assert not leaks({f"kfp dryrun ({mode})": text})


def test_log_fan_in_failure_message_and_tracker_mask_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "tracker"
    cfg = tmp_path / "project.tetherconfig"
    cfg.write_text(f"[tether:tracker]\nfsspec =\n\n[tracker:fsspec]\nconfig = {store}\n")
    monkeypatch.setenv("TETHERCONFIG", str(cfg))
    monkeypatch.delenv("TETHER_TRACKERS", raising=False)
    job = JobSession(leaky(PARAM_SECRET), "local_cwd", {"grace_period": 0.5})
    lines: list[str] = []
    try:
        with pytest.raises(JobFailedError) as failed:
            job.run(sink=lines.append, wait_interval=0.2)
    finally:
        job.close()
    result = failed.value.result
    assert result.state == AppState.FAILED and "exited with code 3" in result.msg
    surfaces = {
        "log fan-in": "\n".join(lines),
        "failure message": str(failed.value),
        "result": repr(result.to_dict()),
    }
    # the job really printed the secrets, and the tracker really recorded the run
    assert any("DATABASE_URL=postgresql://app:****@" in ln for ln in lines), lines
    assert any(ln.startswith("r/0 args ") and "--token ****" in ln for ln in lines), lines
    tracked = [p for p in store.rglob("*") if p.is_file()]
    assert tracked, f"the job recorded nothing under {store}"
    surfaces["tracker"] = "\n".join(p.read_text(errors="replace") for p in tracked)
    assert "git.example" in surfaces["tracker"] and "argv" in surfaces["tracker"]
    print(f"\n[secrets] adapter surfaces checked: {sorted(surfaces)}")
    assert not leaks(surfaces), leaks(surfaces)
