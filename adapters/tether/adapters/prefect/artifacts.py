"""Prefect artifacts of a tether task: a link to the job's UI, a summary of the job, and
its progress (a progress artifact updated in place, a table of its last metrics).

:func:`summary_markdown` is pure (it renders what the artifact shows); the ``create_*``
functions publish to the current task run and must run inside one.
"""

from __future__ import annotations

import json
import re
from typing import Any
from uuid import UUID

from tether.adapters.common import JobResult, app_secrets
from tether.specs import AppDef, AppStatus, mask_args, mask_text, mask_value
from tether.tracker.progress import Progress

_SYNC: dict[str, Any] = {"_sync": True}
"""Prefect's ``create_*_artifact`` run synchronously even where an event loop is running."""

_KEY_BAD = re.compile(r"[^a-z0-9-]+")
_MAX_CELL = 300


def artifact_key(task_name: str, suffix: str = "") -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) for a task.

    Args:
        task_name: The task's name (e.g. ``utils.python``).
        suffix: Appended after a dash (e.g. ``ui``).

    Returns:
        e.g. ``tether-utils-python-ui``.
    """
    base = _KEY_BAD.sub("-", f"tether-{task_name}".lower()).strip("-")
    if suffix:
        base = f"{base}-{_KEY_BAD.sub('-', suffix.lower()).strip('-')}"
    return base[:200]


def _cell(value: object) -> str:
    text = str(value).replace("\r", "").replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 3] + "..."


def _code(value: object) -> str:
    text = _cell(value).replace("`", "'")
    return f"`{text}`"


def summary_markdown(
    task_name: str,
    scheduler: str,
    app: AppDef,
    result: JobResult,
    status: AppStatus | None = None,
    job_key: str | None = None,
) -> str:
    """The markdown of the job summary artifact.

    Args:
        task_name: The Prefect task's name.
        scheduler: The scheduler the job ran on.
        app: The AppDef (roles, replicas, images, commands).
        result: The job's final result.
        status: The final status, for per-replica states.
        job_key: The job identity.

    Returns:
        Markdown: a table of the job, one of its roles, one of its replicas, one of outputs.
    """
    secrets = app_secrets(app)
    lines = [
        f"### tether job of task `{_cell(task_name)}`",
        "",
        "| | |",
        "|---|---|",
        f"| handle | {_code(result.app_handle)} |",
        f"| scheduler | {_cell(scheduler)} |",
        f"| final state | **{result.state.name}** |",
    ]
    if result.msg:
        lines.append(f"| message | {_cell(mask_text(result.msg, secrets))} |")
    if result.ui_url:
        lines.append(f"| UI | [{_cell(result.ui_url)}]({result.ui_url}) |")
    lines += [
        f"| re-attached | {'yes' if result.reattached else 'no'} |",
        f"| restarts | {result.num_restarts} |",
    ]
    if job_key:
        lines.append(f"| job key | {_code(job_key)} |")
    lines += ["", "| role | replicas | image | command |", "|---|---|---|---|"]
    for role in app.roles:
        cmd = " ".join(mask_args([role.entrypoint, *role.args], secrets))
        lines.append(
            f"| {_cell(role.name)} | {role.num_replicas} | {_code(role.image)} | {_code(cmd)} |"
        )
    replicas = [(rs.role, rep) for rs in (status.roles if status else []) for rep in rs.replicas]
    if replicas:
        lines += ["", "| replica | state | exit code | host |", "|---|---|---|---|"]
        for role_name, rep in replicas:
            code = "" if rep.exit_code is None else str(rep.exit_code)
            lines.append(
                f"| {_cell(role_name)}/{rep.id} | {rep.state.name} | {code} | "
                f"{_cell(rep.hostname)} |"
            )
    if result.outputs:
        lines += ["", "| output | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_code(_json(mask_value(k, v, secrets)))} |"
                  for k, v in sorted(result.outputs.items())]
    return mask_text("\n".join(lines), secrets) + "\n"


def _json(value: Any) -> str:
    import json

    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _uuid(value: object) -> UUID:
    if not isinstance(value, UUID):
        raise TypeError(f"Prefect returned {type(value).__name__}, not an artifact id")
    return value


def create_link(task_name: str, result: JobResult) -> UUID | None:
    """Publishes a link artifact to the job's UI, where the scheduler has one.

    Args:
        task_name: The Prefect task's name.
        result: The job's result (or status so far) carrying ``ui_url``.

    Returns:
        The artifact's id, or None when the job has no UI URL.
    """
    if not result.ui_url:
        return None
    from prefect.artifacts import create_link_artifact

    return _uuid(create_link_artifact(
        link=result.ui_url,
        link_text=f"{result.app_handle}",
        key=artifact_key(task_name, "ui"),
        description=f"The scheduler's page of tether job {result.app_handle}",
        **_SYNC,
    ))


def create_summary(
    task_name: str,
    scheduler: str,
    app: AppDef,
    result: JobResult,
    status: AppStatus | None = None,
    job_key: str | None = None,
    *,
    client: Any = None,
    flow_run_id: UUID | None = None,
    task_run_id: UUID | None = None,
) -> UUID:
    """Publishes the job summary (markdown) of a task run.

    Args:
        task_name: The Prefect task's name.
        scheduler: The scheduler.
        app: The AppDef.
        result: The final result.
        status: The final status.
        job_key: The job identity.
        client: A sync Prefect client to send it with (one request, from any thread); without
            one, Prefect's ``create_markdown_artifact`` is used in the current task run.
        flow_run_id: The flow run (with ``client``).
        task_run_id: The task run (with ``client``).

    Returns:
        The artifact's id.
    """
    markdown = summary_markdown(task_name, scheduler, app, result, status, job_key)
    description = f"tether job {result.app_handle}: {result.state.name}"
    if client is not None:
        from prefect.client.schemas.actions import ArtifactCreate

        created = client.create_artifact(ArtifactCreate(
            key=artifact_key(task_name), type="markdown", description=description,
            data=markdown, flow_run_id=flow_run_id, task_run_id=task_run_id,
        ))
        return _uuid(created.id)
    from prefect.artifacts import create_markdown_artifact

    return _uuid(create_markdown_artifact(
        markdown=markdown, key=artifact_key(task_name), description=description, **_SYNC,
    ))



def metrics_table(progress: Progress) -> list[dict[str, Any]]:
    """The rows of the metrics table artifact: one per metric of a report, then step and ETA.

    Args:
        progress: The report.

    Returns:
        ``[{"metric": name, "value": value}, ...]``.
    """
    rows: list[dict[str, Any]] = [{"metric": k, "value": v} for k, v in progress.metrics.items()]
    if progress.step is not None:
        rows.append({"metric": "step", "value": progress.step})
    if progress.total is not None:
        rows.append({"metric": "total", "value": progress.total})
    if progress.eta_s is not None:
        rows.append({"metric": "eta_s", "value": round(progress.eta_s, 1)})
    return rows


class ProgressArtifacts:
    """Shows a job's progress reports on its task run: a progress artifact updated in place
    (its description is the report in one line: step, metrics, ETA), and a metrics table
    artifact of the last report when the job has ended.

    Args:
        client: A sync Prefect client (the calls are made from the task's follower thread).
        task_name: The Prefect task's name (artifact keys).
        flow_run_id: The flow run.
        task_run_id: The task run.
    """

    def __init__(
        self, client: Any, task_name: str, flow_run_id: UUID | None, task_run_id: UUID | None
    ) -> None:
        self.client = client
        self.task_name = task_name
        self.flow_run_id = flow_run_id
        self.task_run_id = task_run_id
        self.artifact_id: UUID | None = None

    def show(self, progress: Progress) -> None:
        """Creates the progress artifact on the first report, updates it on the next ones.

        Args:
            progress: The job's latest report.
        """
        from prefect.client.schemas.actions import ArtifactCreate, ArtifactUpdate

        percent = round(100.0 * (progress.fraction or 0.0), 2)
        description = f"tether progress: {progress.format()}"
        if self.artifact_id is not None:
            self.client.update_artifact(
                self.artifact_id, ArtifactUpdate(data=percent, description=description))
            return
        created = self.client.create_artifact(ArtifactCreate(
            key=artifact_key(self.task_name, "progress"), type="progress", data=percent,
            description=description, flow_run_id=self.flow_run_id,
            task_run_id=self.task_run_id,
        ))
        self.artifact_id = _uuid(created.id)

    def show_metrics(self, progress: Progress) -> UUID | None:
        """Publishes the metrics table of the job's last report (None when it has none).

        Args:
            progress: The job's last report.

        Returns:
            The artifact's id.
        """
        from prefect.client.schemas.actions import ArtifactCreate

        rows = metrics_table(progress)
        if not rows:
            return None
        created = self.client.create_artifact(ArtifactCreate(
            key=artifact_key(self.task_name, "metrics"), type="table", data=json.dumps(rows),
            description=f"tether metrics: {progress.format()}",
            flow_run_id=self.flow_run_id, task_run_id=self.task_run_id,
        ))
        return _uuid(created.id)
