"""``tether run --stdin``: the component and its arguments read from standard input.

Two forms are accepted:

* a JSON object (TorchX's form), keys as the flags of ``tether run``::

      {"component_name": "dist.ddp",
       "component_args": ["--script", "train.py", "-j", "1x2"],
       "scheduler": "local_cwd", "scheduler_args": {"log_dir": "/tmp/l"},
       "workspace": ".", "dryrun": false, "wait": true, "log": false,
       "parent_run_id": null, "job_key": null}

  ``component_args`` may also be a dict (``{"script": "train.py"}`` -> ``--script
  train.py``); ``scheduler_args`` a dict or a ``k=v,k2=v2`` string;

* anything else: a shell-quoted line, split with :func:`shlex.split`; its words are the
  component and its arguments (or, when the component is on the command line, more
  arguments after it).

Values on the command line win over the ones read from stdin.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from tether.cli.common import CLIError

_FLAGS = ("scheduler", "workspace", "parent_run_id", "job_key")
_SWITCHES = ("dryrun", "wait", "log", "detach")
_KNOWN = {"component_name", "component", "component_args", "scheduler_args", *_FLAGS, *_SWITCHES}


def _args_list(value: Any) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            flag = f"-{k}" if len(k) == 1 else f"--{k}"
            out += [flag, str(v)] if not isinstance(v, bool) else [flag, str(v).lower()]
        return out
    if isinstance(value, str):
        return shlex.split(value)
    raise CLIError(
        f"--stdin: component_args must be a list of strings, a dict or a string, got {value!r}"
    )


def _cfg_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if isinstance(v, list):
                v = ";".join(str(x) for x in v)
            elif isinstance(v, dict):
                v = ";".join(f"{a}:{b}" for a, b in v.items())
            parts.append(f"{k}={v}")
        return ",".join(parts)
    raise CLIError(f"--stdin: scheduler_args must be a dict or k=v,k2=v2, got {value!r}")


def apply_stdin(args: argparse.Namespace, text: str) -> None:
    """Fills ``args`` (the parsed ``tether run`` flags) from what was read on stdin.

    Args:
        args: The parsed flags, updated in place.
        text: Everything read from stdin.

    Raises:
        CLIError: For an unknown JSON key or a value of the wrong type.
    """
    stripped = text.strip()
    try:
        doc = json.loads(stripped) if stripped.startswith("{") else None
    except json.JSONDecodeError as e:
        raise CLIError(f"--stdin: not valid JSON: {e}") from None
    if doc is None:
        words = shlex.split(stripped)
        args.component_name_and_args = list(args.component_name_and_args or []) + words
        return
    if not isinstance(doc, dict):
        raise CLIError("--stdin: expected a JSON object")
    unknown = sorted(set(doc) - _KNOWN)
    if unknown:
        raise CLIError(f"--stdin: unknown keys {unknown}; allowed: {sorted(_KNOWN)}")
    name = doc.get("component_name", doc.get("component"))
    stdin_args = _args_list(doc.get("component_args", []))
    if args.component_name_and_args:
        args.component_name_and_args = list(args.component_name_and_args) + stdin_args
    elif name:
        args.component_name_and_args = [str(name), *stdin_args]
    for key in _FLAGS:
        if getattr(args, key, None) is None and doc.get(key) is not None:
            setattr(args, key, str(doc[key]))
    for key in _SWITCHES:
        if doc.get(key) is not None and not isinstance(doc[key], bool):
            raise CLIError(f"--stdin: {key} must be true or false, got {doc[key]!r}")
        if doc.get(key):
            setattr(args, key, True)
    if not args.scheduler_args and doc.get("scheduler_args"):
        args.scheduler_args = _cfg_str(doc["scheduler_args"])
