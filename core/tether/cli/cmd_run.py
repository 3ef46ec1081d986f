"""``tether run``: run a component on a scheduler.

``tether run [-s SCHEDULER] [-cfg K=V,...] [--dryrun|--wait|--log|--detach] COMPONENT [ARGS]``

The app handle is printed on stdout first. On a local scheduler the command then streams the
output of every replica to stdout (``role/replica`` before each line when the app has more than
one replica) and waits for the app; ``--detach`` returns at once instead (the app keeps running
and ``tether status/log/cancel`` find it), and Ctrl-C while waiting cancels the app. Other
schedulers return once submitted unless ``--wait`` or ``--log`` is given, and Ctrl-C only
stops waiting. Progress goes to stderr: one line redrawn in place on a terminal (a spinner
while the app is pending), a plain line per state change otherwise. When the command waits,
its exit code is the app's: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED (130 after Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from tether.cli.cmd_base import SubCommand
from tether.cli.common import (
    EXIT_INTERRUPTED,
    CLIError,
    eprint,
    exit_code_for,
    format_app,
    get_runner,
    report_final,
)

if TYPE_CHECKING:
    from tether.runner import Runner

LOG_DRAIN_TIMEOUT_S = 30.0
"""How long ``--log`` keeps reading after the app finished, for the last lines."""


def runs_on_this_machine(runner: Runner, scheduler: str) -> bool:
    """Whether apps of this scheduler run on this machine (its capabilities say so).

    For those, ``tether run`` streams the output and waits unless ``--detach``, and Ctrl-C
    cancels the app. This is the one place that decides it.

    Args:
        runner: The runner.
        scheduler: The scheduler's name.

    Returns:
        True when the scheduler runs the replicas on this host.
    """
    return runner.scheduler_capabilities(scheduler).runs_on_this_host


class CmdRun(SubCommand):
    """Run a component (`tether builtins` lists them) on a scheduler."""

    def __init__(self) -> None:
        self._own_options: dict[str, bool] = {}

    def add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        self._add_arguments(subparser)
        # `tether run`'s own flags (and whether each takes a value), for the hint given when
        # one is typed after the component, where it is the component's argument
        self._own_options = {
            opt: action.nargs != 0
            for action in subparser._actions
            for opt in action.option_strings
            if opt not in ("-h", "--help")
        }

    def _add_arguments(self, subparser: argparse.ArgumentParser) -> None:
        subparser.epilog = (
            "Local schedulers (local_cwd) stream every replica's output and wait for the app "
            "unless --detach; Ctrl-C then cancels it. Other schedulers return once submitted "
            "unless --wait or --log. "
            "Exit code when waiting: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 130 Ctrl-C. "
            "Example: tether run --log dist.ddp -j 1x2 --script train.py -- --lr 0.1"
        )
        subparser.add_argument(
            "-s", "--scheduler", default=None,
            help="scheduler to run on (default: local_cwd, or [cli:run] scheduler in "
                 ".tetherconfig); a comma-separated list (kubernetes,slurm,local_cwd) "
                 "moves on to the next when one refuses the app for capacity",
        )
        subparser.add_argument(
            "-cfg", "--scheduler_args", "--cfg", dest="scheduler_args", default="",
            metavar="K=V[,K2=V2]",
            help="run options of the scheduler (`tether runopts SCHEDULER` lists them)",
        )
        mode = subparser.add_mutually_exclusive_group()
        mode.add_argument("--dryrun", action="store_true",
                          help="print the app and the scheduler's request; submit nothing")
        mode.add_argument("--detach", action="store_true",
                          help="print the handle and return once submitted (local schedulers "
                               "otherwise stream the output and wait)")
        subparser.add_argument("--wait", action="store_true",
                               help="wait until the app finishes; exit with its result")
        subparser.add_argument("--log", action="store_true",
                               help="stream the logs of every replica (implies --wait)")
        subparser.add_argument("--workspace", default=None, metavar="DIR[:DST][,...]",
                               help="project directories to ship with the app")
        subparser.add_argument("--parent_run_id", "--parent-run-id", default=None,
                               help="tracking run this app belongs to")
        subparser.add_argument("--job_key", "--job-key", default=None,
                               help="stable identity: re-attach instead of submitting twice")
        subparser.add_argument(
            "--stdin", action="store_true",
            help="read the component and its arguments from stdin (as TorchX): a JSON object "
                 "{\"component_name\", \"component_args\", \"scheduler\", "
                 "\"scheduler_args\", \"workspace\", \"dryrun\", ...} or a shell-quoted "
                 "line of component arguments",
        )
        subparser.add_argument(
            "component_name_and_args", nargs=argparse.REMAINDER,
            metavar="COMPONENT [ARGS ...]",
            help="component (dist.ddp, path/file.py:fn, pkg.module:fn) and its arguments; "
                 "`tether run COMPONENT --help` shows them",
        )

    def run(self, args: argparse.Namespace) -> None:
        if args.stdin:
            from tether.cli.run_stdin import apply_stdin

            apply_stdin(args, sys.stdin.read())
        if not args.component_name_and_args:
            raise CLIError("missing the component to run, e.g. `tether run utils.echo "
                           "--msg hi` (`tether builtins` lists the components)")
        if (args.wait or args.log) and args.detach:
            raise CLIError("--detach cannot be combined with --wait or --log")
        if (args.wait or args.log) and args.dryrun:
            raise CLIError("--dryrun submits nothing: it cannot be combined with --wait or --log")
        component, *component_args = args.component_name_and_args
        if component.startswith("-"):
            raise CLIError(
                f"{component!r} is not a component: options of `tether run` go before the "
                "component name, the component's options after it"
            )
        from tether.schedulers import get_default_scheduler_name

        scheduler = args.scheduler or get_default_scheduler_name()
        try:
            self._run(args, scheduler, component, component_args)
        except ValueError as e:
            from tether.components.args import ComponentArgError, component_usage
            from tether.components.finder import get_component

            if not isinstance(e, ComponentArgError):
                raise

            usage = component_usage(get_component(component).fn, f"tether run {component}")
            eprint(usage.rstrip())
            code = 1 if e.__cause__ is not None else 2  # a bad argument exits 2, as argparse
            hint = self._misplaced_hint(component, component_args, str(e))
            raise CLIError(f"{component}: {e}{hint}", code=code) from e

    def _misplaced_hint(self, component: str, component_args: list[str], error: str) -> str:
        """A hint when the argument the component rejected is one of `tether run`'s options.

        Everything after the component is the component's: ``tether run utils.echo --msg hi
        -s kubernetes`` gives ``-s`` to ``utils.echo``. The hint shows the command with that
        option (and its value) moved before the component.
        """
        for i, token in enumerate(component_args):
            flag = token.partition("=")[0]
            if flag not in self._own_options or f"{token!r}" not in error:
                continue
            end = i + 1 + (self._own_options[flag] and "=" not in token)
            import shlex

            fixed = shlex.join(["tether", "run", *component_args[i:end], component,
                                *component_args[:i], *component_args[end:]])
            return (f" ({flag} is an option of `tether run`: its options go before the "
                    f"component, the component's after it: `{fixed}`)")
        return ""

    def _run(
        self, args: argparse.Namespace, scheduler: str, component: str, component_args: list[str]
    ) -> None:
        candidates = [s.strip() for s in scheduler.split(",") if s.strip()]
        if not candidates:
            raise CLIError(f"-s {scheduler!r} names no scheduler; give one or a "
                           "comma-separated list, e.g. -s kubernetes,local_cwd")
        with get_runner() as runner:
            if self._maybe_help(runner, component, component_args):
                return
            cfg = _parse_cfg(runner, candidates, args.scheduler_args)
            if args.dryrun:
                self._dryrun(runner, args, candidates, cfg, component, component_args)
                return
            target: str | list[str] = candidates if len(candidates) > 1 else candidates[0]
            handle = runner.run_component(
                component, component_args, target, cfg=cfg, workspace=args.workspace,
                parent_run_id=args.parent_run_id, job_key=args.job_key,
            )
            print(handle, flush=True)
            attempts = runner.attempts(handle)  # a logical job runs where its attempt runs
            where = attempts[-1]["scheduler"] if attempts else candidates[0]
            local = runs_on_this_machine(runner, where)
            if args.detach or not (args.wait or args.log or local):
                eprint(f"tether: launched {handle}; follow it with `tether status {handle}` "
                       f"or `tether log --tail {handle}`")
                return
            code = self._wait(runner, handle, log=args.log or local,
                              cancel_on_interrupt=local)
        sys.exit(code)

    @staticmethod
    def _dryrun(
        runner: Runner, args: argparse.Namespace, candidates: list[str],
        cfg: dict[str, Any], component: str, component_args: list[str],
    ) -> None:  # fmt: skip
        """Prints the app and each candidate's native request (each with its options),
        after checking that every candidate can run the app."""
        from tether.runner.logical import candidate_cfg, check_candidates_can_run

        app = runner.materialize_component(component, component_args)
        check_candidates_can_run(app, candidates, runner.scheduler_capabilities, args.workspace)
        for n, sched in enumerate(candidates):
            info = runner.dryrun(
                app, sched,
                cfg=candidate_cfg(runner.scheduler_run_opts, candidates, cfg, sched),
                workspace=args.workspace, parent_run_id=args.parent_run_id,
                job_key=args.job_key,
            )  # fmt: skip
            if n == 0 and info.app is not None:
                print("=== APPLICATION ===")
                print(format_app(info.app))
            print("=== SCHEDULER REQUEST ===" if len(candidates) == 1
                  else f"=== SCHEDULER REQUEST ({sched}) ===")  # fmt: skip
            print(info)

    @staticmethod
    def _maybe_help(runner: Runner, component: str, component_args: list[str]) -> bool:
        from tether.components.args import component_help, wants_help
        from tether.components.finder import get_component

        if "--help" not in component_args:
            return False
        info = get_component(component)
        if not wants_help(info.fn, component_args):
            return False
        defaults = runner.config.component_defaults(info.name)
        print(component_help(info.fn, f"tether run {info.name}", defaults), end="")
        return True

    @staticmethod
    def _wait(runner: Runner, handle: str, log: bool, cancel_on_interrupt: bool) -> int:
        import threading  # here: a dryrun does without it

        from tether.cli.progress import Progress, wait_with_progress

        progress = Progress(handle)
        log_thread: threading.Thread | None = None
        if log:
            log_thread = threading.Thread(
                target=_print_logs, args=(runner, handle, progress, _replica_count(runner, handle)),
                daemon=True,
                name="tether-run-logs",
            )
            log_thread.start()
        try:
            status = wait_with_progress(runner, handle, progress)
        except KeyboardInterrupt:
            progress.clear()
            if cancel_on_interrupt:
                eprint(f"tether: interrupted; cancelling {handle} (use --detach to leave apps "
                       "running)")
                runner.cancel(handle)
            else:
                eprint(f"tether: stopped waiting; {handle} keeps running "
                       f"(`tether cancel {handle}` stops it)")
            sys.exit(EXIT_INTERRUPTED)
        if log_thread is not None:
            log_thread.join(LOG_DRAIN_TIMEOUT_S)
        report_final(handle, status)
        return exit_code_for(status.state if status else None)


def _parse_cfg(runner: Runner, candidates: list[str], literal: str) -> dict[str, Any]:
    """``-cfg`` parsed with the candidates' run options (an option's type is the first
    declaring candidate's)."""
    if not literal:
        return {}
    if len(candidates) == 1:
        return dict(runner.scheduler_run_opts(candidates[0]).cfg_from_str(literal))
    from tether.specs import runopts

    union = runopts()
    for sched in reversed(candidates):  # the first candidate's declaration wins
        union.update(runner.scheduler_run_opts(sched))
    return dict(union.cfg_from_str(literal))


def _replica_count(runner: Runner, handle: str) -> int:
    """How many replicas the app has (0 when the scheduler cannot describe it)."""
    app = runner.describe(handle)
    return sum(role.num_replicas for role in app.roles) if app is not None else 0


def _print_logs(runner: Runner, handle: str, progress: Any, replicas: int) -> None:
    from tether.runner import fan_in

    prefixed = replicas != 1
    try:
        for line in fan_in(runner, handle, should_tail=True):
            progress.clear()
            text = line.format() if prefixed else line.line.rstrip("\n")
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
    except BrokenPipeError:
        return
    except Exception as e:  # logs are best effort; the exit code comes from the status
        eprint(f"tether: warning: cannot stream the logs of {handle}: {e}")
