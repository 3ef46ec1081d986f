"""The README's quick start, taken from the README text itself and run in a fresh environment.

Blocks under a ``<!-- readme-test: NAME -->`` line are the commands a newcomer types; the
end-to-end test runs them in order, with bash, in a copy of the repository whose ``.venv`` is
new. To stay fast (and offline) that venv reuses the packages already installed for the tests
through a ``.pth`` line instead of downloading them again; everything the README installs
(tether itself, editable) goes into the new venv as written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_BLOCK = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\s*```bash\n(?P<body>.*?)```", re.S)


def readme_blocks(text: str) -> dict[str, str]:
    """The README's tested command blocks, by name, in order."""
    return {m["name"]: m["body"] for m in _BLOCK.finditer(text)}


def test_the_readme_marks_its_quick_start() -> None:
    blocks = readme_blocks(README.read_text())
    assert list(blocks) == ["setup", "tour"]
    assert "make demo" in blocks["setup"]
    tour = blocks["tour"]
    for step in ("tether run", "airflow dags test", "prefect_train.py",
                 "tether.adapters.kfp.compile"):
        assert step in tour, step


def _copy_checkout(dst: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


_NOT_REUSED = ("tether-", "tether_", "__editable__")
"""tether itself (the README installs it) and a stale fixture install are not reused."""

_SCRIPT = """#!{python}
import importlib, sys
target = importlib.import_module({module!r})
for attr in {attrs!r}:
    target = getattr(target, attr)
sys.exit(target())
"""


def _fresh_venv(venv: Path, reused: Path) -> None:
    """A new venv that sees the packages installed here, as if pip had just installed them.

    ``reused`` gets links to this interpreter's installed packages (but tether's own); a
    ``.pth`` line puts it on the new venv's path. Being outside the venv, pip leaves it alone
    (it never uninstalls outside its environment). The console scripts of those packages
    (``airflow``...) are written into the venv's ``bin``, as pip would have.
    """
    import importlib.metadata

    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    reused.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(_NOT_REUSED) and entry.suffix != ".pth":
            (reused / entry.name).symlink_to(entry)
    purelib = Path(
        sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
    )
    (purelib / "zz_reused_packages.pth").write_text(f"{reused}\n")
    for dist in importlib.metadata.distributions(path=[str(reused)]):
        for ep in dist.entry_points.select(group="console_scripts"):
            script = venv / "bin" / ep.name
            if not script.exists():
                module, _, attrs = ep.value.partition(":")
                script.write_text(_SCRIPT.format(
                    python=venv / "bin" / "python", module=module.strip(),
                    attrs=[a for a in attrs.strip().split(".") if a],
                ))
                script.chmod(0o755)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_readme_quick_start_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text())
    work = tmp_path / "tether"
    _copy_checkout(work)
    _fresh_venv(work / ".venv", tmp_path / "reused-packages")
    (tmp_path / "empty.tetherconfig").write_text("")
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith(("AIRFLOW", "PREFECT"))
    }
    env.update(
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin),
        TETHERCONFIG=str(tmp_path / "empty.tetherconfig"),
        TETHER_STATE_DIR=str(tmp_path / "state"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # the tour's flow starts Prefect's temporary server, which gives itself 20 s by
        # default; a CI machine running every test group at once can need more
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
    )
    outputs: dict[str, str] = {}
    for name, body in blocks.items():
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500,
            check=False,
        )
        outputs[name] = proc.stdout
        assert proc.returncode == 0, f"README block {name!r} failed:\n{proc.stdout[-6000:]}"

    assert "rank 0: done" in outputs["setup"] and " SUCCEEDED" in outputs["setup"]
    tour = outputs["tour"]
    assert "hello from tether" in tour.splitlines()
    assert "sh/0 I am replica 0" in tour and "sh/1 I am replica 1" in tour
    assert "state=success" in tour  # the Airflow DAG run
    assert re.search(r"^mse \d", tour, re.M)  # the Prefect flow's result
    assert (work / "build" / "kfp_train.yaml").read_text().startswith("# PIPELINE DEFINITION")
