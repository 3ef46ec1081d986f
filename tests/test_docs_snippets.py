"""Every code block of ``docs/`` is run by a test, as the README's quick start is.

Each fenced block of ``docs/*.md`` is listed in :data:`CHECKS` by its page and first line,
with how it is checked:

* :class:`Exec`: a Python block runs as a script in an empty directory (after a prelude that
  defines what the page's text gives it, such as an ``app``), then code that uses it;
* :class:`Commands`: every ``tether`` (or ``python -m tether...``) command of a shell block
  runs; a ``tether run`` gets ``--dryrun`` unless it runs on ``local_cwd``, so no cluster or
  cloud account is needed and the scheduler still checks the app and its run options;
* :class:`Console`: a ``$ command`` transcript runs for real; the lines it shows must be
  what the command prints (handles aside);
* :class:`RunsIn`: another test runs the block (its test must exist);
* :class:`Setup`: the block prepares a machine (``make``, ``podman``, ``pytest``...): what
  would run it is named.

A new block without an entry fails :func:`test_every_docs_block_is_checked`, and an entry
whose block is gone fails too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
_BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block of a docs page."""

    page: str
    line: int
    lang: str
    body: str

    nth: int = 1

    @property
    def key(self) -> tuple[str, str]:
        """The page and the block's first line (`` #2`` added for a later block beginning
        with the same line)."""
        return self.page, self.first + (f" #{self.nth}" if self.nth > 1 else "")

    @property
    def first(self) -> str:
        return next(ln for ln in self.body.splitlines() if ln.strip()).strip()


def doc_blocks() -> list[Block]:
    """Every fenced block of ``docs/*.md``, in page order."""
    out: list[Block] = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        seen: dict[str, int] = {}
        for m in _BLOCK.finditer(text):
            block = Block(path.name, text[: m.start()].count("\n") + 1, m["lang"], m["body"])
            seen[block.first] = seen.get(block.first, 0) + 1
            out.append(Block(block.page, block.line, block.lang, block.body, seen[block.first]))
    return out


@dataclass(frozen=True)
class Exec:
    """Run the Python block (``prelude`` before it, ``after`` after it) as a script."""

    prelude: str = ""
    after: str = ""


@dataclass(frozen=True)
class Commands:
    """Run every tether command of the shell block (``xfail``: a known defect, strict)."""

    xfail: str = ""


@dataclass(frozen=True)
class Console:
    """Run the ``$`` commands of a transcript for real and compare what it shows."""


@dataclass(frozen=True)
class RunsIn:
    """Another test runs this block: ``path::test_name``."""

    test: str


@dataclass(frozen=True)
class Setup:
    """Commands that set a machine up; ``by`` says what runs them."""

    by: str


Check = Exec | Commands | Console | RunsIn | Setup

_APP = ("from tether.specs import AppDef, Role\n"
        "app = AppDef('train', roles=[Role('trainer', image='img', entrypoint='python')])\n")

_BASH_THEN_PYTHON = "import subprocess, sys\nsubprocess.run(['bash', '-euc', r'''"
"""A shell block run by bash, then Python code in the same shell (``_CHECK_...``)."""

_CHECK_CONNECTIONS = (
    "\n\"$0\" -c 'from tests.test_docs_snippets import check_airflow_connections as c; c()'"
    "\n''', sys.executable], check=True)\n"
)

CHECKS: dict[tuple[str, str], Check] = {
    ("airflow.md", "import datetime as dt"): RunsIn(
        "tests/adapters/airflow/test_airflow_newcomer.py::test_the_docs_example_runs_as_copied"),
    ("airflow.md", """export AIRFLOW_CONN_TRAINING_CLUSTER='{"conn_type": "tether_kubernetes","""):
        Exec(prelude=_BASH_THEN_PYTHON,
             after=_CHECK_CONNECTIONS),
    ("airflow.md", """export AIRFLOW_CONN_HPC='{"conn_type": "tether_slurm","""):
        Exec(prelude=_BASH_THEN_PYTHON,
             after=_CHECK_CONNECTIONS),
    ("airflow.md", "python -m tether.adapters.airflow.dryrun dags/tether_kubernetes_secrets.py"):
        Commands(),
    ("aws.md", "tether run -s aws_batch -cfg queue=gpu-queue,region=us-east-1 \\"): Commands(
        xfail="aws_batch refuses dist.ddp: 'port_map is not supported by aws_batch'"),
    ("aws.md", "tether run -s aws_sagemaker \\"): Commands(),
    ("components.md", "from tether.specs import AppDef, Role, resource"): Exec(
        after=textwrap.dedent("""
            import pathlib, subprocess, sys
            pathlib.Path('my_components.py').write_text(open(__file__).read().split('#END')[0])
            out = subprocess.run([sys.executable, '-m', 'tether.cli.main', 'run',
                                  'my_components.py:hello', '--who', 'you'],
                                 capture_output=True, text=True, check=True).stdout
            assert 'greeter/0 hello you' in out and 'greeter/1 hello you' in out, out
            """).replace("import pathlib", "#END\nimport pathlib", 1)),
    ("components.md", "from tether.runtime import process_group"): Exec(
        prelude="calls = []\ndef train():\n    calls.append(1)\n",
        after="import os\nos.environ.update(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0',\n"
              "                  MASTER_ADDR='127.0.0.1', MASTER_PORT='0')\n"
              "main()\nassert calls == [1]\n"),
    ("components.md", "from tether.runtime import report"): Exec(
        prelude="import os, tempfile\nos.environ['TETHER_OUTPUTS_URL'] = tempfile.mkdtemp()\n"
                "total, epoch = 3, 0\ndef train_step():\n    return 0.5\n",
        after="from tether.tracker.progress import read_progress\n"
              "assert read_progress(os.environ['TETHER_OUTPUTS_URL']).step == 3\n",
    ),
    ("components.md", '[project.entry-points."tether.components"]'): Exec(
        prelude="import tomllib\ntoml = tomllib.loads('''",
        after="''')\n"
              "from importlib.metadata import EntryPoint\n"
              "from tether.components.finder import registered_groups\n"
              "group = 'tether.components'\n"
              "eps = [EntryPoint(n, v, group) for n, v in\n"
              "       toml['project']['entry-points'][group].items()]\n"
              "assert registered_groups(eps) == {'team': 'my_pkg.components',\n"
              "                                  '_': 'tether.components'}\n"),
    ("configuration.md", "[kubernetes]"): Exec(
        prelude="import pathlib\npathlib.Path('.tetherconfig').write_text('''",
        after="''')\n"
              "import subprocess, sys\n"
              "out = subprocess.run([sys.executable, '-m', 'tether.cli.main', 'run', "
              "'--dryrun', '-s', 'kubernetes', 'dist.ddp', '--script', 'train.py'],\n"
              "                     capture_output=True, text=True, check=True).stdout\n"
              "assert 'namespace: ml' in out, out\n"),
    ("getting-started.md", "make demo                  # .venv + tether + CPU torch; runs a "
                           "2-rank DDP training locally"):
        Setup("tests/test_readme.py runs the README's set-up, the same commands"),
    ("getting-started.md", 'pip install -e ".[airflow,prefect,kfp,kubernetes]" -c '
                           "constraints/test.txt"):
        Setup("tests/test_readme.py installs tether into a new venv as the README says"),
    ("getting-started.md", '$ tether run utils.echo --msg "hello from tether"'): Console(),
    ("getting-started.md", "$ tether run utils.sh --num_replicas 2 'echo \"I am replica "
                           "$TETHER_REPLICA_ID\"'"): Console(),
    ("kfp.md", "from kfp import dsl, kubernetes"): Exec(
        prelude="import pathlib\npathlib.Path('my_project').mkdir()\n"
                "pathlib.Path('my_project/components.py').write_text('''\n"
                "from tether.specs import AppDef, Role\n"
                "def fit(lr: float = 0.1, epochs: int = 1, gpu: int = 0) -> AppDef:\n"
                "    \\\"\\\"\\\"Fits.\\n\\n    Args:\\n        lr: Rate.\\n        epochs: Epochs."
                "\\n        gpu: GPUs.\\n    \\\"\\\"\\\"\n"
                "    return AppDef('fit', roles=[Role('fit', image='img', entrypoint='python',"
                " args=['-c', 'pass'])])\n''')\n",
        after="from kfp import compiler\n"
              "compiler.Compiler().compile(pipeline, 'pipeline.yaml')\n"
              "assert 'HF_TOKEN' in open('pipeline.yaml').read()\n"),
    ("kfp.md", "LauncherFallbackWarning: KFP step 'workers' (...) runs in launcher mode, "
               "without the KFP"): RunsIn("tests/adapters/kfp/test_golden.py::"
                                          "test_typed_pipeline_golden"),
    ("kfp.md", "tether kfp dryrun examples/pipelines/kfp_train.py:train_pipeline   "
               "# one line per step"): Commands(),
    ("kfp.md", "from tether.adapters.kfp import KubernetesOptions, step"): Exec(
        prelude="import pathlib\npathlib.Path('my_project').mkdir()\n"
                "pathlib.Path('my_project/train.py').write_text('''\n"
                "from tether.specs import AppDef, Role\n"
                "def trainer(epochs: int = 1) -> AppDef:\n"
                "    return AppDef('train', roles=[Role('train', image='img', "
                "entrypoint='python', args=['-m', 'train', str(epochs)])])\n''')\n",
        after="from kfp import compiler, dsl\n"
              "import yaml\n"
              "@dsl.pipeline\n"
              "def pipeline(epochs: int = 2):\n"
              "    assert train.plan(epochs=epochs).mode == 'native'\n"
              "    train(epochs=epochs).outputs['tether_metrics']\n"
              "compiler.Compiler().compile(pipeline, 'pipeline.yaml')\n"
              "spec = next(yaml.safe_load_all(open('pipeline.yaml')))\n"
              "c = spec['deploymentSpec']['executors']['exec-trainer']['container']\n"
              "assert c['command'][0] == 'env' and c['command'][-1] == 'python', c\n"
              "assert c['args'] == ['-m', 'train', \"{{$.inputs.parameters['epochs']}}\"], c\n"),
    ("kfp.md", "from typing import Annotated"): Exec(
        prelude="from tether.specs import AppDef\nfrom tether.adapters.kfp import step\n",
        after="step(train)\n"),
    ("migrating-from-torchx.md", "# before                                   # after"): Exec(
        # a before/after table: every "after" import (the right column) works
        prelude="table = '''\n",
        after="'''\n"
              "import re\n"
              "for row in table.splitlines()[2:]:\n"
              "    after = re.split(r'\\s{2,}', row.strip())[1]\n"
              "    if '...' not in after:\n"
              "        exec(after)\n"
              "    else:\n"
              "        exec(after.split(' import ')[0].replace('from ', 'import '))\n"),
    ("prefect.md", "from prefect import flow"): Exec(
        after="assert pipeline.name == 'pipeline'\n"),
    ("prefect.md", "$ python examples/pipelines/prefect_resilient.py --workdir /tmp/res     "
                   "# 1 prepare + 5 evaluate jobs"): RunsIn(
        "tests/adapters/prefect/test_examples.py::"
        "test_resilient_example_caches_prepare_and_evaluates_concurrently"),
    ("prefect.md", "$ tether prefect reap -s kubernetes --dry-run"): RunsIn(
        "tests/adapters/prefect/test_reap_cli.py::"
        "test_tether_prefect_reap_runs_through_the_cli_plugin"),
    ("prefect.md", "from prefect import flow #2"): Exec(
        after="assert reap_orphans.name == 'tether-reap'\n"),
    ("prefect.md", "from tether.adapters.prefect.cache import JOB_INPUTS"): Exec(
        prelude="from datetime import timedelta\n"
                "from tether.adapters.prefect import component_task\n"),
    ("reliability.md", "from tether.errors import BackendError, TetherError"): Exec(
        # no Slurm on this machine's PATH: submitting fails, and the block says how
        prelude="from tether.runner import get_runner\nfrom tether.specs import AppDef, Role\n"
                "runner = get_runner()\n"
                "app = AppDef('t', roles=[Role('r', image='', entrypoint='true')])\n"
                "import contextlib, io\nout = io.StringIO()\n"
                "with contextlib.redirect_stdout(out):\n"
                "    exec(\'\'\'\n",
        after="\'\'\')\n"
              "assert out.getvalue().startswith(('slurm failed (', 'tether: ')), out.getvalue()\n"),
    ("airflow.md", """export AIRFLOW_CONN_HPC_SSH='{"conn_type": "tether_slurm", "host": """
                   '"login.hpc.example",'): RunsIn(
        "tests/adapters/airflow/test_airflow_slurm_remote.py::"
        "test_ssh_and_rest_connections_run_a_job_without_a_slurm_client"),
    ("prefect.md", "from tether.adapters.prefect.slurm import SlurmConnection"): RunsIn(
        "tests/adapters/prefect/test_slurm_connection.py::"
        "test_saved_block_and_env_settings_run_jobs_over_ssh_and_rest"),
    ("prefect.md", 'conn = SlurmConnection.load("hpc")'): RunsIn(
        "tests/adapters/prefect/test_slurm_connection.py::"
        "test_a_flow_runs_tether_jobs_over_ssh_and_rest_without_a_slurm_client"),
    ("scale.md", "subscribers (Runner.wait/watch/wait_any, a trigger, a task)     any number, "
                 "threads or asyncio"): Setup("a diagram of the watch hub, not code"),
    ("scale.md", "from tether.runner import get_runner"): Exec(),
    ("scale.md", "from tether.schedulers.watch import Subscription"): RunsIn(
        "tests/schedulers/watch/test_hub_local.py::"
        "test_subscribers_share_one_view_and_each_hears_the_end_once"),
    ("scale.md", "from tether.schedulers.watch import AsyncSubscription"): RunsIn(
        "tests/schedulers/watch/test_hub_local.py::test_async_subscribers_on_one_event_loop"),
    ("scale.md", "make e2e-infra                                       "
                 "# builds kube-apiserver once (cached)"):
        Setup("the benchmark and the e2e groups that run these tests"),
    ("slurm.md", "export TETHER_SLURM_TRANSPORT=ssh TETHER_SLURM_HOST=login.hpc.example "
                 "TETHER_SLURM_USER=alice"): RunsIn(
        "tests/e2e/test_slurm_ssh_e2e.py::"
        "test_cli_runs_over_ssh_and_a_later_call_finds_the_job_by_environment"),
    ("slurm.md", 'params = {"transport": "ssh", "host": "login.hpc.example", "user": "alice", '
                 '"port": 22,'): RunsIn(
        "tests/e2e/test_slurm_ssh_e2e.py::test_submit_describe_logs_list_over_ssh"),
    ("slurm.md", 'params = {"transport": "rest", "rest_url": "https://slurm.hpc.example:6820", '
                 '"user": "alice",'): RunsIn(
        "tests/e2e/test_slurm_rest_e2e.py::test_submit_describe_list_over_rest"),
    ("slurm.md", 'params = {"transport": "rest", '
                 '"rest_url": "https://slurm.hpc.example:6820",'): RunsIn(
        "tests/e2e/test_slurm_rest_e2e.py::"
        "test_logs_delete_through_the_mounted_shared_filesystem"),
    ("recovery.md", "AppStatus:"): RunsIn(
        "tests/e2e/test_slurm_failure_causes_e2e.py::test_node_set_down_mid_run_is_node_lost"),
    ("recovery.md", "handle = runner.run(app, \"kubernetes\", cfg)   # chain://tether/train-3f2a..."):
        RunsIn("tests/runner/test_recovery_runner.py::"
               "test_one_handle_recovers_through_run_and_wait"),
    ("recovery.md", 'handle = runner.run(app, ["kubernetes", "local_cwd"], {"namespace": '
                    '"team-a"})'): RunsIn(
        "tests/e2e/test_kubernetes_failure_causes_e2e.py::"
        "test_quota_refusal_fails_over_to_local_cwd"),
    ("recovery.md", "scheduler: the failover list kubernetes, local_cwd names schedulers that "
                    "cannot run app 'fit' (drop them from the list, or change the app):"): RunsIn(
        "tests/cli/test_recovery_cli.py::"
        "test_cli_dryrun_refuses_a_candidate_that_cannot_run_the_app"),
    ("recovery.md", "app = AppDef("): RunsIn(
        "tests/e2e/test_kubernetes_placement_e2e.py::"
        "test_an_unplaced_pod_fails_over_to_local_cwd_after_the_placement_timeout"),
    ("recovery.md", "async for ev in runner.awatch([handle]):   # chain://SESSION/APPNAME-DIGEST"):
        RunsIn("tests/runner/test_recovery_watch.py::"
               "test_awatch_follows_a_chain_into_its_next_attempt"),
    ("recovery.md", "import dataclasses"): Exec(
        after="from tether.specs import validate\nvalidate(app)\n"
              "assert app.checkpoint == '/shared/ckpt/train-7'\n"),
    ("recovery.md", "$ tether run -s local_cwd comp.py:train --ckpt /tmp/ckpt"): RunsIn(
        "tests/cli/test_recovery_cli.py::"
        "test_run_recovers_and_status_describe_show_the_attempts"),
    ("recovery.md", "$ tether run -s kubernetes -cfg namespace=team-a --log comp.py:train "
                    "--ckpt s3://bucket/runs/evicted-7"): RunsIn(
        "tests/e2e/test_kubernetes_recovery_e2e.py::"
        "test_tether_run_recovers_an_evicted_pod_as_the_next_attempt"),
    ("recovery.md", "from tether.specs import AppDef, RecoveryPolicy, Role"): Exec(
        after="from tether.specs import validate\nvalidate(app)\n"
              "assert app.recovery.max_recoveries == 5\n"),
    ("schedulers.md", "bash tests/e2e/infra/setup.d/10-kube.sh      "
                      "# etcd, kube-apiserver, kube-controller-manager"):
        Setup("make e2e-infra runs these set-up scripts"),
    ("schedulers.md", ".venv/bin/python -m tests.e2e.infra.kube_node"):
        Setup("tests/e2e/test_kubernetes_real.py starts this node through its fixture"),
    ("schedulers.md", "export KUBECONFIG=/tmp/tether-kube-XXXX/kubeconfig   "
                      "# the line the node printed"):
        RunsIn("tests/e2e/test_kubernetes_e2e.py::test_cli_runs_a_job_on_the_real_node_as_docs_show"),
    ("architecture.md", "cli/                    adapters/  airflow · prefect · kfp"):
        Setup("a diagram of the layers, not code (tests/test_layering.py checks the layers)"),
    ("architecture.md", "Runner ──holds──> SchedulerPool     one scheduler per name, built on "
                        "first use, closed together"): Setup("a diagram, not code"),
    ("architecture.md", "ComponentOperator ─┐   (Airflow task: per try, a session and a "
                        "TryLifecycle)"): Setup("a diagram, not code"),
    ("schedulers.md", "podman system service --time=0 unix:///tmp/podman.sock &   "
                      "# or a running Docker"): Commands(),
    ("schedulers.md", "tether run -s kubernetes --dryrun -cfg namespace=ml,context=gpu-cluster "
                      "utils.echo --msg hi"): Commands(),
    ("schedulers.md", "from tether.specs import Role"): Exec(
        after="from tether.runner import get_runner\n"
              "from tether.specs import AppDef\n"
              "info = get_runner().dryrun(AppDef('t', roles=[role]), 'kubernetes')\n"
              "text = str(info)\n"
              "assert 'hostIPC: true' in text and 'preStop' in text, text\n"),
    ("schedulers.md", "core/tether/schedulers/<backend>/"): Exec(
        # the layout the page describes is the one the backends have
        prelude="tree = '''\n",
        after="'''\n"
              f"import pathlib\nroot = pathlib.Path({str(REPO)!r}) / 'core/tether/schedulers'\n"
              "files = [ln.split()[0] for ln in tree.splitlines()[1:]]\n"
              "files = [f for f in files if f.endswith('.py') and f != 'client.py']\n"
              "for backend in ('slurm', 'kubernetes', 'lsf', 'aws_batch'):\n"
              "    missing = [f for f in files if not (root / backend / f).is_file()]\n"
              "    assert not missing, (backend, missing)\n"),
    ("schedulers.md", "TETHER_REGEN_GOLDEN=1 pytest tests/schedulers/test_<backend>_render.py"):
        Setup("a developer's command; the golden tests themselves run in the unit group"),
    ("schedulers.md", "class SlurmHarness(BackendHarness):"): Exec(
        prelude="import sys\nfrom tests.schedulers.contract.harness import BackendHarness\n",
        after="assert SlurmHarness.name == 'slurm'\n"),
    ("schedulers.md", "pytest tests/schedulers/contract                   "
                      "# every built-in backend that runs here"):
        Setup("the contract suite itself (the 'unit' and backend test groups run it)"),
    ("schedulers.md", "cd tether-checkout"):
        Setup("a plugin's own checkout (tests/schedulers/contract/plugin.py adds "
              "--tether-harness)"),
    ("schedulers.md", "pytest tests/e2e/matrix"): Setup("the e2e test group runs the matrix"),
    ("slurm.md", "tether run -s slurm -cfg partition=gpu,time=02:00:00,"
                 "job_dir=/shared/$USER/jobs \\"): Commands(),
    ("slurm.md", "from tether.specs.overlays import DEL, set_overlay"): Exec(
        prelude=_APP,
        after="from tether.runner import get_runner\n"
              "text = str(get_runner().dryrun(app, 'slurm'))\n"
              "assert '#SBATCH --reservation=maint' in text, text\n"),
    ("slurm.md", "tests/e2e/infra/setup.d/30-slurm.sh            "
                 "# apt-get install slurm-wlm munge (once)"):
        Setup("tests/e2e/infra starts this Slurm cluster for the slurm test group"),
    ("tether-image.md", "make image                                  "
                        "# tags tether's default image name"):
        Setup("tests/e2e/test_tether_image.py builds the image as `make image` does"),
    ("tether-image.md", "make image IMAGE=registry.example.com/ml/tether:0.1.0"):
        Setup("tests/e2e/test_tether_image.py builds the image; pushing needs a registry"),
}


def check_airflow_connections() -> None:
    """The ``AIRFLOW_CONN_*`` a docs block exported give the tether settings the page says."""
    import json

    from tether.adapters.airflow.connections import cfg_from_connection, params_from_connection

    conns = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW_CONN_")}
    assert conns
    for name, value in conns.items():
        conn = json.loads(value)
        params = params_from_connection(name, conn["conn_type"], conn["extra"])
        cfg = cfg_from_connection(conn["conn_type"], conn["extra"])
        assert params and (params.get("kubeconfig") or params.get("slurm_conf")), params
        assert cfg or conn["conn_type"] == "tether_kubernetes", cfg


def test_every_docs_block_is_checked() -> None:
    blocks = {b.key: b for b in doc_blocks()}
    unchecked = [f"{b.page}:{b.line}: {b.key[1]!r}" for k, b in blocks.items() if k not in CHECKS]
    assert not unchecked, (
        "docs blocks no test runs; add each to CHECKS in tests/test_docs_snippets.py:\n"
        + "\n".join(unchecked))
    stale = [k for k in CHECKS if k not in blocks]
    assert not stale, f"CHECKS entries whose block is gone: {stale}"


def _blocks_of(kind: type) -> list[Block]:
    return [b for b in doc_blocks() if isinstance(CHECKS.get(b.key), kind)]


def _ids(blocks: list[Block]) -> list[str]:
    return [f"{b.page}:{b.line}" for b in blocks]


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "empty.tetherconfig").write_text("")
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "core"), str(REPO / "adapters")]),
        TETHERCONFIG=str(tmp_path / "empty.tetherconfig"),
        HOME=str(tmp_path),
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    )
    for var in ("KUBECONFIG", "SLURM_CONF", "AWS_PROFILE"):
        env.pop(var, None)
    return env


@pytest.mark.parametrize("block", _blocks_of(Exec), ids=_ids(_blocks_of(Exec)))
def test_python_blocks_run(block: Block, tmp_path: Path) -> None:
    check = CHECKS[block.key]
    assert isinstance(check, Exec)
    work = tmp_path / "work"
    work.mkdir()
    script = work / "snippet.py"
    script.write_text(check.prelude + block.body + check.after)
    env = _env(tmp_path)
    env["TETHERCONFIG"] = str(work / ".tetherconfig") if block.page == "configuration.md" \
        else env["TETHERCONFIG"]
    # not as __main__: a block's `if __name__ == "__main__":` part (a server) is not run
    run = f"import runpy; runpy.run_path({str(script)!r}, run_name='docs_snippet')"
    proc = subprocess.run([sys.executable, "-c", run], cwd=work, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, f"{block.page}:{block.line}\n{proc.stdout}\n{proc.stderr}"


def _commands(body: str) -> list[list[str]]:
    """The tether commands of a shell block (continuation lines joined, comments dropped)."""
    joined = body.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("$ "):
            line = line[2:]
        argv = shlex.split(line) if line else []
        if argv[:1] == ["tether"] or argv[:3] == ["python", "-m", "tether.adapters.airflow.dryrun"]:
            out.append(argv)
    return out


def _runnable(argv: list[str]) -> list[str]:
    """The argv to run: ``python -m ...``; ``tether run`` off local_cwd gets ``--dryrun``."""
    if argv[0] == "tether":
        argv = ["-m", "tether.cli.main", *argv[1:]]
        if argv[2] == "run" and "--dryrun" not in argv and "-s" in argv:
            own = argv[3:_component_index(argv, 3)]
            rest = argv[3 + len(own):]
            argv = [*argv[:3], "--dryrun", *(a for a in own if a not in ("--log", "--wait")),
                    *rest]
    else:
        argv = argv[1:]
    return [sys.executable, *argv]


def _component_index(argv: list[str], start: int) -> int:
    """Where the component is in a ``tether run`` argv (run's own options come before)."""
    takes_value = {"-s", "--scheduler", "-cfg", "--cfg", "--scheduler_args", "--workspace",
                   "--parent_run_id", "--job_key"}
    i = start
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in takes_value else 1
    return i


@pytest.mark.parametrize("block", _blocks_of(Commands), ids=_ids(_blocks_of(Commands)))
def test_shell_blocks_tether_commands_run(block: Block, tmp_path: Path) -> None:
    check = CHECKS[block.key]
    assert isinstance(check, Commands)
    commands = _commands(block.body)
    assert commands, f"{block.page}:{block.line} has no tether command"
    env = _env(tmp_path)
    env.setdefault("USER", "user")
    failures = []
    for argv in commands:
        argv = [os.path.expandvars(a) if "$USER" in a else a for a in argv]
        proc = subprocess.run(_runnable(argv), cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=240, check=False)
        if proc.returncode != 0:
            failures.append(f"{shlex.join(argv)}\n{proc.stderr[-2000:]}")
    if check.xfail:
        if failures:
            pytest.xfail(check.xfail)
        pytest.fail(f"fixed? {check.xfail!r} no longer happens: drop the xfail")
    assert not failures, "\n\n".join(failures)


_HANDLE = re.compile(r"\b(\w+)://(\w+)/([\w-]+)-\w+\b")


@pytest.mark.parametrize("block", _blocks_of(Console), ids=_ids(_blocks_of(Console)))
def test_console_transcripts_show_what_the_commands_print(block: Block, tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["TETHER_STATE_DIR"] = str(tmp_path / "state")
    shown: list[str] = []
    printed: list[str] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            proc = subprocess.run(["bash", "-c", line[2:]], cwd=tmp_path, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=240, check=False)
            assert proc.returncode == 0, proc.stdout
            printed += proc.stdout.splitlines()
        elif line.strip():
            shown.append(line)
    # handles differ run to run: compare them by scheduler, session and app name
    norm = {_HANDLE.sub(r"\1://\2/\3-ID", ln) for ln in printed}
    missing = [ln for ln in shown if _HANDLE.sub(r"\1://\2/\3-ID", ln) not in norm]
    assert not missing, f"shown but not printed: {missing}\nprinted:\n" + "\n".join(printed)


@pytest.mark.parametrize("block", _blocks_of(RunsIn), ids=_ids(_blocks_of(RunsIn)))
def test_blocks_run_elsewhere_name_a_test_that_exists(block: Block) -> None:
    check = CHECKS[block.key]
    assert isinstance(check, RunsIn)
    path, _, name = check.test.partition("::")
    source = (REPO / path).read_text()
    assert re.search(rf"^def {re.escape(name)}\(", source, re.M), check.test
