"""Finding components by name.

A component name is one of:

* a registered name: the builtins (``dist.ddp``, ``utils.echo``...) or components of packages
  registered in the entry-point group ``tether.components``;
* ``path/to/file.py:fn``: a function in a Python file;
* ``package.module:fn``: a function in an importable module.

**Entry points.** ``foo = my_project.bar`` in the group ``tether.components`` searches the
package ``my_project.bar`` (and its sub-packages that have an ``__init__.py``) and exposes
``my_project.bar.baz.trainer`` as ``foo.baz.trainer``. Keys ``_``, ``_0``, ``_1``... drop the
prefix (``baz.trainer``). Registering any entry point replaces the builtins; register
``_ = tether.components`` to keep them under their usual names.

A function counts as a component of a module when it is public, defined in that module and
annotated to return ``AppDef``; components with problems are still found and carry their
:attr:`ComponentInfo.validation_errors`. Modules whose name starts with ``_`` are not searched,
nor the sub-modules a package lists in ``__tether_not_components__`` (helpers that return
AppDefs without being components, like :func:`tether.components.args.materialize`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from tether.components.params import inspect_component, returns_appdef_annotation
from tether.errors import NotFoundError, SpecError
from tether.util.entry_points import entry_points

if TYPE_CHECKING:
    from tether.util.entry_points import EntryPointLike

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "tether.components"
BUILTINS_PACKAGE = "tether.components"

_NO_PREFIX = re.compile(r"^_\d*$")


class ComponentNotFoundError(SpecError, NotFoundError):
    """No component has the given name; the message lists close matches."""


class ComponentInfo:
    """A component found by name.

    Only the name and the function are known when a component is found; the docstring is
    parsed and the signature validated when :attr:`description` or
    :attr:`validation_errors` is first read (a dryrun of one component does not inspect
    every registered one).

    Attributes:
        name: The name it was found under (``dist.ddp``, ``path/file.py:fn``...).
        fn: The function.
        module: The function's module.
    """

    def __init__(self, name: str, fn: Callable[..., Any], module: str = "") -> None:
        self.name = name
        self.fn = fn
        self.module = module
        self._inspected: tuple[str, list[str]] | None = None
        self._location: tuple[str | None, int | None] | None = None

    def __repr__(self) -> str:
        return f"ComponentInfo(name={self.name!r}, module={self.module!r})"

    def _inspect(self) -> tuple[str, list[str]]:
        if self._inspected is None:
            spec = inspect_component(self.fn)
            file, line = self.file, self.line
            where = f"{file}:{line}: " if file else ""
            fn_name = getattr(self.fn, "__qualname__", str(self.fn))
            self._inspected = (
                spec.short_description, [f"{where}{fn_name}: {e}" for e in spec.errors]
            )
        return self._inspected

    @property
    def fn_name(self) -> str:
        """The function's name (``ddp`` for ``dist.ddp``), as TorchX's component record."""
        return str(getattr(self.fn, "__name__", self.name.rpartition(".")[2]))

    @property
    def description(self) -> str:
        """The docstring's summary."""
        return self._inspect()[0]

    @property
    def validation_errors(self) -> list[str]:
        """Why it cannot be used (``file:line: reason``); empty when valid."""
        return self._inspect()[1]

    @property
    def file(self) -> str | None:
        """The source file, when known."""
        if self._location is None:
            self._location = source_location(self.fn)
        return self._location[0]

    @property
    def line(self) -> int | None:
        """The line of the ``def``, when known."""
        if self._location is None:
            self._location = source_location(self.fn)
        return self._location[1]

    @property
    def is_valid(self) -> bool:
        """True when the function can be used as a component."""
        return not self.validation_errors


@dataclass
class DiscoveryProblem:
    """A module that could not be searched (import error, namespace package...)."""

    source: str
    message: str


def source_location(fn: Callable[..., Any]) -> tuple[str | None, int | None]:
    """The file and ``def`` line of a function.

    Args:
        fn: The function.

    Returns:
        ``(file, line)``; either may be None when unknown.
    """
    try:
        target = inspect.unwrap(fn)
        file = inspect.getsourcefile(target) or inspect.getfile(target)
        line = target.__code__.co_firstlineno if hasattr(target, "__code__") else None
        return (os.path.abspath(file) if file else None), line
    except (TypeError, OSError):
        return None, None


def make_info(name: str, fn: Callable[..., Any]) -> ComponentInfo:
    """Builds the :class:`ComponentInfo` of a function (validated when first read).

    Args:
        name: The component's name.
        fn: The function.

    Returns:
        The info.
    """
    return ComponentInfo(name, fn, module=getattr(fn, "__module__", "") or "")


def _module_components(module: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    for fn_name, fn in inspect.getmembers(module, inspect.isfunction):
        if fn_name.startswith("_") or fn.__module__ != module.__name__:
            continue
        if returns_appdef_annotation(fn):
            yield fn_name, fn


def _walk(
    module: ModuleType, problems: list[DiscoveryProblem]
) -> Iterator[ModuleType]:
    """The module and, for a regular package, its sub-modules (recursively)."""
    yield module
    path = getattr(module, "__path__", None)
    if path is None:
        return
    skip = set(getattr(module, "__tether_not_components__", ()))
    for sub in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if sub.name.startswith("_") or sub.name in skip:
            continue
        full = f"{module.__name__}.{sub.name}"
        if sub.ispkg:
            pkg_dir = os.path.join(getattr(sub.module_finder, "path", ""), sub.name)
            if not os.path.isfile(os.path.join(pkg_dir, "__init__.py")):
                continue  # namespace package: not searched
        try:
            child = importlib.import_module(full)
        except Exception as e:
            problems.append(DiscoveryProblem(full, f"cannot import {full}: {e}"))
            continue
        yield from _walk(child, problems) if sub.ispkg else iter([child])


def discover(
    groups: Mapping[str, str],
) -> tuple[dict[str, ComponentInfo], list[DiscoveryProblem]]:
    """Finds the components of the given registrations.

    Args:
        groups: Prefix to module name, as in the entry points (``{"foo": "my_project.bar"}``);
            ``_``, ``_0``... mean no prefix.

    Returns:
        Components by name, and the modules that could not be searched.
    """
    found: dict[str, ComponentInfo] = {}
    problems: list[DiscoveryProblem] = []
    for prefix, module_name in groups.items():
        try:
            root = importlib.import_module(module_name)
        except Exception as e:
            problems.append(DiscoveryProblem(
                module_name, f"cannot import {module_name} (registered as {prefix!r}): {e}"))
            continue
        if getattr(root, "__file__", None) is None:
            problems.append(DiscoveryProblem(
                module_name, f"{module_name} (registered as {prefix!r}) is a namespace package "
                "without __init__.py; only regular packages are searched"))
            continue
        is_pkg = hasattr(root, "__path__")
        for mod in _walk(root, problems):
            rel = mod.__name__[len(root.__name__):].lstrip(".") if is_pkg else ""
            if not is_pkg:
                rel = ""
            for fn_name, fn in _module_components(mod):
                parts = [] if _NO_PREFIX.match(prefix) else [prefix]
                parts += [p for p in rel.split(".") if p] + [fn_name]
                name = ".".join(parts)
                if name not in found:
                    found[name] = make_info(name, fn)
    return found, problems


def registered_groups(eps: Iterable[EntryPointLike] | None = None) -> dict[str, str]:
    """The registrations in effect: the entry points, or the builtins when there are none.

    Args:
        eps: Entry points of the ``tether.components`` group (default: the installed ones).

    Returns:
        Prefix to module name.
    """
    if eps is None:
        eps = entry_points(ENTRY_POINT_GROUP)
    groups = {ep.name: ep.value for ep in eps}
    if not groups:
        groups = {"_": BUILTINS_PACKAGE}
    return groups


@lru_cache(maxsize=1)
def _registry() -> tuple[dict[str, ComponentInfo], list[DiscoveryProblem]]:
    return discover(registered_groups())


def get_components() -> dict[str, ComponentInfo]:
    """Every registered component (valid or not), by name.

    Returns:
        Name to info, sorted by name.
    """
    comps, _ = _registry()
    return dict(sorted(comps.items()))


def discovery_problems() -> list[DiscoveryProblem]:
    """Modules of the registrations that could not be searched (shown by ``tether builtins``).

    Returns:
        The problems.
    """
    return list(_registry()[1])


def reset_cache() -> None:
    """Forgets the discovered components (after installing a plugin)."""
    _registry.cache_clear()


def _load_file(path: str) -> ModuleType:
    abspath = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(abspath):
        raise ComponentNotFoundError(
            f"component file {path!r} does not exist (looked at {abspath})"
        )
    import hashlib  # only for component files: the CLI's start does without it

    digest = hashlib.sha1(abspath.encode(), usedforsecurity=False).hexdigest()[:12]
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(abspath))[0])
    mod_name = f"tether_component_file_{stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, abspath)
    if spec is None or spec.loader is None:
        raise ComponentNotFoundError(f"cannot load {path!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    # as Python does for a script, the file's directory comes first on the path while it
    # loads: `import helpers` finds the helpers.py next to it
    here = os.path.dirname(abspath)
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[mod_name]
        raise ComponentNotFoundError(
            f"cannot load component file {path!r}: {type(e).__name__}: {e}"
        ) from e
    finally:
        if added and here in sys.path:
            sys.path.remove(here)
    return module


def _looks_like_file(ref: str) -> bool:
    return ref.endswith(".py") or "/" in ref or os.sep in ref or os.path.isfile(ref)


def _function_of(module: ModuleType, fn_name: str, name: str, where: str) -> Callable[..., Any]:
    fn = getattr(module, fn_name, None)
    if fn is None:
        candidates = [n for n, _ in _module_components(module)] or [
            n for n, f in inspect.getmembers(module, inspect.isfunction) if not n.startswith("_")
        ]
        import difflib  # for an error's hint only: not on the start-up path

        close = difflib.get_close_matches(fn_name, candidates, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        avail = f" (components there: {', '.join(candidates)})" if candidates and not close else ""
        raise ComponentNotFoundError(f"{where} has no function {fn_name!r}{hint}{avail}")
    if not callable(fn):
        raise ComponentNotFoundError(f"{name!r}: {fn_name!r} in {where} is not a function")
    return fn


def _lookup(name: str) -> ComponentInfo | None:
    """Finds a registered name by importing only the module it names.

    Gives what :func:`discover` would (the first registration that has the name wins), without
    importing every module of every registration. None when the name is not found this way
    (the caller then searches everything, for the same answer or the error's close matches).
    """
    if ":" in name or "/" in name or os.sep in name:
        return None
    for prefix, module_name in registered_groups().items():
        if _NO_PREFIX.match(prefix):
            rest = name
        elif name.startswith(prefix + "."):
            rest = name[len(prefix) + 1:]
        else:
            continue
        *rel, fn_name = rest.split(".")
        module = _registered_module(module_name, rel)
        if module is None:
            return None  # not decided here (an import error...): the full search reports it
        if module is False:
            continue
        for found_name, fn in _module_components(module):
            if found_name == fn_name:
                return make_info(name, fn)
    return None


def _registered_module(
    module_name: str, rel: list[str]
) -> ModuleType | Literal[False] | None:
    """The module ``rel`` of a registration as :func:`_walk` would reach it.

    Returns:
        The module; False when the registration has no such searched module; None when
        that cannot be told without the full search.
    """
    try:
        mod = importlib.import_module(module_name)
    except Exception:
        return None
    if getattr(mod, "__file__", None) is None:
        return None
    for part in rel:
        path = getattr(mod, "__path__", None)
        if path is None or not part or part.startswith("_"):
            return False
        if part in set(getattr(mod, "__tether_not_components__", ())):
            return False
        sub = next((m for m in pkgutil.iter_modules(path) if m.name == part), None)
        if sub is None:
            return False
        if sub.ispkg:
            pkg_dir = os.path.join(getattr(sub.module_finder, "path", ""), sub.name)
            if not os.path.isfile(os.path.join(pkg_dir, "__init__.py")):
                return False  # a namespace package: not searched
        try:
            mod = importlib.import_module(f"{mod.__name__}.{part}")
        except Exception:
            return None
    return mod


def get_component(name: str) -> ComponentInfo:
    """Finds a component by name.

    Args:
        name: ``dist.ddp``, ``foo.baz.trainer`` (entry points), ``path/to/file.py:fn`` or
            ``package.module:fn``.

    Returns:
        The component; check :attr:`ComponentInfo.validation_errors` before calling it
        (:func:`tether.components.args.materialize` does).

    Raises:
        ComponentNotFoundError: When nothing has that name; the message lists close matches.
    """
    name = name.strip()
    if not name:
        raise ComponentNotFoundError("empty component name (try `tether builtins`)")
    found = _lookup(name)
    if found is not None:
        return found
    comps = get_components()
    if name in comps:
        return comps[name]
    ref, sep, fn_name = name.rpartition(":")
    if sep and ref and fn_name:
        if _looks_like_file(ref):
            module = _load_file(ref)
            where = f"file {ref!r}"
        else:
            try:
                module = importlib.import_module(ref)
            except ModuleNotFoundError as e:
                raise ComponentNotFoundError(
                    f"cannot find component {name!r}: no module {ref!r} ({e}); write "
                    "path/to/file.py:fn for a file, package.module:fn for a module"
                ) from e
            except Exception as e:
                raise ComponentNotFoundError(
                    f"cannot import module {ref!r} of component {name!r}: "
                    f"{type(e).__name__}: {e}"
                ) from e
            where = f"module {ref!r}"
        return make_info(name, _function_of(module, fn_name, name, where))
    import difflib  # for an error's hint only: not on the start-up path

    close = difflib.get_close_matches(name, list(comps), n=4, cutoff=0.5)
    if not close:
        close = [c for c in comps if c.split(".")[-1] == name.split(".")[-1]][:4]
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ComponentNotFoundError(
        f"unknown component {name!r}.{hint} (`tether builtins` lists the registered ones; "
        "use path/to/file.py:fn or package.module:fn for your own)"
    )
