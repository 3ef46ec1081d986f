"""``tether kfp``: compile KFP pipelines and dry-run tether steps (a ``tether`` plugin command).

::

    tether kfp dryrun examples/pipelines/kfp_train.py:train_pipeline   # mode of each step
    tether kfp dryrun utils.echo -a msg=hi                             # one step in detail
    tether kfp compile examples/pipelines/kfp_train.py:train_pipeline out.yaml

Registered in the ``tether.cli.cmds`` entry-point group; KFP is imported only when the
command runs.
"""

from __future__ import annotations

import argparse

from tether.cli.cmd_base import SubCommand


class CmdKfp(SubCommand):
    """Compile Kubeflow Pipelines and show what tether steps become (dryrun)."""

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        """Declares ``dryrun`` and ``compile``.

        Args:
            subparser: The command's parser.
        """
        from tether.adapters.kfp import dryrun

        sub = subparser.add_subparsers(dest="kfp_command", required=True, metavar="COMMAND")
        p = sub.add_parser("dryrun", help="show each step's mode (pipeline) or what one "
                           "component becomes as a step")
        dryrun.add_arguments(p)
        p.set_defaults(kfp_parser=p)
        c = sub.add_parser("compile", help="compile a pipeline to YAML")
        c.add_argument("target", help="path/file.py:PIPELINE or package.module:PIPELINE")
        c.add_argument("out", help="the YAML file to write")
        c.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                       help="override a pipeline parameter's default")
        c.add_argument("--name", default=None, help="the pipeline's name")

    def run(self, args: argparse.Namespace) -> None:
        """Runs the chosen subcommand.

        Args:
            args: The parsed arguments.
        """
        from tether.adapters.kfp import compile as kfp_compile
        from tether.adapters.kfp import dryrun

        if args.kfp_command == "dryrun":
            code = dryrun.run(args, args.kfp_parser)
        else:
            argv = [args.target, args.out, *[f"-p={p}" for p in args.param]]
            if args.name:
                argv += ["--name", args.name]
            code = kfp_compile.main(argv)
        if code:
            raise SystemExit(code)
