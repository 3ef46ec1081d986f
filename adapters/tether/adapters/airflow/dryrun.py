"""Dry-run of a DAG's tether tasks: the operator's arguments and the scheduler's native request.

Both layers are rendered without running anything::

    python -m tether.adapters.airflow.dryrun dags/train_pipeline.py
    python -m tether.adapters.airflow.dryrun dags/train_pipeline.py --task train \
        -p scheduler=local_cwd

Template fields are rendered with a small context: the DAG's params (overridden by ``-p``),
``ds``/``ts``/``logical_date`` of ``--logical-date`` (default now), ``run_id`` ``dryrun`` and
the ids of the DAG and task. Values known only at run time are shown as placeholders:
upstream XComs as ``<xcom task_id.key>``, Variables and Connections as ``<var.value.name>`` and
``<conn.id.password>`` (so a dry-run reads no secret). ``secret_env`` values are never rendered:
the request shows the secret references the job would get. A field that cannot be rendered
shows why in its place. ``ComponentOperator.dry_run()`` logs the same text.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.adapters.airflow.operator import ComponentOperator
from tether.adapters.airflow.rendering import (
    DRYRUN_RUN_ID,
    describe_operator,
    dryrun_context,
    render_fields,
    render_operator,
)

if TYPE_CHECKING:
    from airflow.sdk import DAG

__all__ = [
    "DRYRUN_RUN_ID",
    "describe_operator",
    "dryrun_context",
    "load_dags",
    "main",
    "render_dag",
    "render_fields",
    "render_operator",
]

def render_dag(
    dag: DAG,
    task_ids: Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    logical_date: dt.datetime | None = None,
) -> str:
    """Renders every tether task of a DAG (or the named ones).

    Args:
        dag: The DAG.
        task_ids: Only these tasks.
        params: Param values overriding the DAG's defaults.
        logical_date: The run's logical date for templates.

    Returns:
        The text, one section per task.

    Raises:
        KeyError: When a named task does not exist or is not a tether task.
    """
    ours = {t.task_id: _tether_ops(t) for t in dag.tasks}
    ours = {k: v for k, v in ours.items() if v}
    if task_ids:
        missing = [t for t in task_ids if t not in ours]
        if missing:
            raise KeyError(
                f"DAG {dag.dag_id!r} has no tether task {missing[0]!r}; its tether tasks: "
                f"{', '.join(sorted(ours)) or 'none'}"
            )
        selected = [op for t in task_ids for op in ours[t]]
    else:
        selected = [op for ops in ours.values() for op in ops]
    return "\n\n".join(render_operator(op, params, logical_date) for op in selected)


def _tether_ops(task: Any) -> list[ComponentOperator]:
    """The tether operators of a task: itself, or one per literal map index of a mapped task.

    A task mapped over an upstream XCom gives one operator whose ``component_args`` is that
    XComArg (rendered as a placeholder).
    """
    if isinstance(task, ComponentOperator):
        return [task]
    cls = getattr(task, "operator_class", None)
    expand = getattr(getattr(task, "expand_input", None), "value", None)
    if not (isinstance(cls, type) and issubclass(cls, ComponentOperator)):
        return []
    if not isinstance(expand, Mapping) or set(expand) != {"component_args"}:
        return []
    values = expand["component_args"]
    mapped = values if isinstance(values, (list, tuple)) else [values]
    return [task.unmap({"component_args": v}) for v in mapped]


def load_dags(path: str) -> dict[str, DAG]:
    """The DAGs defined in one DAG file, found as Airflow's DagBag finds them.

    Those are the DAGs bound to a top-level name and those the file made without keeping
    them: ``with DAG(...):`` without ``as dag``, or a ``@dag`` function called at the top
    level (Airflow auto-registers both while it imports the file).

    Args:
        path: The file.

    Returns:
        DAG id to DAG.

    Raises:
        FileNotFoundError: When the file does not exist or is not Python.
    """
    import importlib.util
    import os

    from airflow.sdk import DAG
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    if not os.path.isfile(path):
        raise FileNotFoundError(f"DAG file {path!r} does not exist")
    mod_name = "_tether_dryrun_dagfile"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load DAG file {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    DagContext.autoregistered_dags.clear()
    DagContext.current_autoregister_module_name = mod_name
    try:
        spec.loader.exec_module(module)
        dags = [d for d in vars(module).values() if isinstance(d, DAG)]
        dags += [d for d, _ in DagContext.autoregistered_dags]
    finally:
        DagContext.current_autoregister_module_name = None
        DagContext.autoregistered_dags.clear()
        sys.modules.pop(mod_name, None)
    return {d.dag_id: d for d in dags}


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"-p expects NAME=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tether.adapters.airflow.dryrun DAG_FILE [--dag-id] [--task] [-p k=v]``.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tether.adapters.airflow.dryrun",
        description="Show what the tether tasks of a DAG file would submit, without running them.",
    )
    parser.add_argument("dag_file")
    parser.add_argument("--dag-id", help="the DAG (default: every DAG of the file)")
    parser.add_argument("--task", action="append", dest="tasks", help="only this task (repeatable)")
    parser.add_argument("-p", "--param", action="append", type=_param, default=[],
                        help="a DAG param NAME=VALUE (JSON values allowed)")
    args = parser.parse_args(argv)
    try:
        dags = load_dags(args.dag_file)
    except Exception as e:  # the DAG file's own error, as Airflow would report it on import
        print(f"cannot load DAG file {args.dag_file}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.dag_id:
        if args.dag_id not in dags:
            print(f"no DAG {args.dag_id!r} in {args.dag_file}; it defines: "
                  f"{', '.join(sorted(dags)) or 'none'}", file=sys.stderr)
            return 2
        dags = {args.dag_id: dags[args.dag_id]}
    params = dict(args.param)
    try:
        for dag in dags.values():
            print(f"## DAG {dag.dag_id}")
            print(render_dag(dag, args.tasks, params))
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
