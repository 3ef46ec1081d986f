"""The interface of a ``tether`` subcommand, built-in or plugin.

Plugins register a :class:`SubCommand` subclass (the class, not an instance) in the
entry-point group ``tether.cli.cmds``; the key is the command's name::

    [project.entry-points."tether.cli.cmds"]
    my_tool = "my_pkg.cli:CmdMyTool"
"""

from __future__ import annotations

import abc
import argparse


class SubCommand(abc.ABC):
    """One ``tether`` subcommand.

    Attributes:
        help: One line shown by ``tether --help`` (defaults to the class docstring's first
            line).
    """

    help: str = ""

    @abc.abstractmethod
    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        """Declares the command's arguments.

        Args:
            subparser: The command's parser.
        """

    @abc.abstractmethod
    def run(self, args: argparse.Namespace) -> None:
        """Runs the command.

        Raise :class:`~tether.cli.common.CLIError` (or ``ValueError``/``KeyError``) for user
        mistakes: ``tether`` prints them as one line and exits 1. ``SystemExit`` sets the exit
        code.

        Args:
            args: The parsed arguments.
        """

    def summary(self) -> str:
        """The one-line help of the command."""
        if self.help:
            return self.help
        doc = (type(self).__doc__ or "").strip()
        return doc.split("\n", 1)[0]
