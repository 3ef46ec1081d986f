"""What a launcher step carries from compile time to run time, as JSON in its code.

Nothing here imports KFP: the step's runtime (:mod:`tether.adapters.kfp.launch`) reads it too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

ENV_NAMESPACE = "TETHER_KFP_NAMESPACE"
"""Set in launcher pods of steps whose scheduler runs Kubernetes pods (downward API): the
pipeline's namespace, where the job goes unless the ``namespace`` run option says otherwise."""

SPEC_VERSION = 2
_READABLE_VERSIONS = (1, 2)


@dataclass
class LaunchSpec:
    """The fixed part of a launcher step (the component's arguments come as step inputs).

    Attributes:
        component: A name the step's process can find the component by.
        scheduler: The scheduler to submit to.
        cfg: Run options of the scheduler.
        image: Replaces every role's image, when set.
        env: Added to every role's env.
        outputs: Declared outputs as ``(name, type name)`` pairs.
        inherit: The task's settings for the job (:mod:`tether.adapters.kfp.inherit`):
            ``resource`` (``cpu``, ``memMB``, ``gpu``), ``secrets`` (env name -> ``[secret
            name, key]``), ``node_selector``, ``tolerations``.
        artifacts: Parameters that are KFP artifacts: name -> ``input`` / ``output``.
        source: The component's source module, shipped with the step
            (:mod:`tether.adapters.kfp.ship`); None for components the image has.
        wait_interval: Poll interval while waiting.
        cancel_grace: Seconds to wait for the job to stop after the step is terminated.
        version: Format version.
    """

    component: str
    scheduler: str
    cfg: dict[str, Any] = field(default_factory=dict)
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    inherit: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    source: dict[str, str] | None = None
    wait_interval: float = 5.0
    cancel_grace: float = 30.0
    version: int = SPEC_VERSION

    def to_json(self) -> str:
        """Stable JSON (sorted keys), so compiled pipelines do not change between compiles."""
        doc = asdict(self)
        doc["outputs"] = [list(o) for o in self.outputs]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> LaunchSpec:
        """Reads a spec written by :meth:`to_json`.

        Args:
            text: The JSON.

        Returns:
            The spec.

        Raises:
            ValueError: For a document of another format version or with missing fields.
        """
        doc = json.loads(text)
        version = doc.get("version")
        if version not in _READABLE_VERSIONS:
            raise ValueError(
                f"launcher step spec version {version!r} is not supported by this tether "
                f"(expects {SPEC_VERSION}): recompile the pipeline with the tether of the image"
            )
        try:
            return cls(
                component=doc["component"],
                scheduler=doc["scheduler"],
                cfg=dict(doc.get("cfg") or {}),
                image=doc.get("image"),
                env=dict(doc.get("env") or {}),
                outputs=[(str(n), str(t)) for n, t in doc.get("outputs") or []],
                inherit=dict(doc.get("inherit") or {}),
                artifacts={str(k): str(v) for k, v in (doc.get("artifacts") or {}).items()},
                source=dict(doc["source"]) if doc.get("source") else None,
                wait_interval=float(doc.get("wait_interval", 5.0)),
                cancel_grace=float(doc.get("cancel_grace", 30.0)),
                version=version,
            )
        except KeyError as e:
            raise ValueError(f"launcher step spec lacks the field {e.args[0]!r}") from None
