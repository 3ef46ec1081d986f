"""TorchX's ``torchx.runner.config`` functions over ``.tetherconfig`` files.

The same names and behaviour as TorchX, so code that reads or writes ``.torchxconfig`` keeps
working after renaming the import (and the file to ``.tetherconfig``):

* :func:`find_configs`: the files that apply, highest precedence first (``$TETHERCONFIG``
  alone when set, none when it is set but empty, else ``./.tetherconfig`` then
  ``~/.tetherconfig``);
* :func:`load`: one scheduler's section from an open file into a cfg dict (values already in
  the dict win), converted to the options' types;
* :func:`apply`: :func:`load` over every file of :func:`find_configs`;
* :func:`get_configs` / :func:`get_config`: the ``[prefix:name]`` section (e.g.
  ``component:dist.ddp``); :func:`load_sections`: every ``[prefix:*]`` section by name;
* :func:`dump`: writes a template with every scheduler's run options.

The :class:`tether.config.TetherConfig` object the Runner uses reads the same files with the
same precedence; these functions are the TorchX-shaped entry points to them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from tether.config import CONFIG_FILE, ENV_TETHERCONFIG, ConfigError, parse_ini
from tether.specs import CfgVal, runopts

CONFIG_PREFIX_DELIM = ":"
NONE_VALUE = "None"
"""How :func:`dump` writes an option without a default; :func:`load` reads it as None."""

__all__ = [
    "CONFIG_FILE",
    "CONFIG_PREFIX_DELIM",
    "ENV_TETHERCONFIG",
    "apply",
    "dump",
    "find_configs",
    "get_config",
    "get_configs",
    "load",
    "load_sections",
]


def _default_dirs() -> list[str]:
    return [str(Path.cwd()), str(Path.home())]


def find_configs(dirs: Iterable[str] | None = None) -> list[str]:
    """The config files that apply, highest precedence first.

    Args:
        dirs: Directories to look in (default: the current directory, then ``$HOME``).

    Returns:
        ``[$TETHERCONFIG]`` when the variable is set, none when it is set but empty (config
        files off), else each ``<dir>/.tetherconfig`` that exists (each file once).

    Raises:
        ConfigError: When ``$TETHERCONFIG`` names a missing file.
    """
    explicit = os.environ.get(ENV_TETHERCONFIG)
    if explicit is not None and not explicit.strip():
        return []  # set but empty: config files are off (as TorchX)
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"${ENV_TETHERCONFIG}={explicit!r} does not exist")
        return [explicit]
    found: list[str] = []
    seen: set[str] = set()
    for d in _default_dirs() if dirs is None else dirs:
        path = Path(d) / CONFIG_FILE
        key = str(path.resolve())
        if path.is_file() and key not in seen:
            seen.add(key)
            found.append(str(path))
    return found


def _scheduler_opts(scheduler: str) -> runopts:
    from tether.schedulers import get_scheduler_factory

    sched = get_scheduler_factory(scheduler)("config")
    try:
        return sched.run_opts()
    finally:
        sched.close()


def load(scheduler: str, f: TextIO, cfg: dict[str, CfgVal]) -> None:
    """Loads ``[scheduler]`` of an open config file into ``cfg`` (keys already set win).

    Values are converted to the scheduler's option types (``None`` is None); keys the
    scheduler does not declare are kept as strings (the scheduler's validation rejects them
    with a close match).

    Args:
        scheduler: The scheduler's name.
        f: The open file.
        cfg: The run options, updated in place.

    Raises:
        ConfigError: For a malformed file.
    """
    section = parse_ini(f.read(), getattr(f, "name", "<config>")).get(scheduler, {})
    if not section:
        return
    opts = _scheduler_opts(scheduler)
    for key, val in section.items():
        if key in cfg:
            continue
        opt = opts.get(key)
        if val.strip() == NONE_VALUE:  # what dump writes for an option without a default
            cfg[key] = None
        elif opt is None or opt.opt_type is str:
            cfg[key] = val
        else:
            cfg[key] = opts.cfg_from_str(f"{key}={val}")[key]


def apply(scheduler: str, cfg: dict[str, CfgVal], dirs: Iterable[str] | None = None) -> None:
    """Fills ``cfg`` from every config file of :func:`find_configs` (explicit values win).

    Args:
        scheduler: The scheduler's name.
        cfg: The run options, updated in place.
        dirs: Directories to look in (see :func:`find_configs`).
    """
    for path in find_configs(dirs):
        with open(path, encoding="utf-8") as f:
            load(scheduler, f, cfg)


def load_sections(prefix: str, dirs: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """Every ``[prefix:name]`` section of the config files, by ``name`` (higher precedence
    files win key by key).

    Args:
        prefix: E.g. ``component`` (for ``[component:dist.ddp]``).
        dirs: Directories to look in (see :func:`find_configs`).

    Returns:
        Section name without the prefix -> its keys and values.
    """
    head = f"{prefix}{CONFIG_PREFIX_DELIM}"
    out: dict[str, dict[str, str]] = {}
    for path in reversed(find_configs(dirs)):
        with open(path, encoding="utf-8") as f:
            for section, values in parse_ini(f.read(), path).items():
                name = section[len(head) :] if section.startswith(head) else ""
                if name:
                    out.setdefault(name, {}).update(values)
    return out


def get_configs(prefix: str, name: str, dirs: Iterable[str] | None = None) -> dict[str, str]:
    """The ``[prefix:name]`` section merged over the config files (higher precedence wins).

    Args:
        prefix: E.g. ``component``.
        name: E.g. ``dist.ddp``.
        dirs: Directories to look in (see :func:`find_configs`).

    Returns:
        The section's keys and values.
    """
    section = f"{prefix}{CONFIG_PREFIX_DELIM}{name}"
    out: dict[str, str] = {}
    for path in reversed(find_configs(dirs)):
        with open(path, encoding="utf-8") as f:
            out.update(parse_ini(f.read(), path).get(section, {}))
    return out


def get_config(prefix: str, name: str, key: str, dirs: Iterable[str] | None = None) -> str | None:
    """One value of ``[prefix:name]``, or None.

    Args:
        prefix: E.g. ``component``.
        name: E.g. ``dist.ddp``.
        key: The key.
        dirs: Directories to look in (see :func:`find_configs`).

    Returns:
        The value, or None when no file sets it.
    """
    return get_configs(prefix, name, dirs).get(key)


def _text(val: CfgVal) -> str:
    if isinstance(val, list):
        return ";".join(val)
    if isinstance(val, Mapping):
        return ";".join(f"{k}:{v}" for k, v in val.items())
    return str(val)


def dump(f: TextIO, schedulers: list[str] | None = None, required_only: bool = False) -> None:
    """Writes a config template: one section per scheduler with its run options.

    Options with a default are written as ``key = default``, optional ones without a default
    as ``key = None`` (so :func:`load` gives every option back); required ones are written
    commented out, with their help, for the user to fill in.

    Args:
        f: Where to write.
        schedulers: Which schedulers (default: every registered one).
        required_only: Write only the required options.

    Raises:
        ConfigError: (a ``ValueError``) For a scheduler name that is not registered.
    """
    from tether.schedulers import get_scheduler_factories

    known = get_scheduler_factories()
    names = schedulers if schedulers else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"cannot dump run options of unknown scheduler(s) {unknown}; known: "
            f"{', '.join(known)}"
        )
    for name in names:
        f.write(f"[{name}]\n")
        for key, opt in _scheduler_opts(name):
            if required_only and not opt.is_required:
                continue
            req = "required, " if opt.is_required else ""
            f.write(f"# {opt.help} ({req}{opt.type_name()})\n")
            if opt.is_required:
                f.write(f"#{key} = \n")
            elif opt.default is None or opt.default == [] or opt.default == {}:
                f.write(f"{key} = {NONE_VALUE}\n")
            else:
                f.write(f"{key} = {_text(opt.default)}\n")
        f.write("\n")
