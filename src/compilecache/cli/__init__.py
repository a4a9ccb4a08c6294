"""The ``compilecache`` command line (also ``python -m compilecache``).

Every command takes ``--url`` (default: ``COMPILECACHE_URL``, then the local default) and the
commands that print data take ``--json``. This module parses and dispatches; each command group
lives in its own module and registers its own subcommands:

- :mod:`~compilecache.cli.run`: ``run``, ``demo``, ``doctor`` (start programs under the cache)
- :mod:`~compilecache.cli.configure`: ``check``, ``keygen``
- :mod:`~compilecache.cli.stats`: ``stats``, ``explain``, ``report``
- :mod:`~compilecache.cli.entries`: ``ls``, ``show``
- :mod:`~compilecache.cli.maintenance`: ``prune``, ``clear``, ``verify``
- :mod:`~compilecache.cli.transfer`: ``export``, ``import``, ``warm``
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from compilecache import config as config_mod
from compilecache.cli import configure, entries, maintenance, run, stats, transfer
from compilecache.cli.common import URL_HELP, Commands
from compilecache.cli.configure import trust_line
from compilecache.errors import CompileCacheError
from compilecache.redaction import RedactedStream

__all__ = ["build_parser", "main", "parse", "trust_line"]

# The order ``compilecache --help`` lists the groups in.
GROUPS = (run, configure, stats, entries, maintenance, transfer)

# The status of a command whose reader went away (``compilecache ls | head -1``): 128 + SIGPIPE,
# what the shell reports for ``ls``, ``cat`` or ``yes`` in the same pipeline, so that scripts
# with ``set -o pipefail`` see the same as with the usual Unix tools.
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then each group's subcommands."""
    from compilecache import __version__

    parser = argparse.ArgumentParser(
        prog="compilecache",
        description="A persistent, shareable compilation cache for JAX and torch.compile.",
    )
    parser.add_argument("--version", action="version", version=f"compilecache {__version__}")
    # Before the command (`compilecache --url X stats`) or after it (`compilecache stats --url
    # X`): the one given after the command wins.
    parser.add_argument("--url", help=URL_HELP)
    # --json too, for the commands that print data (the others refuse it: see parse).
    parser.add_argument("--json", action="store_true", help="print JSON (commands that print data)")
    commands = Commands(parser.add_subparsers(dest="command_name", required=True))
    for group in GROUPS:
        group.register(commands)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments; an option the command does not know is reported with that command's own
    usage (argparse would show the top-level one), and exits with status 2."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    _known_command(parser, list(sys.argv[1:] if argv is None else argv), commands)
    args, extra = parser.parse_known_args(argv)
    if "--json" in extra and not args.json and not getattr(args, "takes_json", True):
        args.json, extra = True, [e for e in extra if e != "--json"]  # said as before it, below
    if extra:
        commands[args.command_name].error(f"unrecognized arguments: {' '.join(extra)}")
    if args.json and not getattr(args, "takes_json", True):
        commands[args.command_name].error(
            f"{args.command_name} prints no data: --json is not taken"
        )
    return args


def _known_command(
    parser: argparse.ArgumentParser, argv: list[str], commands: Mapping[str, Any]
) -> None:
    """Refuse a command that does not exist in the words of a person, not of argparse
    (``argument command_name: invalid choice``): the word, the nearest command, the list."""
    words = iter(argv)
    for word in words:
        if word == "--url":
            next(words, None)  # its value
        elif not word.startswith("-"):
            if word not in commands:
                near = difflib.get_close_matches(word, list(commands), n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                parser.error(f"unknown command {word!r}{hint}; the commands: {', '.join(commands)}")
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Everything it prints passes through the one redaction of URLs: no
    command prints a credential a store URL carries (a password, a key, a token)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactedStream(out), RedactedStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: Sequence[str] | None) -> int:
    args = parse(argv)
    try:
        if getattr(args, "needs_config", True):
            # Loaded once, here: every command (and bundle, verify, warm) uses this one.
            args.config = config_mod.load(url=args.url)
        status: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except CompileCacheError as exc:
        print(f"compilecache: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail (and print) again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (captured): nothing to flush
        pass


if __name__ == "__main__":
    sys.exit(main())
