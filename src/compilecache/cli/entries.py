"""``ls`` and ``show``: the entries of a store, and one entry in full."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from compilecache import config as config_mod
from compilecache.cli.common import (
    Commands,
    ago,
    config_of,
    date,
    plural,
    print_json,
    store_of,
)
from compilecache.config import format_size
from compilecache.errors import CorruptEntry, ForeignEntry

if TYPE_CHECKING:
    from compilecache.runtime.reader import Reader
    from compilecache.stores.base import EntryInfo, Store


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
    from compilecache.runtime.transfer import count_words, is_job_list, split_keys

    store = store_of(args, create=False)
    infos = list(store.scan())
    # A job's lookup list sits beside the entries, but is not a compiled entry: every command
    # counts it apart.
    lists = [] if args.framework else [i for i in infos if is_job_list(i.key)]
    if not args.all:
        infos = [i for i in infos if not is_job_list(i.key)]
    if args.framework:
        infos = [i for i in infos if i.framework == args.framework]
    sort_key = {
        "size": lambda i: -i.size,
        "accessed": lambda i: -i.accessed,
        "hits": lambda i: -i.hits,
    }
    infos.sort(key=sort_key.get(args.sort, lambda i: i.key))
    from compilecache.runtime.reader import cpu_targets

    cpus = cpu_targets(store, [i.key for i in infos])
    if args.json:
        print_json([{**_info_json(i), "cpu": cpus.get(i.key)} for i in infos])
        return 0
    from compilecache.host import cpu_label

    now = time.time()
    print(
        f"{'FRAMEWORK':<9} {'NAME':<32} {'SIZE':>10} {'COMPILE':>8} {'HITS':>5} {'USED':>7}  "
        f"{'CPU':<20}  KEY"
    )
    for i in infos:
        print(
            f"{i.framework:<9} {i.name[:32]:<32} {format_size(i.size):>10} "
            f"{i.compile_time_s:>7.2f}s {i.hits:>5} {ago(now - i.accessed):>7}  "
            f"{cpu_label(cpus.get(i.key)):<20}  {i.key}"
        )
    line = f"{count_words(*split_keys(i.key for i in infos))}, "
    line += format_size(sum(i.size for i in infos))
    if lists and not args.all:
        n_lists = split_keys(i.key for i in lists)[1]
        line += f" (and {plural(n_lists, 'job lookup list')}, not listed: `ls --all`)"
    print(line)
    return 0


def matching_keys(store: Store, text: str) -> list[str]:
    """The keys ``text`` names: a full store key, a framework key without its prefix, else every
    entry of that function name (one function has an entry per shape and flags), else every
    key that starts with ``text`` (with or without its framework prefix)."""
    for candidate in (text, *(f"{name}/{text}" for name in config_mod.ENTRY_FRAMEWORKS)):
        if store.stat(candidate) is not None:
            return [candidate]
    infos = list(store.scan())
    by_name = sorted(i.key for i in infos if i.name == text)
    return by_name or sorted(
        i.key for i in infos if i.key.startswith(text) or i.key.split("/", 1)[-1].startswith(text)
    )


def _describe(store: Store, key: str, reader: Reader) -> dict[str, Any]:
    """One entry's stored metadata and header, read with ``peek``: looking changes nothing, and
    a damaged entry is reported (``error``), never removed."""
    info = store.stat(key)
    result: dict[str, Any] = {"store": _info_json(info) if info else {"key": key}}
    try:
        data = store.peek(key)
        if data is None:
            result["error"] = "the entry disappeared while reading it"
            return result
        found = reader.decode(data, key)
    except CorruptEntry as exc:
        result["error"] = f"corrupt: {exc}"
        return result
    except ForeignEntry as exc:
        result["error"] = f"foreign (left in place): {exc}"
        return result
    header = found.header
    result["entry"] = {
        "signed_by": found.signer,
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
    cpu = header.extra.get("cpu")
    if isinstance(cpu, dict):
        from compilecache.host import HostCheck, describe_cpu

        refused = HostCheck(live=True).reason(header)
        result["cpu target"] = {
            "compiled for": describe_cpu(cpu),
            "runs on this host": f"no: {refused}" if refused else "yes",
        }
    return result


def cmd_show(args: argparse.Namespace) -> int:
    """One entry; or, when the name or prefix matches several (a function compiled at several
    shapes), every one of them (``--json``: a list)."""
    store = store_of(args, create=False)
    keys = matching_keys(store, args.key)
    if not keys:
        print(f"compilecache: no entry matches {args.key!r}", file=sys.stderr)
        return 1
    from compilecache.runtime.reader import Reader

    reader = Reader(config_of(args).signing)
    results = [_readable(_describe(store, key, reader)) for key in keys]
    if args.json:
        print_json(results[0] if len(results) == 1 else results)
    else:
        if len(results) > 1:
            print(f"{len(results)} entries match {args.key!r}:")
        for n, result in enumerate(results):
            if n:
                print()
            _print_tree(_for_people(result))
    return 1 if any("error" in r for r in results) else 0


def _readable(value: Any) -> Any:
    """``value`` with every string that is not text (a framework's key component holding a
    pickle or a raw digest) replaced by its length and digest: nothing ``show`` prints garbles
    a terminal."""
    if isinstance(value, dict):
        return {k: _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    if isinstance(value, str) and not all(c.isprintable() or c in "\t\n" for c in value):
        import hashlib

        raw = value.encode("utf-8", "surrogateescape")
        return f"<{len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()[:16]}>"
    return value


# Longest value a line of ``show`` prints (a whole configuration can be one value).
_SHOWN_CHARS = 200


def _for_people(result: dict[str, Any]) -> dict[str, Any]:
    """What ``show`` prints without ``--json``: each key component once, by its readable value
    where the entry records one (else its digest), no empty value, who signed it (or that
    nobody did), and no value longer than a line."""
    found = result.get("entry")
    if isinstance(found, dict):
        extra = dict(found.get("extra") or {})
        readable = extra.pop("readable", None)
        components = dict(found.get("components") or {})
        if isinstance(readable, dict):
            components = {k: readable.get(k, v) for k, v in components.items()}
            components.update({k: v for k, v in readable.items() if k not in components})
        # An unsigned entry says so; a component the framework left empty is not a line.
        signer = found.get("signed_by") or "unsigned"
        found = {**found, "signed_by": signer, "components": components, "extra": extra}
        result = {**result, "entry": found}
    shortened: dict[str, Any] = _short(_without_empty(result))
    return shortened


def _without_empty(value: Any) -> Any:
    """``value`` without the empty strings, lists and mappings it holds (at every depth)."""
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ("", None, [], {})}
    return value


def _short(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    text = str(value) if not isinstance(value, (int, float)) else value
    if isinstance(text, str) and len(text) > _SHOWN_CHARS:
        return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters; --json shows all)"
    return value


_TIMES = ("created", "accessed")


def _print_tree(data: dict[str, Any], indent: int = 0) -> None:
    now = time.time()
    for name, value in data.items():
        if isinstance(value, dict):
            print(" " * indent + f"{name}:")
            _print_tree(value, indent + 2)
        elif name in _TIMES and isinstance(value, (int, float)) and value > 0:
            print(" " * indent + f"{name}: {date(value)} ({ago(now - value)})")
        else:
            print(" " * indent + f"{name}: {value}")


def register(commands: Commands) -> None:
    """Add ls and show to the parser."""
    p = commands.add("ls", "list entries")
    p.add_argument("--sort", choices=("key", "size", "accessed", "hits"), default="key")
    p.add_argument("--framework", choices=config_mod.ENTRY_FRAMEWORKS)
    p.add_argument(
        "--all", action="store_true", help="also the jobs' lookup lists kept for prefetching"
    )
    p.set_defaults(func=cmd_ls)

    p = commands.add("show", "show one entry's metadata and key components")
    p.add_argument("key", help="store key, framework key, or a unique prefix")
    p.set_defaults(func=cmd_show)
