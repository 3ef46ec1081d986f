"""A component that carries a secret of every kind and prints them all (adapters' secret tests).

The same planted values as ``tests/cli/test_secret_surfaces.py``: secret-looking env names, a
DSN with a password, ``--password``/``--token`` args, a URL with userinfo, plus a
secret-named component parameter (``api_token``). The job prints every value to stdout and
stderr, records them as tracker metadata when a tracker is configured, and exits 3.
"""

from __future__ import annotations

import sys

from tests.cli.test_secret_surfaces import ARGS, ENV
from tether.specs import AppDef, Role

PLANTED = "SEK" + "RIT"
"""Every secret value starts with this: grep any output for it (spelt in two pieces: KFP
launcher steps ship this module's source)."""

PARAM_SECRET = PLANTED + "_param"
"""The value tests pass as the component's ``api_token`` parameter."""

SCRIPT = """
import os, sys
names = [k for k in sorted(os.environ) if os.environ[k].count("SEK" + "RIT")]
for k in names:
    print(k + "=" + os.environ[k], flush=True)
    print(k + "=" + os.environ[k], file=sys.stderr, flush=True)
print("args", *sys.argv[1:], flush=True)
print("args", *sys.argv[1:], file=sys.stderr, flush=True)
if os.environ.get("TETHER_TRACKERS"):
    from tether.tracker import AppRun
    run = AppRun.run_from_env()
    run.add_metadata(argv=sys.argv[1:], env={k: os.environ[k] for k in names},
                     note="dsn " + os.environ["DATABASE_URL"])
    run.add_artifact("repo", "https://bob:" + os.environ["MYSQL_PWD"] + "@git.example/r.git",
                     {"HF_TOKEN": os.environ["HF_TOKEN"]})
sys.exit(3)
"""


def leaky(api_token: str = "") -> AppDef:
    """An app whose env, args and stderr hold every kind of secret.

    Args:
        api_token: A secret-named parameter, passed on as ``--api-token``.

    Returns:
        The app.
    """
    extra = ["--api-token", api_token] if api_token else []
    return AppDef("leaky", roles=[Role(
        "r", image="python:3.12", entrypoint=sys.executable,
        args=["-c", SCRIPT, *ARGS, *extra], env=dict(ENV),
    )])


def leaks(surfaces: dict[str, str]) -> dict[str, list[str]]:
    """The lines of each surface that show a planted secret.

    Args:
        surfaces: Surface name to its text.

    Returns:
        Surface name to the offending lines (empty: no leak).
    """
    return {
        name: [ln for ln in text.splitlines() if PLANTED in ln]
        for name, text in surfaces.items()
        if PLANTED in text
    }
