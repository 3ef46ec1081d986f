"""Component code that ships with a launcher step: the source module, embedded in the step.

A launcher step builds its job when it runs, in the cluster, so it needs the component's
code there. Registered components (the builtins, a package's entry points) come with the
launcher image; any other component (a function of the pipeline file itself, ``__main__``;
``path/to/file.py:fn``; ``package.module:fn``) has its whole source module embedded in the
step when the pipeline is compiled, as KFP's lightweight components embed their function,
and the step runs that copy. So a pipeline compiled on a laptop runs in the cluster, and
runs the code it was compiled with.

The module is run under its own name (``package.module``; ``tether_kfp_shipped_<file>`` for
files and ``__main__``, so an ``if __name__ == "__main__":`` block does not run), with
``__file__`` set to the original path. What the module imports must be installed in the
launcher image: only the module itself ships.

Nothing here imports KFP.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tether.errors import SpecError

_SHIPPED_PREFIX = "tether_kfp_shipped_"
_FILE_MODULE_PREFIX = "tether_component_file_"  # tether.components.finder's name for files
_INSTALLED_PREFIXES = ("tether.",)


class ShipError(SpecError):
    """A component's code cannot be shipped with a launcher step (the message says why)."""


@dataclass(frozen=True)
class ShippedSource:
    """A component's source module, as it travels in a launcher step.

    Attributes:
        module: The name the module runs under in the step.
        filename: Where it came from (for tracebacks and messages).
        function: The component's name in the module.
        text: The module's source.
    """

    module: str
    filename: str
    function: str
    text: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ShippedSource:
        """Reads :meth:`to_dict`'s form.

        Args:
            doc: The JSON object.

        Returns:
            The source.

        Raises:
            ValueError: When a field is missing.
        """
        try:
            return cls(module=str(doc["module"]), filename=str(doc["filename"]),
                       function=str(doc["function"]), text=str(doc["text"]))
        except KeyError as e:
            raise ValueError(f"shipped component source lacks the field {e.args[0]!r}") from None


_LOADED: dict[str, ShippedSource] = {}
"""Shipped modules run in this process, by module name: when one defines steps itself (a
pipeline file), they ship the same text again (the original file is not here)."""


def _registered(name: str) -> bool:
    from tether.components.finder import get_components

    return name in get_components()


def _function(component: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(component):
        return component
    from tether.components.finder import get_component

    return get_component(component).fn


def ship(component: str | Callable[..., Any]) -> tuple[str, ShippedSource | None]:
    """What a launcher step needs to find the component when it runs.

    Args:
        component: A component name or function.

    Returns:
        The component's name for messages and, unless it is registered or part of tether,
        its source module.

    Raises:
        ShipError: For a function that is not at the top level of its module (nested, a
            lambda), or whose source cannot be read.
    """
    if isinstance(component, str) and _registered(component):
        return component, None
    fn = _function(component)
    module_name = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    if not module_name or "<" in qualname or "." in qualname:
        raise ShipError(
            f"component {qualname or fn!r} (module {module_name or '?'!r}) cannot be shipped "
            "with a launcher step: define it at the top level of a module or file, or pass "
            "its name ('pkg.module:fn' or 'path/to/file.py:fn')"
        )
    if module_name.startswith(_INSTALLED_PREFIXES):  # comes with the launcher image
        return (component if isinstance(component, str) else f"{module_name}:{qualname}"), None
    if module_name in _LOADED:  # running in a step already: ship what was shipped here
        loaded = _LOADED[module_name]
        return f"{os.path.basename(loaded.filename)}:{qualname}", ShippedSource(
            module=loaded.module, filename=loaded.filename, function=qualname, text=loaded.text)
    try:
        path = inspect.getsourcefile(fn)
        if path is None:
            raise OSError("no source file")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, TypeError) as e:
        raise ShipError(
            f"the source of component {module_name}:{qualname} cannot be read to ship it with "
            f"a launcher step ({e}); register it in a package the launcher image installs"
        ) from e
    if module_name == "__main__" or module_name.startswith(_FILE_MODULE_PREFIX):
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        run_as = f"{_SHIPPED_PREFIX}{stem}"
        display = f"{os.path.basename(path)}:{qualname}"
    else:
        run_as = module_name
        display = f"{module_name}:{qualname}"
    if isinstance(component, str):
        display = component
    # the file's name only: where it lay on the compiling machine means nothing in the cluster,
    # and the compiled pipeline must not depend on the checkout's location
    return display, ShippedSource(
        module=run_as, filename=os.path.basename(path), function=qualname, text=text
    )


def _compile_time_kfp() -> None:
    """Completes KFP's import in a KFP step, so the shipped module may define pipelines.

    A lightweight step runs with ``_KFP_RUNTIME=true``, which imports only KFP's runtime part;
    a pipeline file then fails to ``from kfp import dsl, compiler`` (a circular import). The
    packages' ``__init__`` are run again with the flag off, which imports the rest in order.
    """
    if os.environ.get("_KFP_RUNTIME", "").lower() != "true" or "kfp" not in sys.modules:
        return
    os.environ["_KFP_RUNTIME"] = "false"
    try:
        import kfp
        import kfp.dsl

        importlib.reload(kfp.dsl)
        importlib.reload(kfp)
    except Exception:  # noqa: S110 - the module may not need KFP at all; it reports its own error
        pass
    finally:
        os.environ["_KFP_RUNTIME"] = "true"


def load_shipped(source: ShippedSource) -> Callable[..., Any]:
    """Runs a shipped module and returns the component (in the step, at run time).

    Args:
        source: The shipped source.

    Returns:
        The component function.

    Raises:
        ShipError: When the module fails to run or lacks the function.
    """
    _compile_time_kfp()
    package = source.module.rpartition(".")[0]
    if package:
        with contextlib.suppress(ImportError):
            importlib.import_module(package)  # so that relative imports resolve
    module = types.ModuleType(source.module)
    module.__file__ = source.filename
    module.__package__ = package
    previous = sys.modules.get(source.module)
    sys.modules[source.module] = module  # dataclasses and pickling look it up
    _LOADED[source.module] = source
    try:
        code = compile(source.text, source.filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the component's own code, shipped by its author
    except Exception as e:
        _LOADED.pop(source.module, None)
        if previous is not None:
            sys.modules[source.module] = previous
        else:
            sys.modules.pop(source.module, None)
        raise ShipError(
            f"the component code shipped with this step ({source.filename}) failed to load: "
            f"{type(e).__name__}: {e} (what it imports must be installed in the launcher image)"
        ) from e
    fn = getattr(module, source.function, None)
    if not callable(fn):
        raise ShipError(f"the code shipped from {source.filename} has no function "
                        f"{source.function!r}")
    return fn
