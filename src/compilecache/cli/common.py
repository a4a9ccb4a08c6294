"""What the commands share: the store a command opens, the parser's command factory, and the
small formatting helpers of their output."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from compilecache import config as config_mod
from compilecache.config import Config

if TYPE_CHECKING:
    from compilecache.stores.tiers import Tiered

# The stores, the entry format and the tools are imported by the commands that use them:
# `compilecache run` (which starts the user's program) imports none of them.

# The counters every report leads with.
HEADLINE = ("hits", "misses", "writes", "errors", "compile_time_saved_s")
URL_HELP = "store URL (default: $COMPILECACHE_URL or the local cache)"


class Commands:
    """Adds subcommands to the parser: ``add`` one that takes ``--url`` (and ``--json`` when it
    prints data), or a ``raw`` one that takes neither."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub

    def add(self, name: str, help_text: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = self._sub.add_parser(
            name, help=help_text, description=help_text
        )
        # After the command (`compilecache stats --url X`) as well as before it.
        p.add_argument("--url", help=URL_HELP, default=argparse.SUPPRESS)
        if json_flag:
            p.add_argument(
                "--json", action="store_true", help="print JSON", default=argparse.SUPPRESS
            )
        p.set_defaults(takes_json=json_flag)
        return p

    def raw(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = self._sub.add_parser(name, **kwargs)
        return p


def config_of(args: argparse.Namespace) -> Config:
    """The configuration ``main`` loaded once for this command (``--url`` applied)."""
    cfg: Config = args.config
    return cfg


def store_of(args: argparse.Namespace, url: str | None = None, *, create: bool = True) -> Tiered:
    """The store this command works on (or ``url``, opened with the same settings).
    ``create=False`` for commands that only look at a store: a directory that does not exist is
    an error naming it, not a new, empty store."""
    from compilecache.stores import registry  # the session's opener too (see the top)

    cfg = config_of(args)
    return registry.open_store(
        url or cfg.url,
        cfg.max_size,
        plan=config_mod.WritePlan.of_command(cfg),
        tier_writes=cfg.tier_writes,
        create=create,
        cold_streak=cfg.cold_streak,
        command=True,
    )


def print_json(data: Any) -> None:
    """The command's one JSON document, on stdout."""
    print(json.dumps(data, indent=2, sort_keys=True))


def print_report(args: argparse.Namespace, report: Any) -> None:
    """A tool's report (``to_json()`` and ``text()``): its JSON with ``--json``, else its text."""
    if args.json:
        print_json(report.to_json())
    else:
        print(report.text())


def number(value: float) -> str:
    """A counter's value: whole numbers without a fraction."""
    return str(int(value)) if float(value).is_integer() else str(round(value, 2))


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun that goes with it: ``1 entry``, ``2 entries``."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def ago(seconds: float) -> str:
    """How long ago, in the largest whole unit: ``3d ago``, ``12s ago``."""
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return f"{max(seconds, 0):.0f}s ago"


def date(epoch: float) -> str:
    """A local date and time, as ``ls -l --time-style=long-iso`` shows them."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
