"""Validation of an :class:`AppDef` before anything is submitted."""

from __future__ import annotations

from tether.specs.app import AppDef, check_app
from tether.specs.checks import Problem, raise_problems


def validate(app: AppDef) -> None:
    """Checks an app for mistakes that no scheduler could run.

    Args:
        app: The app.

    Raises:
        SpecTypeError: Listing every problem when one is a value of the wrong type.
        SpecError: Listing every problem, each naming the role, the field and the value.
    """
    problems = check_app(app)
    if not isinstance(app, AppDef) or any(p.is_type for p in problems):
        raise_problems(problems, "AppDef")  # the checks below need the right types
    if not app.roles:
        problems.append(Problem(f"app {app.name!r} has no roles: add at least one Role"))
    seen: set[str] = set()
    for role in app.roles:
        if role.name in seen:
            problems.append(
                Problem(f"duplicate role name {role.name!r}: role names must be unique")
            )
        seen.add(role.name)
        if not role.entrypoint.strip():
            problems.append(
                Problem(
                    f"role {role.name!r}: entrypoint is empty; set the program to run "
                    "(e.g. 'python')"
                )
            )
    raise_problems(problems, "AppDef")
