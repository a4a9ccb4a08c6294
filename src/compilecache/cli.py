"""The ``compilecache`` command line (also ``python -m compilecache``).

Every command takes ``--url`` (default: ``COMPILECACHE_URL``, then the local default) and the
commands that print data take ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from compilecache import config as config_mod
from compilecache import entry, prune
from compilecache.config import format_size, parse_duration, parse_size
from compilecache.errors import CompileCacheError, CorruptEntry
from compilecache.session import open_store
from compilecache.stats import COUNTERS
from compilecache.stores.base import EntryInfo, StatsStore, Store
from compilecache.stores.readonly import ReadOnly

HEADLINE = ("hits", "misses", "writes", "errors", "compile_time_saved_s")


def _store(args: argparse.Namespace) -> Store:
    return open_store(args.url)


def _stats_backend(store: Store) -> StatsStore | None:
    inner = store.inner if isinstance(store, ReadOnly) else store
    return inner if isinstance(inner, StatsStore) else None


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


# -- stats -------------------------------------------------------------------------------------


def stats_report(store: Store) -> dict[str, Any]:
    """Persistent counters plus what the store holds now."""
    backend = _stats_backend(store)
    counters = backend.read_stats() if backend is not None else {}
    infos = list(store.scan())
    report: dict[str, Any] = {name: counters.get(name, 0.0) for name in COUNTERS}
    for name in ("hits", "misses", "writes", "errors", "corrupt", "skipped"):
        report[name] = int(report[name])
    report["entries"] = len(infos)
    report["size_bytes"] = sum(i.size for i in infos)
    report["url"] = store.url
    frameworks: dict[str, dict[str, float]] = {}
    for name, value in counters.items():
        framework, dot, counter = name.partition(".")
        if dot:
            frameworks.setdefault(framework, {})[counter] = value
    for info in infos:
        fw = frameworks.setdefault(info.framework or "other", {})
        fw["entries"] = fw.get("entries", 0) + 1
        fw["size_bytes"] = fw.get("size_bytes", 0) + info.size
    report["frameworks"] = frameworks
    lookups = report["hits"] + report["misses"]
    report["hit_rate"] = report["hits"] / lookups if lookups else 0.0
    return report


def cmd_stats(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.zero:
        backend = _stats_backend(store)
        if backend is not None:
            backend.zero_stats()
        print("compilecache: statistics zeroed")
        return 0
    report = stats_report(store)
    if args.json:
        _print_json(report)
        return 0
    print(f"store                 {report['url']}")
    print(f"entries               {report['entries']}")
    print(f"size                  {format_size(report['size_bytes'])}")
    print(f"hits                  {report['hits']}")
    print(f"misses                {report['misses']}")
    print(f"hit rate              {report['hit_rate']:.1%}")
    print(f"writes                {report['writes']}")
    print(f"errors                {report['errors']}")
    print(f"corrupt entries       {report['corrupt']}")
    print(f"compile time stored   {report['compile_time_s']:.1f} s")
    print(f"compile time saved    {report['compile_time_saved_s']:.1f} s")
    for framework, values in sorted(report["frameworks"].items()):
        parts = ", ".join(
            f"{k} {int(v) if float(v).is_integer() else round(v, 2)}"
            for k, v in sorted(values.items())
            if k in (*HEADLINE, "entries")
        )
        print(f"  {framework:<19} {parts}")
    return 0


# -- ls / show ---------------------------------------------------------------------------------


def _info_json(info: EntryInfo) -> dict[str, Any]:
    return {
        "key": info.key,
        "framework": info.framework,
        "name": info.name,
        "size": info.size,
        "compile_time_s": info.compile_time_s,
        "created": info.created,
        "accessed": info.accessed,
        "hits": info.hits,
    }


def cmd_ls(args: argparse.Namespace) -> int:
    infos = list(_store(args).scan())
    if args.framework:
        infos = [i for i in infos if i.framework == args.framework]
    sort_key = {
        "size": lambda i: -i.size,
        "accessed": lambda i: -i.accessed,
        "hits": lambda i: -i.hits,
    }
    infos.sort(key=sort_key.get(args.sort, lambda i: i.key))
    if args.json:
        _print_json([_info_json(i) for i in infos])
        return 0
    now = time.time()
    print(f"{'FRAMEWORK':<9} {'NAME':<32} {'SIZE':>10} {'COMPILE':>8} {'HITS':>5} {'USED':>7}  KEY")
    for i in infos:
        print(
            f"{i.framework:<9} {i.name[:32]:<32} {format_size(i.size):>10} "
            f"{i.compile_time_s:>7.2f}s {i.hits:>5} {_ago(now - i.accessed):>7}  {i.key}"
        )
    print(f"{len(infos)} entries, {format_size(sum(i.size for i in infos))}")
    return 0


def _ago(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return f"{max(seconds, 0):.0f}s ago"


def _resolve_key(store: Store, key: str) -> str | None:
    """Accept a full store key, a framework key without its prefix, or a unique prefix."""
    for candidate in (key, f"jax/{key}", f"torch/{key}"):
        if store.stat(candidate) is not None:
            return candidate
    matches = [
        i.key
        for i in store.scan()
        if i.key.startswith(key) or i.key.split("/", 1)[-1].startswith(key)
    ]
    return matches[0] if len(matches) == 1 else None


def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    key = _resolve_key(store, args.key)
    if key is None:
        print(f"compilecache: no entry matches {args.key!r}", file=sys.stderr)
        return 1
    info = store.stat(key)
    data = store.get(key)
    result: dict[str, Any] = {"store": _info_json(info) if info else {"key": key}}
    if data is None:
        result["error"] = "the entry disappeared while reading it"
    else:
        try:
            header = entry.decode(data).header
            result["entry"] = {
                "framework": header.framework,
                "key": header.key,
                "name": header.name,
                "created": header.created,
                "compile_time_s": header.compile_time_s,
                "payload_size": header.payload_size,
                "stored_size": len(data),
                "compression": header.compression,
                "versions": header.versions,
                "components": header.components,
                "extra": header.extra,
            }
        except CorruptEntry as exc:
            result["error"] = f"corrupt: {exc}"
    if args.json:
        _print_json(result)
    else:
        _print_tree(result)
    return 0 if "error" not in result else 1


def _print_tree(data: dict[str, Any], indent: int = 0) -> None:
    for name, value in data.items():
        if isinstance(value, dict):
            print(" " * indent + f"{name}:")
            _print_tree(value, indent + 2)
        else:
            print(" " * indent + f"{name}: {value}")


# -- prune / clear / verify --------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    store = _store(args)
    max_size = parse_size(args.max_size, "--max-size") if args.max_size else None
    older = parse_duration(args.older_than, "--older-than") if args.older_than else None
    if max_size is None and older is None:
        max_size = config_mod.load().max_size
    the_plan = prune.plan(store, max_size=max_size, older_than=older)
    verb = "would remove" if args.dry_run else "removing"
    for info, reason in the_plan.victims:
        print(f"{verb} {info.key} ({format_size(info.size)}): {reason}")
    removed = 0 if args.dry_run else prune.execute(store, the_plan)
    summary = {
        "dry_run": args.dry_run,
        "planned": len(the_plan.victims),
        "removed": removed,
        "bytes_freed": the_plan.bytes_freed,
        "entries_before": the_plan.entries_before,
        "bytes_before": the_plan.bytes_before,
        "bytes_after": the_plan.bytes_after,
    }
    if args.json:
        _print_json(summary)
    else:
        print(
            f"{'would free' if args.dry_run else 'freed'} {format_size(the_plan.bytes_freed)} "
            f"in {len(the_plan.victims)} entries; {format_size(the_plan.bytes_after)} remain"
        )
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    store = _store(args)
    infos = list(store.scan())
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"compilecache: clear would remove {len(infos)} entries from {store.url}; "
                "pass --yes to confirm",
                file=sys.stderr,
            )
            return 1
        answer = input(f"Remove all {len(infos)} entries from {store.url}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            return 1
    removed = sum(1 for info in infos if store.delete(info.key))
    backend = _stats_backend(store)
    if backend is not None:
        backend.zero_stats()
    print(f"compilecache: removed {removed} entries")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    store = _store(args)
    checked, bad = 0, []
    for info in store.scan():
        data = store.get(info.key)
        if data is None:
            continue
        checked += 1
        try:
            found = entry.decode(data, secret=config_mod.load().secret)
            if found.header.key != info.key:
                raise CorruptEntry(f"holds key {found.header.key!r}")
        except CorruptEntry as exc:
            bad.append((info.key, str(exc)))
    for key, reason in bad:
        action = "removed" if args.fix and store.delete(key) else "corrupt"
        print(f"{action}: {key}: {reason}")
    result = {"checked": checked, "corrupt": len(bad), "fixed": bool(args.fix)}
    if args.json:
        _print_json(result)
    else:
        print(
            f"compilecache: {checked} entries checked, {len(bad)} corrupt"
            + (" and removed" if args.fix and bad else "")
        )
    return 1 if bad and not args.fix else 0


# -- run / demo --------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from compilecache import runner

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    overrides = {"COMPILECACHE_URL": args.url} if args.url else {}
    return runner.run(command, overrides)


def cmd_demo(args: argparse.Namespace) -> int:
    from compilecache import demo

    return demo.main(url=args.url, layers=args.layers, json_output=args.json)


# -- parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compilecache",
        description="A persistent, shareable compilation cache for JAX and torch.compile.",
    )
    sub = parser.add_subparsers(dest="command_name", required=True)

    def command(name: str, help_text: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--url", help="store URL (default: $COMPILECACHE_URL or the local cache)")
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON")
        return p

    p = command("run", "run a command with compilecache enabled in it", json_flag=False)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=cmd_run)

    p = command("demo", "compile a JAX transformer step cold, then warm, and compare")
    p.add_argument("--layers", type=int, default=8, help="transformer layers (default 8)")
    p.set_defaults(func=cmd_demo)

    p = command("stats", "show hits, misses, writes and time saved")
    p.add_argument("--zero", action="store_true", help="reset the persistent counters")
    p.set_defaults(func=cmd_stats)

    p = command("ls", "list entries")
    p.add_argument("--sort", choices=("key", "size", "accessed", "hits"), default="key")
    p.add_argument("--framework", choices=config_mod.KNOWN_FRAMEWORKS)
    p.set_defaults(func=cmd_ls)

    p = command("show", "show one entry's metadata and key components")
    p.add_argument("key", help="store key, framework key, or a unique prefix")
    p.set_defaults(func=cmd_show)

    p = command("prune", "remove old or least recently used entries")
    p.add_argument("--max-size", help="keep at most this much, e.g. 5GB")
    p.add_argument("--older-than", help="remove entries unused for this long, e.g. 7d")
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.set_defaults(func=cmd_prune)

    p = command("clear", "remove every entry", json_flag=False)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_clear)

    p = command("verify", "check every entry's checksum")
    p.add_argument("--fix", action="store_true", help="remove corrupt entries")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except CompileCacheError as exc:
        print(f"compilecache: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
