"""One tether task's dry-run: its rendered arguments, the AppDef and the native request.

:mod:`tether.adapters.airflow.dryrun` (the command over a DAG file) and
``ComponentOperator.dry_run()`` both render through :func:`render_operator`. This module sits
below the operator: it reads a task through the :class:`DryrunTask` protocol and never imports
the operator module.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from tether.adapters.airflow.building import (
    TTL_OPTION,
    ComponentFunction,
    ComponentRef,
    build_component_app,
    dag_run_parent_id,
    parse_cfg,
)
from tether.adapters.common import app_secrets, describe_app, render_dryrun
from tether.adapters.common.candidates import SchedulerListError, scheduler_list, union_opts
from tether.specs import mask_env
from tether.specs.secrets import MASK, mask_text, mask_value, secret_values, value_secrets

if TYPE_CHECKING:
    from airflow.sdk import Context


class DryrunTask(Protocol):
    """What a dry-run reads of a task (``ComponentOperator`` has all of it)."""

    @property
    def task_id(self) -> str: ...

    @property
    def dag_id(self) -> str: ...

    @property
    def params(self) -> Any: ...

    @property
    def template_fields(self) -> Sequence[str]: ...

    @property
    def upstream_task_ids(self) -> Collection[str]: ...

    @property
    def component_name(self) -> str: ...

    @property
    def component_ref(self) -> ComponentRef: ...

    @property
    def secret_env(self) -> Mapping[str, str]: ...

    @property
    def conn_id(self) -> str | None: ...

    @property
    def reattach(self) -> str: ...

    @property
    def on_finish_action(self) -> str: ...

    @property
    def job_ttl(self) -> float | None: ...

    @property
    def deferrable(self) -> bool: ...

    @property
    def wait_interval(self) -> float: ...

    @property
    def retries(self) -> Any: ...

    def has_dag(self) -> bool: ...

    def render_template(self, content: Any, context: Context, /) -> Any: ...


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
    op: DryrunTask,
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


def render_fields(op: DryrunTask, context: Mapping[str, Any]) -> dict[str, Any]:
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


def describe_operator(op: DryrunTask, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The operator layer of the dry-run (env values of secret-looking names masked).

    Args:
        op: The task.
        fields: Its rendered template fields.

    Returns:
        A printable summary.
    """
    dag_id = op.dag_id if op.has_dag() else "<no dag>"
    env = fields.get("env")
    return {
        "task_id": op.task_id,
        "operator": f"{type(op).__module__}.{type(op).__qualname__}",
        "component": str(fields.get("component") or op.component_name),
        "component_args": mask_value("component_args", fields.get("component_args")),
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
    op: DryrunTask,
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
    context = dryrun_context(op, params, logical_date)
    fields = render_fields(op, context)
    env = fields.get("env")
    # the one secret policy over the whole text: secret-named or --token-style component
    # arguments, secret-looking env values, and (below) every secret value of the app
    secrets = value_secrets("component_args", fields.get("component_args"))
    if isinstance(env, Mapping):
        secrets += secret_values([{str(k): str(v) for k, v in env.items()}])
    parts = [
        f"# Airflow task {op.task_id!r} (operator layer)",
        json.dumps(describe_operator(op, fields), indent=2, default=str),
    ]
    parts += _render_app_layers(op, fields, secrets)
    return mask_text("\n".join(parts), secrets)


def _render_app_layers(
    op: DryrunTask, fields: Mapping[str, Any], secrets: list[str]
) -> list[str]:
    """The AppDef and scheduler layers of :func:`render_operator` (adds the app's secrets)."""
    from tether.runner import get_runner

    parts: list[str] = []
    with get_runner() as runner:
        args = fields.get("component_args")
        if isinstance(args, str) and args.startswith("<xcom ") and args.endswith(">"):
            return ["# AppDef", f"(known at run time: the component arguments come from {args})"]
        try:
            app = build_component_app(
                _component(op, fields.get("component")), fields.get("component_args"),
                fields.get("image"), fields.get("env"), runner,
            )
        except Exception as e:
            return ["# AppDef", f"(cannot materialize {op.component_name}: "
                    f"{type(e).__name__}: {e})"]
        secrets += app_secrets(app)
        if op.secret_env:
            from tether.adapters.airflow.labels import secret_name
            from tether.specs import SecretRef

            ref_name = secret_name(f"airflow-{DRYRUN_RUN_ID}")
            for role in app.roles:
                for var in op.secret_env:
                    role.env.pop(var, None)
                    role.secrets[var] = SecretRef(ref_name, var)
        parts += ["# AppDef", json.dumps(describe_app(app), indent=2, default=str)]
        try:
            candidates = scheduler_list(fields.get("scheduler"))
        except SchedulerListError as e:
            return [*parts, f"(cannot render the request: {e})"]
        for scheduler in candidates:  # a failover list: every candidate's native request
            parts.append(f"# {scheduler} request (scheduler layer)")
            parts.append(_request(runner, op, app, candidates, scheduler, fields.get("cfg")))
    return parts


def _request(
    runner: Any, op: DryrunTask, app: Any, candidates: list[str], scheduler: str, given: Any
) -> str:
    """One candidate's native request (with the options it declares), or why it cannot be
    rendered."""
    try:
        opts = runner.scheduler_run_opts(scheduler)
        if len(candidates) > 1 and isinstance(given, str) and given:
            given = union_opts(runner, candidates).cfg_from_str(given)
        cfg = parse_cfg(runner, scheduler, given)
        if len(candidates) > 1:
            cfg = {k: v for k, v in cfg.items() if opts.get(k) is not None}
        if op.job_ttl is not None:
            from tether.adapters.airflow.connections import merge_run_defaults

            merge_run_defaults(cfg, opts, {TTL_OPTION: op.job_ttl})
        _, info = render_dryrun(app, scheduler, cfg, runner=runner)
    except Exception as e:
        return f"(cannot render the request: {type(e).__name__}: {e})"
    return str(info)


def _component(op: DryrunTask, rendered: Any) -> Any:
    """The component to materialize: the rendered name, or the operator's function."""
    if isinstance(rendered, ComponentFunction):
        return rendered.fn
    return rendered if isinstance(rendered, str) and rendered else op.component_ref
