"""The ``compilecache`` command's entry point.

``compilecache run -- CMD`` starts the user's program, so it is dispatched here before the
command-line parser and the rest of the package are imported (``argparse`` alone costs ~20 ms on
a small machine): the wrapper adds as little as it can to every run. Anything else, and any
``run`` this reads differently from the full parser (``run --help``), goes to
:mod:`compilecache.cli`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~10 ms here
if TYPE_CHECKING:
    from collections.abc import Sequence


def run_arguments(argv: Sequence[str]) -> tuple[list[str], str | None] | None:
    """``([--url U] run [--url U] [--] CMD...)`` -> (CMD, U); ``None`` for anything else."""
    args = list(argv)
    url: str | None = None
    seen_run = False
    while args:
        head = args[0]
        if head == "--url" and len(args) > 1:
            url, args = args[1], args[2:]
        elif head.startswith("--url="):
            url, args = head.split("=", 1)[1], args[1:]
        elif head == "run" and not seen_run:
            seen_run, args = True, args[1:]
        elif seen_run and head == "--":
            return args[1:], url
        elif seen_run and not head.startswith("-"):
            return args, url
        else:
            return None  # an option the full parser reads (--help, --version, ...)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    fast = run_arguments(args)
    if fast is not None:
        command, url = fast
        from compilecache import runner

        return runner.run(command, {"COMPILECACHE_URL": url} if url else None)
    from compilecache import cli

    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
