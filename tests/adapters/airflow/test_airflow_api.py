"""The adapter's API at DAG-parse time: provider metadata, links, the factory, validation."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from airflow.sdk import DAG, XComArg

from tether.adapters.airflow import (
    ComponentOperator,
    TetherJobLink,
    component_chain,
    operator_for,
    output_of,
    step,
    task_job_key,
)
from tether.adapters.airflow.dryrun import render_dag, render_operator
from tether.adapters.airflow.provider import get_provider_info
from tether.components.utils import echo, sh
from tether.specs import AppDef, Role

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def trainer(lr: float, epochs: int = 2, *extra: str) -> AppDef:
    """A tiny component for the factory tests.

    Args:
        lr: Learning rate.
        epochs: Epochs.
        extra: More arguments.

    Returns:
        The AppDef.
    """
    return AppDef("trainer", [Role("trainer", image="img", entrypoint="echo",
                                   args=[f"--lr={lr}", f"--epochs={epochs}", *extra])])


# ---- provider and link -------------------------------------------------------------------
def test_provider_info_matches_airflows_schema_and_is_discovered() -> None:
    import airflow
    import jsonschema
    from airflow.providers_manager import ProvidersManager

    schema_path = Path(str(airflow.__file__)).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))

    pm = ProvidersManager()
    assert pm.providers["tether"].data["name"] == "Tether"
    assert "tether.adapters.airflow.links.TetherJobLink" in pm.extra_links_class_names
    triggers = [t.trigger_class_name for t in pm.trigger if t.package_name == "tether"]
    assert triggers == ["tether.adapters.airflow.trigger"]


def test_job_link_points_at_the_jobs_ui_and_is_serialized() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("tether_t_link", schedule=None, start_date=START) as dag:
        op = ComponentOperator(task_id="t", component="utils.echo")
    link = TetherJobLink()
    assert link.get_link(op, ti_key=None) == ""  # type: ignore[arg-type]
    op.job_ui_url = "https://ray.example/#/jobs/raysubmit_1"
    assert link.get_link(op, ti_key=None) == "https://ray.example/#/jobs/raysubmit_1"  # type: ignore[arg-type]
    task = DagSerialization.serialize_dag(dag)["tasks"][0]
    assert json.dumps(task).count("Tether Job") >= 1


# ---- validation at parse time --------------------------------------------------------------
def test_bad_arguments_fail_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="component is empty"):
        ComponentOperator(task_id="a", component=" ")
    with pytest.raises(TypeError, match="component must be a name"):
        ComponentOperator(task_id="b", component=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wait_interval must be a positive"):
        ComponentOperator(task_id="c", component="utils.echo", wait_interval=0)


def test_job_key_is_distinct_per_task_instance_and_try() -> None:
    key = task_job_key("dag", "run1", "train", -1, 1)
    assert key == task_job_key("dag", "run1", "train", None, 1)
    assert key.startswith("airflow-")
    others = {task_job_key("dag", "run2", "train", -1, 1),
              task_job_key("dag", "run1", "eval", -1, 1),
              task_job_key("dag", "run1", "train", 0, 1),
              task_job_key("dag2", "run1", "train", -1, 1),
              task_job_key("dag", "run1", "train", -1, 2)}  # each try's job has its own key
    assert key not in others and len(others) == 5


# ---- factory -----------------------------------------------------------------------------
def test_operator_for_makes_typed_taskflow_tasks() -> None:
    train = operator_for(trainer, scheduler="local_cwd", retries=3)
    with DAG("tether_t_factory", schedule=None, start_date=START) as dag:
        out = train(0.1, 5, "--fast")
        again = train.override(task_id="big", scheduler="kubernetes")(lr=0.01)
    assert isinstance(out, XComArg)
    ops = {t.task_id: t for t in dag.tasks}
    assert set(ops) == {"trainer", "big"}
    first = ops["trainer"]
    assert isinstance(first, ComponentOperator)
    assert first.component_ref is trainer
    assert first.component_args == {"lr": 0.1, "epochs": 5, "extra": ["--fast"]}
    assert first.retries == 3 and first.scheduler == "local_cwd"
    assert cast(Any, ops["big"]).scheduler == "kubernetes"
    assert again.operator is ops["big"]
    # the component is materialized from those arguments when the task runs
    assert first.build_app().roles[0].args == ["--lr=0.1", "--epochs=5", "--fast"]

    with pytest.raises(TypeError, match="unexpected keyword argument 'learning_rate'"):
        train(learning_rate=0.1)  # type: ignore[call-arg]


def test_operator_for_task_ids_are_made_unique_and_class_form_works() -> None:
    train = operator_for(trainer)
    with DAG("tether_t_factory2", schedule=None, start_date=START) as dag:
        train(lr=0.1)
        train(lr=0.2)
        cls: Any = train.operator_class
        cls(task_id="classic", component_args={"lr": 0.3})
    assert sorted(t.task_id for t in dag.tasks) == ["classic", "trainer", "trainer__1"]
    assert issubclass(cls, ComponentOperator) and cls.__name__ == "TrainerOperator"
    assert cast(Any, dag.task_dict["classic"]).component_ref is trainer


def test_expand_maps_over_the_cross_product_of_literal_values() -> None:
    train = operator_for(trainer)
    with DAG("tether_t_expand", schedule=None, start_date=START) as dag:
        train.expand(lr=[0.1, 0.01], epochs=[1, 2], fixed={"extra": ["--x"]})
    mapped: Any = dag.task_dict["trainer"]
    values = mapped.expand_input.value["component_args"]
    assert values == [
        {"extra": ["--x"], "lr": 0.1, "epochs": 1}, {"extra": ["--x"], "lr": 0.1, "epochs": 2},
        {"extra": ["--x"], "lr": 0.01, "epochs": 1}, {"extra": ["--x"], "lr": 0.01, "epochs": 2},
    ]
    with pytest.raises(TypeError, match="needs a list of values"):
        train.expand(lr=0.1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        train.expand(momentum=[0.9])


def test_component_chain_builds_a_branch_with_shared_defaults() -> None:
    with DAG("tether_t_chain", schedule=None, start_date=START) as dag:
        ops = component_chain(
            step("prepare", "utils.echo", {"msg": "prep"}),
            [step("train_a", trainer, {"lr": 0.1}),
             step("train_b", trainer, {"lr": 0.2}, scheduler="kubernetes")],
            step("evaluate", "utils.sh", ["echo", output_of("train_a", "loss")]),
            scheduler="local_cwd",
            retries=2,
        )
    assert [o.task_id for o in ops] == ["prepare", "train_a", "train_b", "evaluate"]
    assert dag.task_dict["train_a"].upstream_task_ids == {"prepare"}
    assert dag.task_dict["evaluate"].upstream_task_ids == {"train_a", "train_b"}
    assert [o.scheduler for o in ops] == ["local_cwd", "local_cwd", "kubernetes", "local_cwd"]
    assert {o.retries for o in ops} == {2}
    assert ops[3].component_args == [
        "echo", "{{ ti.xcom_pull(task_ids='train_a', key='loss') }}"
    ]
    with pytest.raises(TypeError, match="expected step"):
        component_chain("utils.echo")  # type: ignore[arg-type]


def test_component_functions_can_be_passed_directly() -> None:
    with DAG("tether_t_fn", schedule=None, start_date=START):
        op = ComponentOperator(task_id="t", component=sh, component_args=["echo", "hi"])
        op2 = ComponentOperator(task_id="u", component=echo, component_args="--msg 'two words'")
    assert op.build_app().roles[0].args == ["-c", "echo hi"]
    assert op2.build_app().roles[0].args[-1] == "two words"


# ---- dry-run -----------------------------------------------------------------------------
def test_operator_dryrun_renders_templates_and_masks_secrets() -> None:
    with DAG("tether_t_dry", schedule=None, start_date=START, params={"n": 3}) as dag:
        op = ComponentOperator(
            task_id="t", component="utils.sh",
            component_args={"args": ["echo {{ ds }}"], "num_replicas": "{{ params.n }}"},
            env={"API_TOKEN": "s3cr3t-value", "MODE": "{{ params.n }}"},
            cfg="log_dir=/tmp/tether-dryrun-logs",
        )
    text = render_operator(op, params={"n": 2}, logical_date=dt.datetime(2024, 3, 4))
    assert '"num_replicas": "2"' in text and "echo 2024-03-04" in text
    assert "s3cr3t-value" not in text  # secret-looking env values are masked in both layers
    assert '"MODE": "2"' in text
    assert "# local_cwd request (scheduler layer)" in text
    assert "/tmp/tether-dryrun-logs" in text
    assert dag.task_dict["t"] is op


def test_importing_the_adapter_loads_no_scheduler_backend() -> None:
    code = (
        "import sys, tether.adapters.airflow\n"
        "bad = [m for m in sys.modules if m.startswith(('tether.schedulers.local', "
        "'tether.schedulers.kubernetes', 'kubernetes', 'boto3', 'torch', "
        "'tether.adapters.airflow.trigger', 'airflow.triggers'))]\n"
        "print(bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == "[]"


def test_the_parse_benchmark_builds_and_serializes_200_task_dags(tmp_path: Path) -> None:
    # How fast it parses is measured by `make bench` (benchmarks/), never asserted here.
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "scripts" / "adapter_airflow.py"
    proc = subprocess.run([sys.executable, str(script), "--n", "200", "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tasks"] == {"tether": 200, "native": 200}, result
    assert result["tether"] > 0 and result["native"] > 0


def test_dryrun_of_mapped_tasks() -> None:
    from airflow_testlib import get_dag

    text = render_dag(get_dag("tether_t_factory"), ["fan_out"])
    # literal mapping: one section per map index, each with its own request
    assert text.count("# Airflow task 'fan_out' (operator layer)") == 2
    assert '"n": 2' in text and '"n": 4' in text
    assert text.count("# local_cwd request (scheduler layer)") == 2
    # an argument from an upstream output is shown as such
    again = render_dag(get_dag("tether_t_factory"), ["count_again"])
    assert "<xcom count_to.total>" in again


def test_dryrun_shows_variables_connections_and_xcoms_as_placeholders() -> None:
    with DAG("tether_t_dry_tpl", schedule=None, start_date=START):
        op = ComponentOperator(
            task_id="t", component="utils.sh",
            component_args=["echo {{ var.value.bucket }} {{ conn.warehouse.host }} "
                            "{{ var.json.settings['mode'] }} "
                            "{{ ti.xcom_pull(task_ids='prep', key='path') }}"],
            scheduler="kubernetes",
            cfg={"namespace": "ml"},
            image="busybox:1.36",
            env={"HOST": "{{ conn.warehouse.host }}"},
            secret_env={"DB_PASSWORD": "{{ conn.warehouse.password }}"},
            conn_id="training_cluster",
        )
    text = render_operator(op)
    assert "<var.value.bucket>" in text and "<conn.warehouse.host>" in text
    assert "<var.json.settings.mode>" in text and "<xcom prep.path>" in text
    # secret_env is never rendered: the operator layer masks it, the request only refers to it
    assert '"DB_PASSWORD": "****"' in text and "conn.warehouse.password" not in text
    assert "secretKeyRef" in text and "key: DB_PASSWORD" in text
    assert '"conn_id": "training_cluster"' in text


def test_dryrun_of_a_failover_list_shows_every_candidates_request() -> None:
    """Each candidate's request, with the options it declares (``namespace``: kubernetes's
    only; ``log_dir``: local_cwd's only)."""
    with DAG("tether_t_dry_failover", schedule=None, start_date=START):
        op = ComponentOperator(task_id="t", component="utils.sh", component_args=["echo hi"],
                               scheduler=["kubernetes", "local_cwd"],
                               cfg="namespace=ml,log_dir=/tmp/tether-dryrun-fo")
    text = render_operator(op)
    kube, local = text.split("# kubernetes request (scheduler layer)")[1].split(
        "# local_cwd request (scheduler layer)")
    assert "namespace: ml" in kube and "/tmp/tether-dryrun-fo" not in kube
    assert "/tmp/tether-dryrun-fo" in local and "cannot render" not in text


def test_dryrun_shows_what_it_cannot_render_instead_of_failing() -> None:
    with DAG("tether_t_dry_bad", schedule=None, start_date=START):
        op = ComponentOperator(task_id="t", component="utils.sh",
                               component_args=["echo {{ undefined_thing.attr }}"])
    text = render_operator(op)
    assert "<cannot render component_args: UndefinedError" in text


def test_bad_operator_choices_name_field_value_and_options() -> None:
    from tether.adapters.airflow.attempts import AirflowAdapterError

    with DAG("tether_t_bad_choice", schedule=None, start_date=START), \
            pytest.raises(AirflowAdapterError) as e:
        ComponentOperator(task_id="t", component="utils.sh", on_finish_action="delete_sucess")
    msg = str(e.value)
    assert "on_finish_action='delete_sucess'" in msg
    assert "'keep', 'delete_succeeded', 'delete'" in msg
    assert "did you mean 'delete_succeeded'" in msg


def test_the_provider_entry_point_imports_no_tether_internals() -> None:
    code = (
        "import sys\n"
        "from tether.adapters.airflow.provider import get_provider_info\n"
        "get_provider_info()\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == str(
        ["tether", "tether.adapters", "tether.adapters.airflow",
         "tether.adapters.airflow.provider"])


def test_connections_give_the_runner_its_cluster(tmp_path: Path) -> None:
    from tether.adapters.airflow.attempts import AirflowAdapterError
    from tether.adapters.airflow.connections import params_from_connection

    assert params_from_connection("c", "tether_local", {}) == {}
    assert params_from_connection(
        "c", "tether_kubernetes", {"kubeconfig": "/k.yaml", "context": "gpu", "namespace": "ml"}
    ) == {"kubeconfig": "/k.yaml", "context": "gpu", "namespace": "ml"}
    # the Kubernetes provider's connection extras work too
    assert params_from_connection(
        "c", "kubernetes", {"kube_config_path": "/k.yaml", "cluster_context": "a"}
    ) == {"kubeconfig": "/k.yaml", "context": "a"}
    assert params_from_connection("c", "tether_kubernetes", {"in_cluster": True}) == {}
    inline = params_from_connection("c", "tether_kubernetes", {"kube_config": "apiVersion: v1"})
    path = Path(inline["kubeconfig"])
    assert path.read_text() == "apiVersion: v1" and (path.stat().st_mode & 0o777) == 0o600
    with pytest.raises(AirflowAdapterError) as e:
        params_from_connection("pg", "postgres", {})
    assert "conn_id 'pg' has type 'postgres'" in str(e.value)
    assert "'tether_kubernetes', 'tether_slurm', 'tether_local'" in str(e.value)


def test_slurm_connection_picks_the_cluster_and_default_partition() -> None:
    from tether.adapters.airflow.connections import (
        cfg_from_connection,
        merge_run_defaults,
        params_from_connection,
    )
    from tether.runner import get_runner

    extra = {"slurm_conf": "/etc/slurm/gpu.conf", "partition": "gpu"}
    for host in (None, "", "local", "localhost"):
        assert params_from_connection("s", "tether_slurm", extra, host) == {
            "slurm_conf": "/etc/slurm/gpu.conf"}
    assert params_from_connection("s", "tether_slurm", {}) == {}
    assert cfg_from_connection("tether_slurm", extra) == {"partition": "gpu"}
    assert cfg_from_connection("tether_kubernetes", extra) == {}
    # another host: the ssh transport (as Airflow's SSH connection); the conf is the cluster's
    assert params_from_connection("s", "tether_slurm", extra, "login.hpc.example") == {
        "transport": "ssh", "host": "login.hpc.example", "slurm_conf": "/etc/slurm/gpu.conf"}

    with get_runner(**params_from_connection("s", "tether_slurm", extra)) as runner:
        opts = runner.scheduler_run_opts("slurm")
        cfg: dict[str, Any] = {}
        merge_run_defaults(cfg, opts, {"partition": "gpu"})
        assert cfg == {"partition": "gpu"}
        own: dict[str, Any] = {"partition": "debug"}  # the task's own cfg wins
        merge_run_defaults(own, opts, {"partition": "gpu"})
        assert own == {"partition": "debug"}
        local: dict[str, Any] = {}  # a scheduler without the option gets nothing
        merge_run_defaults(local, runner.scheduler_run_opts("local_cwd"), {"partition": "gpu"})
        assert local == {}


def test_slurm_connection_ssh_and_rest_forms_keep_secrets_out_of_files_and_text() -> None:
    from tether.adapters.airflow.attempts import AirflowAdapterError
    from tether.adapters.airflow.connections import ConnectionFields, params_from_connection

    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"
    ssh = params_from_connection(
        "s", "tether_slurm",
        {"private_key": key, "host_key": "ssh-ed25519 AAAAC3", "jump_host": "bastion"},
        fields=ConnectionFields(host="login", port=2222, login="alice"),
    )  # fmt: skip
    key_file, known = Path(ssh.pop("identity_file")), Path(ssh.pop("known_hosts"))
    assert ssh == {"transport": "ssh", "host": "login", "port": 2222, "user": "alice",
                   "jump_host": "bastion"}  # fmt: skip
    assert key_file.read_text() == key + "\n" and (key_file.stat().st_mode & 0o777) == 0o600
    assert known.read_text() == "[login]:2222 ssh-ed25519 AAAAC3\n"
    with pytest.raises(AirflowAdapterError, match="password login is not supported"):
        params_from_connection("s", "tether_slurm", {},
                               fields=ConnectionFields(host="login", password="pw"))  # fmt: skip

    rest = params_from_connection(
        "r", "tether_slurm", {"transport": "rest", "tls_verify": "false"},
        fields=ConnectionFields(host="slurm.example", port=6820, login="bob", password="JWT"),
    )  # fmt: skip
    assert rest == {"transport": "rest", "rest_url": "https://slurm.example:6820", "user": "bob",
                    "jwt": "JWT", "tls_verify": False}  # fmt: skip
    assert "JWT" not in repr(ConnectionFields(password="JWT"))
    url = params_from_connection("r", "tether_slurm", {},
                                 fields=ConnectionFields(host="http://127.0.0.1:6820"))
    assert url == {"transport": "rest", "rest_url": "http://127.0.0.1:6820"}
    with pytest.raises(AirflowAdapterError, match="transport='scp' is not allowed"):
        params_from_connection("r", "tether_slurm", {"transport": "scp"})


def test_job_ttl_becomes_the_kubernetes_ttl_option() -> None:
    import datetime as dt

    from tether.adapters.airflow.attempts import AirflowAdapterError, check_ttl
    from tether.adapters.airflow.connections import merge_run_defaults
    from tether.adapters.airflow.operator import TTL_OPTION, ComponentOperator
    from tether.runner import get_runner

    assert check_ttl(None, "t") is None
    assert check_ttl(dt.timedelta(minutes=5), "t") == 300
    assert check_ttl(30.9, "t") == 30
    for bad in (-1, "soon", True):
        with pytest.raises(AirflowAdapterError) as e:
            ComponentOperator(task_id="t", component="utils.echo", job_ttl=bad)
        assert f"task 't': job_ttl={bad!r} is not allowed" in str(e.value)
    with get_runner() as runner:
        opts = runner.scheduler_run_opts("kubernetes")
        cfg: dict[str, Any] = {}
        merge_run_defaults(cfg, opts, {TTL_OPTION: 300})
        assert cfg == {"ttl_seconds_after_finished": 300}

    # the dry-run shows it in the Job spec (a golden test covers the render itself)
    from airflow.sdk import DAG

    from tether.adapters.airflow.dryrun import render_operator

    with DAG("ttl_dag", schedule=None, start_date=dt.datetime(2024, 1, 1)):
        op = ComponentOperator(task_id="k", component="utils.echo", scheduler="kubernetes",
                               component_args={"msg": "hi"}, job_ttl=dt.timedelta(minutes=10))
    text = render_operator(op)
    assert '"job_ttl": 600' in text and "ttlSecondsAfterFinished: 600" in text


def test_task_labels_are_label_safe_and_annotations_exact() -> None:
    from types import SimpleNamespace

    from tether.adapters.airflow.labels import add_task_metadata, label_safe
    from tether.runner import get_runner

    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="manual__2024-05-01T00:00:00+00:00",
                         map_index=None, try_number=3)
    with get_runner() as runner:
        opts = runner.scheduler_run_opts("kubernetes")
        cfg: dict[str, Any] = {"labels": {"team": "ml", "airflow-task-id": "mine"}}
        add_task_metadata(cfg, opts, ti)
        local: dict[str, Any] = {}
        add_task_metadata(local, runner.scheduler_run_opts("local_cwd"), ti)
    assert cfg["labels"]["team"] == "ml" and cfg["labels"]["airflow-task-id"] == "mine"
    assert cfg["labels"]["airflow-try-number"] == "3"
    assert "airflow-map-index" not in cfg["labels"]  # unmapped
    run_label = cfg["labels"]["airflow-run-id"]
    assert run_label == label_safe(ti.run_id) and ":" not in run_label and len(run_label) <= 63
    assert cfg["annotations"]["tether.dev/airflow-run-id"] == ti.run_id
    assert local == {}  # local_cwd has no labels


def test_dryrun_masks_secrets_in_env_args_and_component_args() -> None:
    from tests.adapters.secret_app import PARAM_SECRET, leaks

    with DAG("tether_t_dry_secrets", schedule=None, start_date=START):
        op = ComponentOperator(
            task_id="t", component="tests.adapters.secret_app:leaky", scheduler="local_cwd",
            component_args={"api_token": PARAM_SECRET}, env={"EXTRA_TOKEN": "SEKRIT_openv"},
        )
    text = render_operator(op)
    # both layers are there: the operator's arguments, the AppDef, the request
    assert '"api_token": "****"' in text and '"EXTRA_TOKEN": "****"' in text
    assert '"--token",' in text and "# local_cwd request (scheduler layer)" in text
    assert not leaks({"airflow dryrun": text}), leaks({"airflow dryrun": text})
