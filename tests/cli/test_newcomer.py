"""Mistakes a newcomer makes in the first days, typed as a user types them.

Each test runs the ``tether`` console script's code as a separate process (real local jobs,
real files) and checks what the user reads and the exit code.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from pathlib import Path

from tests.cli.conftest import Result
from tether.specs import parse_app_handle

TetherProc = Callable[..., Result]


def test_the_handle_error_shows_a_handle_shaped_like_real_ones(tether_proc: TetherProc) -> None:
    ran = tether_proc("run", "utils.echo", "--msg", "hi")
    assert ran.code == 0, ran.err
    real = parse_app_handle(ran.out.splitlines()[0])

    bad = tether_proc("status", "echo-12345678")
    assert bad.code != 0 and "Traceback" not in bad.err
    example = re.search(r"e\.g\. (\S+)", bad.err)
    assert example, bad.err
    shown = parse_app_handle(example.group(1))
    assert (shown.scheduler_backend, shown.session_name) == (
        real.scheduler_backend, real.session_name)
    # an app id is the app's name, a dash and a random suffix of the same length
    _name, _, suffix = real.app_id.rpartition("-")
    assert re.fullmatch(rf"[a-z0-9]+-[a-z0-9]{{{len(suffix)}}}", shown.app_id), shown.app_id


def test_run_options_after_the_component_get_a_hint_with_the_fixed_command(
    tether_proc: TetherProc,
) -> None:
    res = tether_proc("run", "utils.echo", "--msg", "hi", "-s", "kubernetes")
    assert res.code != 0 and "Traceback" not in res.err
    assert "unrecognized argument '-s'" in res.err
    assert "`tether run -s kubernetes utils.echo --msg hi`" in res.err

    res = tether_proc("run", "utils.echo", "--msg", "hi", "--dryrun")
    assert "`tether run --dryrun utils.echo --msg hi`" in res.err


def test_the_default_image_warning_names_only_what_tether_run_accepts(
    tether_proc: TetherProc,
) -> None:
    res = tether_proc("run", "--dryrun", "-s", "kubernetes", "utils.echo", "--msg", "hi")
    assert res.code == 0, res.err
    (warning,) = [line for line in res.err.splitlines() if "default image" in line]
    assert "$TETHER_IMAGE" in warning
    assert "--image" not in warning


def test_a_component_file_imports_a_module_next_to_it(
    tether_proc: TetherProc, tmp_path: Path
) -> None:
    pkg = tmp_path / "mycomps"
    pkg.mkdir()
    (pkg / "helpers.py").write_text("GREETING = 'hello from a helper'\n")
    (pkg / "comp.py").write_text(textwrap.dedent('''\
        import helpers
        import tether.specs as specs


        def greet() -> specs.AppDef:
            """Says hello."""
            return specs.AppDef("greet", roles=[specs.Role(
                "greet", image="unused", entrypoint="echo", args=[helpers.GREETING])])
        '''))
    # run from another directory, with nothing on PYTHONPATH but what tether needs
    res = tether_proc("run", f"{pkg}/comp.py:greet")
    assert res.code == 0, res.err
    assert "hello from a helper" in res.out.splitlines()
