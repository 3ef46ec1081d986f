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
from typing import TYPE_CHECKING, Any, cast

from tether.adapters.common import describe_app, render_dryrun
from tether.specs import mask_env
from tether.specs.secrets import MASK

if TYPE_CHECKING:
    from airflow.sdk import DAG, Context

    from tether.adapters.airflow.operator import ComponentOperator

DRYRUN_RUN_ID = "dryrun"


def _placeholders(value: Any) -> Any:
    """Replaces XComArgs (values known only at run time) with readable placeholders."""
    from airflow.sdk import XComArg

    if isinstance(value, XComArg):
        refs = [f"{op.task_id}.{key or 'return_value'}" for op, key in value.iter_references()]
        return f"<xcom {','.join(refs)}>"
    if isinstance(value, Mapping):
        return {k: _placeholders(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_placeholders(v) for v in value]
    return value


class _Placeholder:
    """Stands in for ``var`` and ``conn`` in templates: ``{{ conn.db.password }}`` renders as
    ``<conn.db.password>``, so a dry-run needs no Variable or Connection and shows no secret."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> _Placeholder:
        # private names, and the markers Jinja's sandbox looks up, are no placeholders
        if name.startswith("_") or name in ("unsafe_callable", "alters_data"):
            raise AttributeError(name)
        return _Placeholder(f"{self._path}.{name}")

    def __getitem__(self, key: Any) -> _Placeholder:
        return _Placeholder(f"{self._path}.{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Placeholder:
        first = f"({args[0]!r})" if args else "()"
        return _Placeholder(f"{self._path}{first}")

    def __str__(self) -> str:
        return f"<{self._path}>"

    __repr__ = __str__


class _DryrunTaskInstance:
    """Stands in for ``ti`` in templates: ``ti.xcom_pull(...)`` renders as a placeholder."""

    def xcom_pull(
        self, task_ids: str | Sequence[str] | None = None, key: str = "return_value", **_: Any
    ) -> str:
        ids = task_ids if isinstance(task_ids, str) else ",".join(task_ids or [])
        return f"<xcom {ids}.{key}>"


def dryrun_context(
    op: ComponentOperator,
    params: Mapping[str, Any] | None = None,
    logical_date: dt.datetime | None = None,
) -> dict[str, Any]:
    """A template context good enough to render a task's fields without a DAG run.

    Args:
        op: The task.
        params: Param values overriding the DAG's defaults.
        logical_date: The run's logical date (default now, UTC).

    Returns:
        The context.
    """
    when = logical_date or dt.datetime.now(dt.timezone.utc)
    dump = getattr(op.params, "dump", None)
    merged: dict[str, Any] = dict(dump()) if callable(dump) else dict(op.params or {})
    merged.update(params or {})
    dag_id = op.dag_id if op.has_dag() else "<no dag>"
    return {
        "params": merged,
        "ds": when.strftime("%Y-%m-%d"),
        "ds_nodash": when.strftime("%Y%m%d"),
        "ts": when.isoformat(),
        "logical_date": when,
        "run_id": DRYRUN_RUN_ID,
        "dag_id": dag_id,
        "task_id": op.task_id,
        "map_index": -1,
        "ti": _DryrunTaskInstance(),
        "task_instance": _DryrunTaskInstance(),
        "var": _Placeholder("var"),
        "conn": _Placeholder("conn"),
    }


def render_fields(op: ComponentOperator, context: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's template fields, rendered (XCom values as placeholders).

    Args:
        op: The task.
        context: The template context.

    Returns:
        Field name to rendered value.
    """
    out: dict[str, Any] = {}
    for name in op.template_fields:
        value = _placeholders(getattr(op, name))
        try:
            out[name] = op.render_template(value, cast("Context", dict(context)))
        except Exception as e:  # a dry-run shows what it cannot render instead of failing
            out[name] = f"<cannot render {name}: {type(e).__name__}: {e}>"
    return out


def describe_operator(op: ComponentOperator, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The operator layer of the dry-run (env values of secret-looking names masked).

    Args:
        op: The task.
        fields: Its rendered template fields.

    Returns:
        A printable summary.
    """
    from tether.adapters.airflow.operator import dag_run_parent_id

    dag_id = op.dag_id if op.has_dag() else "<no dag>"
    env = fields.get("env")
    return {
        "task_id": op.task_id,
        "operator": f"{type(op).__module__}.{type(op).__qualname__}",
        "component": str(fields.get("component") or op.component_name),
        "component_args": fields.get("component_args"),
        "scheduler": fields.get("scheduler"),
        "cfg": fields.get("cfg"),
        "image": fields.get("image"),
        "env": mask_env({str(k): str(v) for k, v in env.items()}) if env else env,
        "secret_env": {k: MASK for k in op.secret_env} or None,
        "conn_id": op.conn_id,
        "reattach": op.reattach,
        "on_finish_action": op.on_finish_action,
        "job_ttl": op.job_ttl,
        "deferrable": op.deferrable,
        "wait_interval": op.wait_interval,
        "retries": op.retries,
        "job_key": "derived at run time from (dag_id, run_id, task_id, map_index, try_number)",
        "parent_run_id": dag_run_parent_id(dag_id, "{run_id}"),
        "upstream": sorted(op.upstream_task_ids),
    }


def render_operator(
    op: ComponentOperator,
    params: Mapping[str, Any] | None = None,
    logical_date: dt.datetime | None = None,
) -> str:
    """Renders both layers of one task: its arguments, the AppDef and the native request.

    Args:
        op: The task.
        params: Param values overriding the DAG's defaults.
        logical_date: The run's logical date for templates.

    Returns:
        The text. A component that cannot be materialized (e.g. an argument that only an
        upstream XCom provides) or a request that cannot be rendered (e.g. an unknown
        scheduler) shows the reason in its place.
    """
    from tether.runner import get_runner

    context = dryrun_context(op, params, logical_date)
    fields = render_fields(op, context)
    parts = [
        f"# Airflow task {op.task_id!r} (operator layer)",
        json.dumps(describe_operator(op, fields), indent=2, default=str),
    ]
    scheduler = str(fields.get("scheduler"))
    with get_runner() as runner:
        from tether.adapters.airflow.operator import build_component_app, parse_cfg

        args = fields.get("component_args")
        if isinstance(args, str) and args.startswith("<xcom ") and args.endswith(">"):
            parts += ["# AppDef", f"(known at run time: the component arguments come from {args})"]
            return "\n".join(parts)
        try:
            app = build_component_app(
                _component(op, fields.get("component")), fields.get("component_args"),
                fields.get("image"), fields.get("env"), runner,
            )
        except Exception as e:
            parts += ["# AppDef", f"(cannot materialize {op.component_name}: "
                      f"{type(e).__name__}: {e})"]
            return "\n".join(parts)
        if op.secret_env:
            from tether.adapters.airflow.labels import secret_name
            from tether.specs import SecretRef

            ref_name = secret_name(f"airflow-{DRYRUN_RUN_ID}")
            for role in app.roles:
                for var in op.secret_env:
                    role.env.pop(var, None)
                    role.secrets[var] = SecretRef(ref_name, var)
        parts += ["# AppDef", json.dumps(describe_app(app), indent=2, default=str),
                  f"# {scheduler} request (scheduler layer)"]
        try:
            cfg = parse_cfg(runner, scheduler, fields.get("cfg"))
            if op.job_ttl is not None:
                from tether.adapters.airflow.connections import merge_run_defaults
                from tether.adapters.airflow.operator import TTL_OPTION

                merge_run_defaults(cfg, runner.scheduler_run_opts(scheduler),
                                   {TTL_OPTION: op.job_ttl})
            _, info = render_dryrun(app, scheduler, cfg, runner=runner)
        except Exception as e:
            parts.append(f"(cannot render the request: {type(e).__name__}: {e})")
        else:
            parts.append(str(info))
    return "\n".join(parts)


def _component(op: ComponentOperator, rendered: Any) -> Any:
    """The component to materialize: the rendered name, or the operator's function."""
    from tether.adapters.airflow.operator import ComponentFunction

    if isinstance(rendered, ComponentFunction):
        return rendered.fn
    return rendered if isinstance(rendered, str) and rendered else op.component_ref


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
    from tether.adapters.airflow.operator import ComponentOperator

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
    """The DAGs defined in one DAG file.

    Args:
        path: The file.

    Returns:
        DAG id to DAG.
    """
    import importlib.util

    from airflow.sdk import DAG

    spec = importlib.util.spec_from_file_location("_tether_dryrun_dagfile", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load DAG file {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {d.dag_id: d for d in vars(module).values() if isinstance(d, DAG)}


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
    dags = load_dags(args.dag_file)
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
