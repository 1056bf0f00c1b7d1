"""The ``litegpu`` command line: inspect, run, benchmark, compare and evaluate models.

``litegpu.cli:main`` is the console script; ``python -m litegpu.cli`` does the same.
Each subcommand lives in its own module (``_run.py``...) with a ``register(subparsers)``
function; plugins add theirs through the ``register_commands`` hook.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .._errors import LiteGPUError
from ._common import EXIT_USAGE, CliError, err

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = ("_backends", "_inspect", "_run", "_benchmark", "_diff", "_eval", "_models", "_autoselect", "_cache",
               "_batch")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="litegpu",
        description="Run TensorFlow Lite / LiteRT models on GPUs through pluggable delegates.",
        epilog="Run `litegpu COMMAND --help` for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"litegpu {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log litegpu's messages on stderr (-v: info, -vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    _plugin_commands(sub)
    return parser


def _plugin_commands(sub: argparse._SubParsersAction) -> None:
    try:
        from .._plugins import call_register_commands
    except ImportError:  # the plugin system is not installed
        return
    failed = call_register_commands(sub)
    for label in failed:
        err(f"litegpu: warning: plugin {label!r} failed to add its commands")


def _setup_logging(verbose: int) -> None:
    if not verbose:
        return
    logger = logging.getLogger("litegpu")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("litegpu: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    try:
        parser = build_parser()
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # --help, --version, usage errors: argparse already printed
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _setup_logging(args.verbose)
    # the process is this command (the console script, `python -m litegpu`), not a call from a
    # program or a test: a command's budget may then count from the process's start
    args.process_is_command = argv is None
    cmd = args.command or "litegpu"
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        err(f"litegpu {cmd}: error: {e}")
        return e.status
    except LiteGPUError as e:
        err(f"litegpu {cmd}: error: {type(e).__name__}: {e}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err(f"litegpu {cmd}: interrupted")
        return 130
    except BrokenPipeError:  # `litegpu ... | head`
        return 0
