"""DAGs the Airflow adapter tests run for real (``dag.test()`` on sqlite, jobs on local_cwd).

Every job is a small shell or Python command, so each DAG runs in a second or two. Values a
test varies come from DAG params (``dag.test(run_conf=...)``).
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from pathlib import Path
from typing import Any, cast

from airflow.sdk import DAG, Param

from tether.adapters.airflow import ComponentOperator, operator_for
from tether.specs import AppDef, Role

PY = shlex.quote(sys.executable)
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def publish(**outputs: object) -> str:
    """A shell command that publishes outputs from inside the job."""
    calls = "; ".join(f"write_output({k!r}, {v!r})" for k, v in outputs.items())
    code = f"from tether.tracker.outputs import write_output; {calls}"
    return f"{PY} -c {shlex.quote(code)}"


def open_gate_on_retry(context: Any) -> None:
    """Creates the ``gate`` param's file when a later try starts (the job already wrote its pid)."""
    params = context["params"]
    if params["gate"] != "/nonexistent" and Path(params["pidfile"]).exists():
        Path(params["gate"]).touch()


with DAG("tether_t_logs", schedule=None, start_date=START, catchup=False,
         params={"greeting": Param("hello", type="string")}) as logs_dag:
    ComponentOperator(
        task_id="two_replicas",
        component="utils.sh",
        component_args={
            "args": [
                "echo \"{{ params.greeting }} from replica $TETHER_REPLICA_ID on $RUN_DS\"; "
                "echo \"second line of $TETHER_REPLICA_ID\" >&2; "
                "echo \"parent=$TETHER_PARENT_RUN_ID\"; "
                + publish(accuracy=0.93, model={"uri": "file:///m"})
            ],
            "num_replicas": 2,
        },
        env={"RUN_DS": "{{ ds }}"},
        deferrable=False,
        wait_interval=0.2,
    )

with DAG("tether_t_fail", schedule=None, start_date=START, catchup=False) as fail_dag:
    ComponentOperator(
        task_id="broken",
        component="utils.sh",
        component_args=["echo starting; echo 'the disk is full' >&2; exit 3"],
        deferrable=False,
        wait_interval=0.2,
    )

with DAG("tether_t_defer", schedule=None, start_date=START, catchup=False) as defer_dag:
    ComponentOperator(
        task_id="deferred",
        component="utils.sh",
        component_args={
            "args": ["sleep 1; echo \"deferred replica $TETHER_REPLICA_ID\"; "
                     + publish(loss=0.25)],
            "num_replicas": 2,
        },
        deferrable=True,
        wait_interval=0.2,
    )
    ComponentOperator(
        task_id="deferred_fail",
        component="utils.sh",
        component_args=["sleep 0.5; echo 'out of memory' >&2; exit 9"],
        deferrable=True,
        wait_interval=0.2,
    )

with DAG("tether_t_retry", schedule=None, start_date=START, catchup=False,
         params={"marker": Param("/nonexistent", type="string")}) as retry_dag:
    # fails on the first attempt (no marker yet), succeeds on the retry
    ComponentOperator(
        task_id="flaky",
        component="utils.sh",
        component_args=[
            "if [ -e '{{ params.marker }}' ]; then echo second try; "
            "else touch '{{ params.marker }}'; echo 'first try fails' >&2; exit 1; fi"
        ],
        retries=1,
        retry_delay=dt.timedelta(seconds=0),
        deferrable=False,
        wait_interval=0.2,
    )

def recover_dag(dag_id: str, deferrable: bool) -> DAG:
    """A DAG whose task's app has a recovery policy: its failed first attempt is recovered
    within the one try (no Airflow retry)."""
    with DAG(dag_id, schedule=None, start_date=START, catchup=False,
             params={"ckpt": Param("/nonexistent", type="string")}) as dag:
        ComponentOperator(
            task_id="flaky",
            component="tests.adapters.recovering_app:flaky",
            component_args=["--ckpt", "{{ params.ckpt }}"],
            retries=0,
            deferrable=deferrable,
            wait_interval=0.2,
        )
    return dag


recover = recover_dag("tether_t_recover", deferrable=False)
recover_defer = recover_dag("tether_t_recover_defer", deferrable=True)


def lost_dag(dag_id: str, deferrable: bool) -> DAG:
    """A DAG whose task's job runs on Slurm until the test sets its node DOWN: the recovery
    policy's next attempt ends it, within the one try (the cluster from ``$SLURM_CONF``)."""
    with DAG(dag_id, schedule=None, start_date=START, catchup=False,
             params={"ckpt": Param("/nonexistent", type="string"),
                     "name": Param("lost", type="string"),
                     "job_dir": Param("/nonexistent", type="string")}) as dag:
        ComponentOperator(
            task_id="lost",
            component="tests.adapters.recovering_app:lost",
            component_args=["--ckpt", "{{ params.ckpt }}", "--name", "{{ params.name }}"],
            scheduler="slurm",
            cfg={"job_dir": "{{ params.job_dir }}"},
            retries=0,
            deferrable=deferrable,
            wait_interval=0.5,
        )
    return dag


lost_slurm = lost_dag("tether_t_lost_slurm", deferrable=False)
lost_slurm_defer = lost_dag("tether_t_lost_slurm_defer", deferrable=True)


def evicted_dag(dag_id: str, deferrable: bool) -> DAG:
    """A DAG whose task's job runs on Kubernetes until the test evicts its pod: the recovery
    policy's next attempt ends it, within the one try (the cluster from ``$KUBECONFIG``; the
    pods run by the test's kubelet, picked by the ``labels`` param)."""
    with DAG(dag_id, schedule=None, start_date=START, catchup=False,
             params={"ckpt": Param("/nonexistent", type="string"),
                     "name": Param("evictable", type="string"),
                     "namespace": Param("default", type="string"),
                     "labels": Param("", type="string")}) as dag:
        ComponentOperator(
            task_id="evictable",
            component="tests.adapters.recovering_app:evictable",
            component_args=["--ckpt", "{{ params.ckpt }}", "--name", "{{ params.name }}"],
            scheduler="kubernetes",
            cfg={"namespace": "{{ params.namespace }}", "labels": "{{ params.labels }}"},
            retries=0,
            deferrable=deferrable,
            wait_interval=0.5,
        )
    return dag


evicted_kube = evicted_dag("tether_t_evicted_kube", deferrable=False)
evicted_kube_defer = evicted_dag("tether_t_evicted_kube_defer", deferrable=True)


def failover_dag(dag_id: str, deferrable: bool) -> DAG:
    """A DAG whose task names an ordered list of schedulers (a DAG param, as the CLI's
    ``-s a,b``); ``namespace`` is an option only kubernetes declares."""
    with DAG(dag_id, schedule=None, start_date=START, catchup=False,
             params={"schedulers": Param("kubernetes,local_cwd", type="string"),
                     "namespace": Param("default", type="string"),
                     "option": Param("namespace", type="string")}) as dag:
        ComponentOperator(
            task_id="placed",
            component="tests.adapters.recovering_app:placed",
            scheduler="{{ params.schedulers }}",
            cfg="{{ params.option }}={{ params.namespace }}",
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
            deferrable=deferrable,
            wait_interval=0.2,
        )
    return dag


failover = failover_dag("tether_t_failover", deferrable=False)
failover_defer = failover_dag("tether_t_failover_defer", deferrable=True)

with DAG("tether_t_failover_secret", schedule=None, start_date=START, catchup=False,
         params={"schedulers": Param("kubernetes,local_cwd", type="string"),
                 "namespace": Param("default", type="string"),
                 "token": Param("", type="string")}) as failover_secret_dag:
    # secret_env with a failover list: every candidate must hold the secret
    ComponentOperator(
        task_id="with_secret",
        component="tests.adapters.recovering_app:placed",
        scheduler="{{ params.schedulers }}",
        cfg="namespace={{ params.namespace }}",
        secret_env={"API_TOKEN": "{{ params.token }}"},
        retries=1,
        retry_delay=dt.timedelta(seconds=0),
        deferrable=False,
        wait_interval=0.2,
    )


def long_dag(dag_id: str, retries: int) -> DAG:
    """A DAG whose task records its pid, waits for a gate file, then publishes an output.

    It records its pid ($$: a value without macros passes through as is), waits until the
    gate file exists (at most `seconds`), then publishes an output: the worker-kill and
    on_kill tests run this DAG in a subprocess and kill it. A later try of the task opens the
    gate as it starts, so the job is still running when that try looks for it.
    """
    with DAG(dag_id, schedule=None, start_date=START, catchup=False,
             params={"pidfile": Param("/nonexistent", type="string"),
                     "gate": Param("/nonexistent", type="string"),
                     "seconds": Param(60, type="integer")}) as dag:
        ComponentOperator(
            task_id="long",
            component="utils.sh",
            component_args=[
                "echo $$ > '{{ params.pidfile }}'; echo started; "
                "for i in $(seq 1 {{ params.seconds * 10 }}); do "
                "[ -e '{{ params.gate }}' ] && break; sleep 0.1; done; "
                "sleep 1; echo finished; " + publish(done=True)
            ],
            on_execute_callback=open_gate_on_retry,
            retries=retries,
            retry_delay=dt.timedelta(seconds=0),
            deferrable=False,
            wait_interval=0.2,
        )
    return dag


long_dag_once = long_dag("tether_t_long", 0)
long_dag_retry = long_dag("tether_t_long_retry", 1)


def count_to(n: int, label: str = "n") -> AppDef:
    """Counts to ``n`` and publishes the total: a component defined in the DAG file.

    Args:
        n: How far to count.
        label: Name of the published output.

    Returns:
        The AppDef.
    """
    script = f"seq 1 {n}; " + publish(**{label: n * (n + 1) // 2})
    return AppDef("count", [Role("count", image="", entrypoint="sh", args=["-c", script])])


counter = operator_for(count_to, wait_interval=0.2, deferrable=False)

with DAG("tether_t_factory", schedule=None, start_date=START, catchup=False) as factory_dag:
    first = counter(3, label="total")  # publishes total=6
    # an upstream output (an XComArg) as a component argument, resolved at run time
    # (typed as the component's int parameter: a checker needs the cast; Airflow resolves it)
    second = counter.override(task_id="count_again")(cast(int, first["total"]))
    counter.override(task_id="fan_out").expand(n=[2, 4])

with DAG("tether_t_timeout", schedule=None, start_date=START, catchup=False,
         params={"pidfile": Param("/nonexistent", type="string")}) as timeout_dag:
    # Airflow's execution_timeout stops the task after 3 s: the job must not outlive it
    ComponentOperator(
        task_id="slow",
        component="utils.sh",
        component_args=["echo $$ > '{{ params.pidfile }}'; sleep 120"],
        execution_timeout=dt.timedelta(seconds=3),
        deferrable=False,
        wait_interval=0.2,
    )

with DAG("tether_t_always", schedule=None, start_date=START, catchup=False) as always_dag:
    # a clear re-uses the job that succeeded (reattach="always")
    ComponentOperator(
        task_id="cached",
        component="utils.sh",
        component_args=["echo computing; " + publish(value=7)],
        reattach="always",
        deferrable=False,
        wait_interval=0.2,
    )

with DAG("tether_t_timeout_deferred", schedule=None, start_date=START, catchup=False,
         params={"pidfile": Param("/nonexistent", type="string")}) as timeout_deferred_dag:
    # deferred: the trigger cancels the job at execution_timeout, the task fails with it
    ComponentOperator(
        task_id="slow_deferred",
        component="utils.sh",
        component_args=["echo $$ > '{{ params.pidfile }}'; echo waiting; sleep 600"],
        execution_timeout=dt.timedelta(seconds=20),  # time for the job to print a line under load,
        deferrable=True,
        wait_interval=0.2,
    )


def k8s_echo(message: str = "hello", password_sha256: str = "") -> AppDef:
    """A one-container job for the Kubernetes tests (busybox on the real test node).

    Args:
        message: What it echoes.
        password_sha256: When set, the job fails unless ``$DB_PASSWORD``'s SHA-256 is this
            (the test checks the value reached the container without it being printed).

    Returns:
        The AppDef.
    """
    script = f"echo {shlex.quote(message)}"
    if password_sha256:
        want = shlex.quote(f"{password_sha256}  -")
        script += (f'; [ "$(printf %s "$DB_PASSWORD" | sha256sum)" = {want} ] || '
                   "{ echo 'DB_PASSWORD is not the Variable value' >&2; exit 1; }")
    return AppDef("k8secho", [Role("main", image="busybox:1.36", entrypoint="sh",
                                   args=["-c", script])])


K8S_CFG = {"namespace": "{{ params.namespace }}", "image_pull_policy": "{{ params.pull_policy }}"}
K8S_PARAMS = {
    "namespace": Param("default", type="string"),
    "image": Param("busybox:1.36", type="string"),
    "pull_policy": Param("IfNotPresent", type="string"),
    "password_sha256": Param("", type="string"),
}

with DAG("tether_t_k8s", schedule=None, start_date=START, catchup=False,
         params=K8S_PARAMS) as k8s_dag:
    # the cluster comes from the connection; the password from a Variable, handed to the job
    # as a Kubernetes Secret the task creates and deletes
    ComponentOperator(
        task_id="with_secret",
        component=k8s_echo,
        component_args={"password_sha256": "{{ params.password_sha256 }}"},
        image="{{ params.image }}",
        scheduler="kubernetes",
        cfg={**K8S_CFG, "dashboard_url": "https://dash.example/#/job/{namespace}/{name}"},
        conn_id="tether_k8s_e2e",
        secret_env={"DB_PASSWORD": "{{ var.value.tether_db_password }}"},
        env={"PLAIN": "visible"},
        deferrable=False,
        wait_interval=0.2,
    )
    ComponentOperator(
        task_id="deleted_after",
        component=k8s_echo,
        image="{{ params.image }}",
        scheduler="kubernetes",
        cfg=dict(K8S_CFG),
        conn_id="tether_k8s_e2e",
        on_finish_action="delete",
        deferrable=True,
        wait_interval=0.2,
    )

with DAG("tether_t_secret_local", schedule=None, start_date=START, catchup=False) as secret_local:
    # local_cwd holds no secrets: the task fails at once, naming secret_env (no retry helps)
    ComponentOperator(
        task_id="no_secret_store",
        component="utils.sh",
        component_args=["echo never"],
        secret_env={"API_TOKEN": "tok-123"},
        retries=2,
        deferrable=False,
        wait_interval=0.2,
    )


def slurm_echo(message: str = "hi") -> AppDef:
    """A one-replica echo for the remote Slurm transports (no image: Slurm runs it as is).

    Args:
        message: What the job prints.
    """
    return AppDef("afslurm", [Role("main", entrypoint="echo", args=[message])])


with DAG("tether_t_slurm_remote", schedule=None, start_date=START, catchup=False) as slurm_dag:
    # the cluster comes from each tether_slurm connection (an ssh and a rest one, set by the
    # test as AIRFLOW_CONN_* variables); the worker has no Slurm client
    ComponentOperator(
        task_id="over_ssh",
        component=slurm_echo,
        component_args={"message": "via ssh"},
        scheduler="slurm",
        conn_id="tether_slurm_ssh_e2e",
        deferrable=False,
        wait_interval=0.5,
    )
    ComponentOperator(
        task_id="over_rest",
        component=slurm_echo,
        component_args={"message": "via rest"},
        scheduler="slurm",
        conn_id="tether_slurm_rest_e2e",
        deferrable=True,
        wait_interval=0.5,
    )

with DAG("tether_t_live_link", schedule=None, start_date=START, catchup=False,
         params={"gate": Param("/nonexistent", type="string")}) as live_link_dag:
    # a Ray job (the dashboard is its UI) that runs until the test creates its gate file; the
    # Ray head's address comes from $TETHER_RAY_ADDRESS
    ComponentOperator(
        task_id="on_ray",
        component="utils.sh",
        component_args=["echo job-is-waiting-for-its-gate; "
                        "while [ ! -e {{ params.gate }} ]; do sleep 0.2; done"],
        scheduler="ray",
        cfg={"python": sys.executable},
        deferrable=False,
        wait_interval=0.5,
    )
