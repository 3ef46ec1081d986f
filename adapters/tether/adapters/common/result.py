"""What a job session hands back: the job's result, the error of a job that failed, its key.

:class:`JobResult` and :class:`JobFailedError` are stored by orchestrators (Prefect persists
results, Airflow and Prefect pickle exceptions) under their public path
``tether.adapters.common``, which their ``__module__`` names so that pickles made by any
version find them there.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from tether.errors import TetherError
from tether.specs import AppState


class JobFailedError(TetherError, RuntimeError):
    """The job finished without succeeding; the message is the job's own error."""

    __module__ = "tether.adapters.common"

    def __init__(self, result: JobResult) -> None:
        detail = result.msg or "no message from the scheduler"
        super().__init__(
            f"tether job {result.app_handle} finished {result.state.name}: {detail}"
        )
        self.result = result

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the result, so it survives pickling (orchestrators persist exceptions)
        return (type(self), (self.result,))


@dataclass
class JobResult:
    """The outcome of a job, in a form every orchestrator can store.

    Attributes:
        app_handle: The job's handle.
        state: Final state.
        msg: The scheduler's message (the failure reason).
        ui_url: Link to the job's UI, if any.
        outputs: What the job published through ``AppRun.add_output``.
        num_restarts: Restarts the scheduler made.
        reattached: Whether this run re-attached to a job launched by an earlier attempt.
        progress: The job's last progress report (``Progress.to_dict()``), if it reported.
    """

    __module__ = "tether.adapters.common"

    app_handle: str
    state: AppState
    msg: str = ""
    ui_url: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    num_restarts: int = 0
    reattached: bool = False
    progress: dict[str, Any] | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the job SUCCEEDED."""
        return self.state == AppState.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable summary (state as its name)."""
        return {
            "app_handle": self.app_handle,
            "state": self.state.name,
            "msg": self.msg,
            "ui_url": self.ui_url,
            "outputs": self.outputs,
            "num_restarts": self.num_restarts,
            "reattached": self.reattached,
            "progress": self.progress,
        }


_KEY_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def job_key(orchestrator: str, *parts: object) -> str:
    """A stable job identity from an orchestrator's ids.

    The key is short and label-safe (Kubernetes label values, AWS tags, Slurm comments): the
    orchestrator's name plus a hash of the parts.

    Args:
        orchestrator: ``airflow``, ``prefect``, ``kfp``...
        *parts: The ids that identify one logical task execution across retries (e.g.
            dag_id, run_id, task_id, map_index).

    Returns:
        The key, e.g. ``airflow-3f2a...``.
    """
    text = "\x1f".join(str(p) for p in parts)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return f"{_KEY_SAFE.sub('-', orchestrator)[:20]}-{digest}"
