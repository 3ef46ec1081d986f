"""``.tetherconfig``: defaults for run options, component arguments, CLI flags and trackers.

An INI file with these sections::

    [local_cwd]                 # run options of a scheduler (same names as -cfg)
    log_dir = /tmp/logs

    [component:dist.ddp]        # default arguments of a component
    j = 1x2

    [cli:run]                   # defaults of a CLI subcommand's flags
    scheduler = local_cwd

    [tether:tracker]            # trackers every job reports to (names; values unused)
    fsspec =

    [tracker:fsspec]            # a tracker's configuration
    config = /tmp/tracking

    [tether:outputs]            # where jobs publish their outputs (an fsspec URL)
    url = s3://bucket/tether-outputs

Lookup order: if ``$TETHERCONFIG`` is set, that file alone (set but empty: no file at all).
Otherwise ``$HOME/.tetherconfig``
then ``./.tetherconfig``; values in the project file (the current directory) win over the
ones in ``$HOME``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import SpecError
from tether.specs import CfgVal, runopts

CONFIG_FILE = ".tetherconfig"
ENV_TETHERCONFIG = "TETHERCONFIG"


class ConfigError(SpecError):
    """A ``.tetherconfig`` file cannot be read; the message names the file and line."""


@dataclass
class TetherConfig:
    """The merged configuration.

    Attributes:
        sections: Section name to key/value strings.
        files: The files read, lowest precedence first.
    """

    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def section(self, name: str) -> dict[str, str]:
        """The keys of one section (empty when absent)."""
        return dict(self.sections.get(name, {}))

    def scheduler_cfg(self, scheduler: str, opts: runopts) -> dict[str, CfgVal]:
        """Run options for ``scheduler`` from its section, converted to their types.

        Args:
            scheduler: The scheduler's name.
            opts: Its run options (types drive the conversion).

        Returns:
            Options from the file (strings converted; unknown keys kept for validation).
        """
        out: dict[str, CfgVal] = {}
        for key, val in self.section(scheduler).items():
            opt = opts.get(key)
            if opt is None or opt.opt_type is str:
                out[key] = val  # unknown keys are reported by validation, with the file
            else:
                out[key] = opts.cfg_from_str(f"{key}={val}")[key]
        return out

    def apply(
        self, scheduler: str, cfg: Mapping[str, CfgVal] | None, opts: runopts
    ) -> dict[str, CfgVal]:
        """Fills ``cfg`` with the file's defaults for ``scheduler`` (explicit values win).

        Args:
            scheduler: The scheduler's name.
            cfg: Options given explicitly.
            opts: The scheduler's run options.

        Returns:
            The merged options.
        """
        merged = self.scheduler_cfg(scheduler, opts)
        merged.update(cfg or {})
        return merged

    def component_defaults(self, component: str) -> dict[str, str]:
        """Default arguments for a component, from ``[component:<name>]``."""
        return self.section(f"component:{component}")

    def cli_defaults(self, subcmd: str) -> dict[str, str]:
        """Default flags of a CLI subcommand, from ``[cli:<subcmd>]``."""
        return self.section(f"cli:{subcmd}")

    def trackers(self) -> dict[str, str | None]:
        """Trackers from ``[tether:tracker]`` with their ``[tracker:<name>] config``."""
        out: dict[str, str | None] = {}
        for name in self.section("tether:tracker"):
            out[name] = self.section(f"tracker:{name}").get("config")
        return out


def config_files(cwd: str | None = None) -> list[str]:
    """The config files that apply, lowest precedence first.

    Args:
        cwd: Directory of the project file (default: the current directory).

    Returns:
        Existing files: ``$TETHERCONFIG`` alone when set (none when it is set but empty),
        else ``~/.tetherconfig`` then ``./.tetherconfig``.

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
    files: list[str] = []
    home = Path.home() / CONFIG_FILE
    proj = Path(cwd or os.getcwd()) / CONFIG_FILE
    for p in (home, proj):
        if p.is_file() and str(p.resolve()) not in [str(Path(f).resolve()) for f in files]:
            files.append(str(p))
    return files


def _read(path: str) -> dict[str, dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return parse_ini(f.read(), path)


def parse_ini(text: str, path: str = "<config>") -> dict[str, dict[str, str]]:
    """Parses the text of a config file.

    Args:
        text: The file's text.
        path: Its name, for error messages.

    Returns:
        Section name to key/value strings (key case kept).

    Raises:
        ConfigError: For a malformed file, naming the file and line.
    """
    import ast  # configparser and ast: only where a config file exists
    import configparser

    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    try:
        parser.read_string(text, source=path)
    except configparser.MissingSectionHeaderError as e:
        raise ConfigError(
            f"{path}:{e.lineno}: expected a [section] header before {e.line.strip()!r}"
        ) from None
    except configparser.ParsingError as e:
        lineno, line = e.errors[0] if e.errors else (0, "")
        try:  # configparser stores the repr() of the offending line
            text = str(ast.literal_eval(line))
        except (ValueError, SyntaxError):
            text = str(line)
        raise ConfigError(f"{path}:{lineno}: cannot parse line {text.strip()!r} (use key = value)"
                          ) from None
    except configparser.DuplicateOptionError as e:
        raise ConfigError(f"{path}:{e.lineno}: key {e.option!r} repeated in [{e.section}]"
                          ) from None
    except configparser.DuplicateSectionError as e:
        raise ConfigError(f"{path}:{e.lineno}: section [{e.section}] repeated") from None
    return {s: dict(parser.items(s)) for s in parser.sections()}


def load_config(cwd: str | None = None, files: list[str] | None = None) -> TetherConfig:
    """Reads and merges the config files.

    Args:
        cwd: Project directory (default: current directory).
        files: Explicit files instead of the lookup (lowest precedence first).

    Returns:
        The merged configuration (empty when there is no file).

    Raises:
        ConfigError: For a malformed file, naming the file and line.
    """
    paths = files if files is not None else config_files(cwd)
    cfg = TetherConfig(files=list(paths))
    for path in paths:
        for section, values in _read(path).items():
            cfg.sections.setdefault(section, {}).update(values)
    return cfg


def dump_config(sections: Mapping[str, Mapping[str, str]], path: str) -> None:
    """Writes a config file atomically.

    Args:
        sections: Section to key/value.
        path: Destination.
    """
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    for name, values in sections.items():
        parser[name] = dict(values)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        parser.write(f)
    os.replace(tmp, path)
