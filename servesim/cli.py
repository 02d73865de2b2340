"""The `servesim` command: the front door, where every room registers its commands.

Each room owns its commands and adds them here through its `register(subparsers)`: the simulator
(`run`, `capacity`, `reproduce`, `trace`), calibration (`calibrate`) and validation (`validate`).
Nothing below imports this package, so no room depends on another's commands.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback

from calibrate.cli import register as register_calibrate
from engine.errors import SpecError, Unservable, one_line
from fidelity.cli import register as register_validate
from sim.cli import register as register_sim

# every room's commands, in the order `servesim --help` lists them; imports stay light (no simpy or
# torch until a command runs)
ROOMS = (register_sim, register_calibrate, register_validate)

# Errors a user can fix: a bad config or argument, a request the deployment can never serve, a file
# system that refuses (no permission, disk full). They are reported in one line with this status.
USER_ERRORS = (SpecError, Unservable, OSError)
EXIT_USER_ERROR = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT: 128 + 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="servesim: a discrete-event simulator of LLM "
                                     "serving, clocked by cost models calibrated on a real paged-attention engine")
    parser.add_argument("--version", action=_Version, nargs=0, help="print servesim's version and whether its "
                        "control plane runs compiled (mypyc) or as pure Python, then exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in ROOMS:
        register(sub)
    _add_debug_flag(parser)
    return parser


class _Version(argparse.Action):
    """--version: the control plane's build is found only when asked (it reads the compiled modules' sources)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        from engine.core.compiled import control_plane_build
        try:
            number = version("servesim")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "(not installed)"
        print(f"servesim {number}, control plane: {control_plane_build()}")
        parser.exit()


def _add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug anywhere on the command line: every command's and subcommand's parser knows it."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on an error, print the traceback too (for bug reports)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # an alias maps to its command's parser
                _add_debug_flag(command)


def _fail(args, message: str, status: int) -> int:
    if getattr(args, "debug", False):
        traceback.print_exc()
    print(f"servesim: {message}", file=sys.stderr)
    return status


def _interrupted(signum, frame) -> None:
    """The first SIGINT or SIGTERM ends the command; any later one is ignored while it cleans up. `timeout -s INT`
    signals the command and then its whole group, and an impatient user presses Ctrl-C twice: a second signal
    would cut the pools' shutdown short, or land while the interpreter joins their threads at exit and print
    tracebacks after the command has said how it ended."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _catch_interrupts():
    """SIGINT and SIGTERM (kill, a job scheduler's stop) end a command alike: the same cleanup, the same one
    line, the same exit status. The previous handlers, to restore; None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, _interrupted), signal.signal(signal.SIGTERM, _interrupted)


def _after_the_command(previous, exiting: bool) -> None:
    """A caller in this process gets its handlers back; a process about to exit ignores SIGINT from here on
    (its interpreter's shutdown joins the pools' threads and processes) and lets SIGTERM end it at once."""
    if previous is None:
        return
    if exiting:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def main(argv: list[str] | None = None, *, exiting: bool = False) -> int:
    """Run a command; the user sees one line for any error, a traceback only with --debug. `exiting`: the
    process ends with the command (the `servesim` script, `python -m servesim`)."""
    args = None
    previous = _catch_interrupts()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", EXIT_INTERRUPTED)
    except USER_ERRORS as err:
        return _fail(args, f"error: {one_line(err)}", EXIT_USER_ERROR)
    except Exception as err:  # a bug: say so, and how to report it
        return _fail(args, f"internal error: {type(err).__name__}: {one_line(err)} "
                     "(rerun with --debug for the traceback, and report it)", EXIT_BUG)
    finally:
        _after_the_command(previous, exiting)


def command() -> None:
    """The `servesim` script: the command, then the process's exit with its status."""
    sys.exit(main(exiting=True))


if __name__ == "__main__":
    command()
