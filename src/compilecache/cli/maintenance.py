"""``prune``, ``clear`` and ``verify``: keeping a store small and sound."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from compilecache.cli.common import Commands, config_of, print_json, store_of
from compilecache.config import format_size, parse_duration, parse_size
from compilecache.errors import CorruptEntry, ForeignEntry

if TYPE_CHECKING:
    from compilecache.stores.base import EntryInfo


def cmd_prune(args: argparse.Namespace) -> int:
    from compilecache.runtime.transfer import count_words, split_keys
    from compilecache.tools import prune

    store = store_of(args, create=False)
    max_size = parse_size(args.max_size, "--max-size") if args.max_size else None
    older = parse_duration(args.older_than, "--older-than") if args.older_than else None
    if max_size is None and older is None:
        max_size = config_of(args).max_size
    the_plan = prune.plan(store, max_size=max_size, older_than=older)
    if not args.json:
        verb = "would remove" if args.dry_run else "removing"
        for info, reason in the_plan.victims:
            print(f"{verb} {info.key} ({format_size(info.size)}): {reason}")
    removed = split_keys([] if args.dry_run else prune.execute(store, the_plan))
    victims = split_keys(info.key for info, _ in the_plan.victims)
    summary = {
        "dry_run": args.dry_run,
        "planned": victims[0],
        "job_lookup_lists_planned": victims[1],
        "removed": removed[0],
        "job_lookup_lists_removed": removed[1],
        "bytes_freed": the_plan.bytes_freed,
        "entries_before": the_plan.entries_before,
        "bytes_before": the_plan.bytes_before,
        "bytes_after": the_plan.bytes_after,
        "victims": [
            {"key": info.key, "size": info.size, "reason": reason}
            for info, reason in the_plan.victims
        ],
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"{'would free' if args.dry_run else 'freed'} {format_size(the_plan.bytes_freed)} "
            f"in {count_words(*victims)}; {format_size(the_plan.bytes_after)} remain"
        )
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    from compilecache.runtime.transfer import count_words, split_keys

    store = store_of(args, create=False)
    infos = list(store.scan())
    held = count_words(*split_keys(info.key for info in infos))
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"compilecache: clear would remove {held} from {store.url}; pass --yes to confirm",
                file=sys.stderr,
            )
            return 1
        answer = input(f"Remove all {held} from {store.url}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            return 1
    removed = split_keys(info.key for info in infos if store.delete(info.key))
    if store.counters is not None:
        store.counters.zero()
    if store.history is not None:
        store.history.clear()  # explanations name entries that are gone now
    print(f"compilecache: removed {count_words(*removed)}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every entry (read with ``peek``: nothing counted, nothing repaired) and report
    each damaged one. Only ``--fix`` removes, and only damaged entries: an entry signed with
    another key is intact and valid for the hosts that hold that key (removing it is how one
    misconfigured host would empty a fleet's cache), so it is reported and always kept."""
    from compilecache.runtime.reader import Reader
    from compilecache.runtime.transfer import count_words, split_keys

    store = store_of(args, create=False)
    reader = Reader(config_of(args).signing)
    checked: list[str] = []
    damaged: list[tuple[EntryInfo, str]] = []
    foreign: list[tuple[EntryInfo, str]] = []
    for info in store.scan():
        try:
            if reader.peek(store, info.key) is None:
                continue  # removed since the scan: nothing to check
        except CorruptEntry as exc:  # truncated, empty, bit-flipped, another key's data
            damaged.append((info, str(exc)))
        except ForeignEntry as exc:
            foreign.append((info, f"signed with another key ({exc}); kept"))
        checked.append(info.key)
    removed = [info.key for info, _ in damaged if args.fix and store.delete(info.key)]
    left = len(damaged) - len(removed)
    entries, lists = split_keys(checked)
    if args.json:
        print_json(
            {
                "checked": entries,
                "job_lookup_lists_checked": lists,
                "corrupt": len(damaged),
                "removed": len(removed),
                "foreign": len(foreign),
                "fixed": bool(args.fix),
                "damaged": [
                    {"key": i.key, "name": i.name, "reason": r, "removed": i.key in removed}
                    for i, r in damaged
                ],
                "foreign_entries": [
                    {"key": i.key, "name": i.name, "reason": r} for i, r in foreign
                ],
            }
        )
    else:
        for info, reason in foreign:
            print(f"foreign: {info.key}: {reason} [{info.name}]")
        for info, reason in damaged:
            gone = info.key in removed
            print(f"{'removed' if gone else 'corrupt'}: {info.key}: {reason} [{info.name}]")
        line = f"compilecache: {count_words(entries, lists)} checked, {len(damaged)} corrupt"
        if removed:
            line += f" ({len(removed)} removed)" if left else " and removed"
        elif damaged:
            line += " (kept: verify --fix removes them)"
        if foreign:
            line += f", {len(foreign)} signed with another key (kept)"
        print(line)
    return 1 if left else 0


def register(commands: Commands) -> None:
    """Add prune, clear and verify to the parser."""
    p = commands.add("prune", "remove old or least recently used entries")
    p.add_argument("--max-size", help="keep at most this much, e.g. 5GB")
    p.add_argument("--older-than", help="remove entries unused for this long, e.g. 7d")
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.set_defaults(func=cmd_prune)

    p = commands.add("clear", "remove every entry", json_flag=False)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_clear)

    p = commands.add("verify", "check every entry's checksum")
    p.add_argument("--fix", action="store_true", help="remove corrupt entries")
    p.set_defaults(func=cmd_verify)
