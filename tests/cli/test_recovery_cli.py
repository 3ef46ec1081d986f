"""``tether run``/``status``/``describe``/``log`` on an app with a recovery policy: one
logical handle over its attempts (real ``local_cwd`` jobs); ``-s`` with a failover list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.cli.conftest import Result

COMPONENT = '''
import sys
from tether.specs import AppDef, RecoveryPolicy, Role

REPLICA = """
import os, sys
attempt = int(os.environ["TETHER_ATTEMPT"])
print(f"hello from attempt {attempt}", flush=True)
sys.exit(0 if attempt >= 1 else 3)
"""


def train(ckpt: str) -> AppDef:
    """A job that fails its first attempt."""
    role = Role("train", image=".", entrypoint=sys.executable, args=["-c", REPLICA])
    return AppDef("rec", roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(on=["application"], max_recoveries=2, backoff_s=0))
'''


def test_run_recovers_and_status_describe_show_the_attempts(
    tether: Callable[..., Result], project: Path
) -> None:
    (project / "comp.py").write_text(COMPONENT)
    res = tether("run", "-s", "local_cwd", "comp.py:train", "--ckpt", str(project / "ckpt"))
    assert res.code == 0, res.err
    handle, *logs, final = res.out.splitlines()
    assert handle.startswith("chain://tether/rec-") and final == f"{handle} SUCCEEDED"
    assert logs == ["[tether] attempt 0 on local_cwd", "hello from attempt 0",
                    "[tether] attempt 1 on local_cwd", "hello from attempt 1"]  # fmt: skip
    status = tether("status", handle)
    assert status.code == 0
    assert "State: SUCCEEDED" in status.out
    assert ("attempt 1 on local_cwd (earlier: attempt 0 on local_cwd: FAILED (application))"
            in status.out)  # fmt: skip
    described = tether("describe", handle)
    assert described.code == 0, described.err
    lines = described.out.splitlines()
    attempts = lines[lines.index("Attempts:") + 1:]
    assert [a.split()[:2] + a.split()[3:] for a in attempts] == [
        ["0:", "local_cwd", "FAILED", "(application)"], ["1:", "local_cwd", "SUCCEEDED"],
    ]  # fmt: skip
    assert all(a.split()[2].startswith("local_cwd://tether/") for a in attempts)
    assert tether("log", handle).out.splitlines() == [f"train/0 {line}" for line in logs]


def test_cli_dryrun_shows_every_candidates_request(
    tether: Callable[..., Result]
) -> None:
    """``-s local_cwd,kubernetes``: each candidate's request, with the options it declares;
    an option none declares, or no scheduler at all, is refused."""
    res = tether("run", "--dryrun", "-s", "local_cwd,kubernetes", "-cfg", "namespace=ml",
                 "utils.echo", "--msg", "hi")  # fmt: skip
    assert res.code == 0, res.err
    out = res.out
    local = out.index("=== SCHEDULER REQUEST (local_cwd) ===")
    kube = out.index("=== SCHEDULER REQUEST (kubernetes) ===")
    assert local < kube and "namespace: ml" in out[kube:]
    bad = tether("run", "--dryrun", "-s", "local_cwd,kubernetes", "-cfg", "nope=1",
                 "utils.echo", "--msg", "hi")  # fmt: skip
    assert bad.code != 0 and "run option 'nope' is not an option of any" in bad.err
    empty = tether("run", "-s", ",", "utils.echo", "--msg", "hi")
    assert empty.code != 0 and "names no scheduler" in empty.err


MOUNTING = '''
import sys
from tether.specs import AppDef, Role, VolumeMount


def fit() -> AppDef:
    """A job that needs a volume."""
    role = Role("fit", image="img", entrypoint=sys.executable, args=["-c", "print(1)"],
                mounts=[VolumeMount(src="data", dst_path="/data")])
    return AppDef("fit", roles=[role])
'''


def test_cli_dryrun_refuses_a_candidate_that_cannot_run_the_app(
    tether: Callable[..., Result], project: Path
) -> None:
    """``-s kubernetes,local_cwd`` for an app with a volume: local_cwd has no volumes, so
    the dry-run (and the run) fail before anything, naming the field, the scheduler and the
    capability; ``-s kubernetes`` alone renders it."""
    (project / "comp.py").write_text(MOUNTING)
    for mode in (["--dryrun"], []):
        res = tether("run", *mode, "-s", "kubernetes,local_cwd", "-cfg", "namespace=ml",
                     "comp.py:fit")  # fmt: skip
        assert res.code != 0 and "Traceback" not in res.err
        assert "scheduler: the failover list kubernetes, local_cwd names schedulers that " \
               "cannot run app 'fit'" in res.err, res.err  # fmt: skip
        assert "local_cwd lacks the capability `mounts`: role 'fit': mounts has a volume " \
               "mount" in res.err  # fmt: skip
    alone = tether("run", "--dryrun", "-s", "kubernetes", "-cfg", "namespace=ml", "comp.py:fit")
    assert alone.code == 0, alone.err
