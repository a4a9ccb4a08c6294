"""The ``compilecache`` command line (also ``python -m compilecache``).

Every command takes ``--url`` (default: ``COMPILECACHE_URL``, then the local default) and the
commands that print data take ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compilecache import config as config_mod
from compilecache.config import Config, format_size, parse_duration, parse_size
from compilecache.errors import CompileCacheError, CorruptEntry, ForeignEntry
from compilecache.redaction import RedactedStream

if TYPE_CHECKING:
    from compilecache.runtime.reader import Reader
    from compilecache.stores.base import EntryInfo, Store
    from compilecache.stores.tiered import Tiered

# The stores, the entry format and the tools are imported by the commands that use them:
# `compilecache run` (which starts the user's program) imports none of them.

HEADLINE = ("hits", "misses", "writes", "errors", "compile_time_saved_s")


def _config(args: argparse.Namespace) -> Config:
    """The configuration ``main`` loaded once for this command (``--url`` applied)."""
    cfg: Config = args.config
    return cfg


def _open(cfg: Config, url: str | None = None, *, create: bool = True) -> Tiered:
    """Open ``url`` (default: the configured store) with the configured size and options.
    ``create=False`` for commands that only look at a store: a directory that does not exist is
    an error naming it, not a new, empty store."""
    from compilecache.stores import registry

    return registry.open_store(
        url or cfg.url,
        cfg.max_size,
        plan=config_mod.WritePlan.of_command(cfg),
        tier_writes=cfg.tier_writes,
        create=create,
        command=True,
    )


def _store(args: argparse.Namespace, *, create: bool = True) -> Tiered:
    return _open(_config(args), create=create)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


# -- stats -------------------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    store = _store(args, create=False)
    if args.zero:
        if store.counters is not None:  # nothing, where the store keeps no counters
            store.counters.zero()
        if args.json:
            _print_json({"zeroed": True, "store": store.url})
        else:
            print("compilecache: statistics zeroed")
        return 0
    from compilecache.tools.statsreport import StatsReport

    report = StatsReport.of(store)
    if args.json:
        _print_json(report.to_json())
        return 0
    if args.prometheus:
        from compilecache.tools.report import prometheus

        sys.stdout.write(prometheus(report))
        return 0
    print(f"store                 {report.url}")
    print(f"entries               {report.entries}")
    print(f"size                  {format_size(report.size_bytes)}")
    print(f"hits                  {report.hits}")
    print(f"misses                {report.misses}")
    rate = f"{report.hit_rate:.1%}" if report.lookups else "n/a (no lookups counted yet)"
    print(f"hit rate              {rate}")
    print(f"writes                {report.writes}")
    print(f"errors                {report.errors}")
    print(f"corrupt entries       {report.corrupt}")
    if report.count("unrunnable"):
        print(
            f"other hosts' entries  {report.count('unrunnable')} misses: built for a CPU this "
            "host cannot run (kept for those hosts; `explain` says which)"
        )
    print(f"compile time stored   {report.stored_compile_time_s:.1f} s")
    print(f"compile time saved    {report.compile_time_saved_s:.1f} s")
    print(f"signatures            {trust_line(_config(args))}")
    shown = {*HEADLINE, "corrupt", "unrunnable", "compile_time_s"}
    others = [(name, v) for name, v in report.counters.items() if v and name not in shown]
    if others:  # every other counter of stats.COUNTERS that is not zero
        print("also                  " + ", ".join(f"{name} {_number(v)}" for name, v in others))
    for setting in report.settings:
        print(f"program setting       {setting}")
    for framework, values in sorted(report.frameworks.items()):
        parts = ", ".join(
            f"{k} {_number(v)}" for k, v in sorted(values.items()) if k in (*HEADLINE, "entries")
        )
        print(f"  {framework:<19} {parts}")
    for framework, (count, size) in sorted(report.internal.items()):
        # Kernels, headers, probe answers: parts of compiles, not functions (`ls` lists them).
        print(
            f"  {framework + ' internal':<19} {count} entries ({format_size(size)}): kernel "
            "binaries, headers, probe answers, autotune records; `compilecache ls` lists them"
        )
    functions = sorted(report.functions.values(), key=lambda f: -f.compile_time_s)
    if functions:
        print(f"{'FUNCTION':<40} {'HITS':>6} {'MISSES':>6} {'COMPILE':>9} {'SAVED':>9}")
        for fn in functions[:20]:
            print(
                f"{fn.label[:40]:<40} {int(fn.hits):>6} {int(fn.misses):>6} "
                f"{fn.compile_time_s:>8.2f}s {fn.compile_time_saved_s:>8.2f}s"
            )
        if len(functions) > 20:
            print(f"... and {len(functions) - 20} more (stats --json lists them all)")
    for url, values in sorted(report.levels.items()):
        parts = ", ".join(f"{k} {int(v)}" for k, v in sorted(values.items()) if v)
        print(f"level {url}: {parts or 'no activity'}")
    return 0


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(round(value, 2))


# -- explain / doctor / report -----------------------------------------------------------------


def cmd_explain(args: argparse.Namespace) -> int:
    from compilecache import entry
    from compilecache.runtime import explain, history

    store = _store(args, create=False)
    records = history.read(store, history.MISS)
    if args.key:
        wanted = args.key
        # A function name, else a key: whole, without its framework prefix, or a prefix of it.
        by_name = [r for r in records if r.get("name") == wanted]
        records = by_name or [
            r
            for r in records
            if str(r.get("key", "")).startswith(wanted)
            or str(r.get("key", "")).split("/", 1)[-1].startswith(wanted)
        ]
        if not records:
            # No recorded miss: what is stored under it, matched as `show` matches (a name
            # names every entry of that function, one per shape and flags).
            from compilecache import frameworks

            frameworks.load_vocabularies()
            explained = [explain.explain_stored(store, k) for k in _matching_keys(store, wanted)]
            records = [
                {**found.to_json(), "stored": True, "recorded": False}
                for found in explained
                if found is not None
            ]
            if not records:
                print(
                    f"compilecache: no recorded miss and no entry matches {wanted!r}",
                    file=sys.stderr,
                )
                if args.json:
                    _print_json([])
                return 1
    internal = 0
    if not args.key and not args.all:
        # Misses of a framework's parts (kernel binaries, probe answers) are counted in one
        # line, not listed among the program's functions.
        kept = [r for r in records if not r.get(entry.INTERNAL)]
        internal, records = len(records) - len(kept), kept
    records = records[: args.limit]
    if args.json:
        _print_json(records)
        return 0
    if not records:
        if not history.keeps(store):
            print(f"compilecache: {store.url} keeps no miss history (local, memory and Redis do)")
        else:
            print(
                f"compilecache: no misses recorded in {store.url} yet; they are recorded when a "
                "compile misses the cache"
            )
        return 0
    now = time.time()
    for r in records:
        when = f"{_ago(now - float(r['time']))}" if "time" in r else "now (stored entry)"
        print(f"{when:>9}  {explain.describe_record(r)}")
        if args.key or args.verbose:
            for d in r.get("differences", []):
                before, after = d.get("before"), d.get("after")
                line = f"{'':11}- {d.get('component')}"
                if before != after:
                    line += f": {_value(before)} -> {_value(after)}"
                print(line)
            if r.get("nearest"):
                print(f"{'':11}nearest entry: {r['nearest']}")
            print(f"{'':11}key: {r.get('key')}")
    if internal:
        print(
            f"{'':11}and {internal} internal entries (kernel binaries, headers, probe answers) "
            "missed too: `explain --all` lists them"
        )
    other_hosts = sum(1 for r in records if r.get("unrunnable"))
    if other_hosts:
        print(
            f"{'':11}{other_hosts} of these missed because the stored entry was built for "
            "another kind of host (CPU, architecture or Python)"
        )
    return 0


def _value(value: Any) -> str:
    """A component's value in one line (a probe's C++ source is many)."""
    from compilecache.runtime.explain import one_line

    return repr(one_line(str(value), 120)) if value is not None else "None"


def cmd_check(args: argparse.Namespace) -> int:
    from compilecache.tools import check

    report = check.check(url=args.url)
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.text())
    return 0 if report.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from compilecache.tools import doctor

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("compilecache doctor: no command given (usage: compilecache doctor -- CMD)")
        return 2
    report = doctor.doctor(command, timeout=args.timeout)
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.text())
    return 0 if report.ok else 1


def cmd_report(args: argparse.Namespace) -> int:
    from compilecache import atomicfile
    from compilecache.tools import report

    atomicfile.target_of(args.html)  # a missing directory is an error before the store is read
    page = report.build_html(_store(args, create=False))
    # Whole or not at all: a full disk never leaves a partial page or spoils an existing one.
    atomicfile.write_text(args.html, page)
    print(f"compilecache: report written to {args.html}")
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
    from compilecache.runtime import manifest

    store = _store(args, create=False)
    infos = list(store.scan())
    # A job's lookup list sits beside the entries, but is not a compiled entry: stats does not
    # count it either.
    lists = [i for i in infos if i.key.startswith(manifest.PREFIX)]
    if not args.all:
        infos = [i for i in infos if not i.key.startswith(manifest.PREFIX)]
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
        _print_json([{**_info_json(i), "cpu": cpus.get(i.key)} for i in infos])
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
            f"{i.compile_time_s:>7.2f}s {i.hits:>5} {_ago(now - i.accessed):>7}  "
            f"{cpu_label(cpus.get(i.key)):<20}  {i.key}"
        )
    line = f"{_plural(len(infos), 'entry', 'entries')}, {format_size(sum(i.size for i in infos))}"
    if lists and not args.all:
        line += f" (and {_plural(len(lists), 'job lookup list')}, not listed: `ls --all`)"
    print(line)
    return 0


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _ago(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return f"{max(seconds, 0):.0f}s ago"


def _matching_keys(store: Store, text: str) -> list[str]:
    """The keys ``text`` names: a full store key, a framework key without its prefix, else every
    entry of that function name (one function has an entry per shape and flags), else every
    key that starts with ``text`` (with or without its framework prefix)."""
    for candidate in (text, *(f"{name}/{text}" for name in config_mod.KNOWN_FRAMEWORKS)):
        if store.stat(candidate) is not None:
            return [candidate]
    infos = list(store.scan())
    by_name = sorted(i.key for i in infos if i.name == text)
    return by_name or sorted(
        i.key for i in infos if i.key.startswith(text) or i.key.split("/", 1)[-1].startswith(text)
    )


def _resolve_key(store: Store, key: str) -> str | None:
    """The one entry ``key`` names (see :func:`_matching_keys`), or None when none or several."""
    matches = _matching_keys(store, key)
    return matches[0] if len(matches) == 1 else None


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
    store = _store(args, create=False)
    keys = _matching_keys(store, args.key)
    if not keys:
        print(f"compilecache: no entry matches {args.key!r}", file=sys.stderr)
        return 1
    from compilecache.runtime.reader import Reader

    reader = Reader(_config(args).signing)
    results = [_readable(_describe(store, key, reader)) for key in keys]
    if args.json:
        _print_json(results[0] if len(results) == 1 else results)
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
    where the entry records one (else its digest), and no value longer than a line."""
    found = result.get("entry")
    if isinstance(found, dict):
        extra = dict(found.get("extra") or {})
        readable = extra.pop("readable", None)
        components = dict(found.get("components") or {})
        if isinstance(readable, dict):
            components = {k: readable.get(k, v) for k, v in components.items()}
            components.update({k: v for k, v in readable.items() if k not in components})
        found = {**found, "components": components, "extra": extra}
        result = {**result, "entry": found}
    shortened: dict[str, Any] = _short(result)
    return shortened


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
            print(" " * indent + f"{name}: {_date(value)} ({_ago(now - value)})")
        else:
            print(" " * indent + f"{name}: {value}")


def _date(epoch: float) -> str:
    """A local date and time, as ``ls -l --time-style=long-iso`` shows them."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


# -- prune / clear / verify --------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    from compilecache.tools import prune

    store = _store(args, create=False)
    max_size = parse_size(args.max_size, "--max-size") if args.max_size else None
    older = parse_duration(args.older_than, "--older-than") if args.older_than else None
    if max_size is None and older is None:
        max_size = _config(args).max_size
    the_plan = prune.plan(store, max_size=max_size, older_than=older)
    if not args.json:
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
        "victims": [
            {"key": info.key, "size": info.size, "reason": reason}
            for info, reason in the_plan.victims
        ],
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
    store = _store(args, create=False)
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
    if store.counters is not None:
        store.counters.zero()
    if store.history is not None:
        store.history.clear()  # explanations name entries that are gone now
    print(f"compilecache: removed {removed} entries")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every entry (read with ``peek``: nothing counted, nothing repaired) and report
    each damaged one. Only ``--fix`` removes, and only damaged entries: an entry signed with
    another key is intact and valid for the hosts that hold that key (removing it is how one
    misconfigured host would empty a fleet's cache), so it is reported and always kept."""
    from compilecache.runtime.reader import Reader

    store = _store(args, create=False)
    reader = Reader(_config(args).signing)
    checked = 0
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
        checked += 1
    removed = [info.key for info, _ in damaged if args.fix and store.delete(info.key)]
    left = len(damaged) - len(removed)
    if args.json:
        _print_json(
            {
                "checked": checked,
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
        line = f"compilecache: {checked} entries checked, {len(damaged)} corrupt"
        if removed:
            line += f" ({len(removed)} removed)" if left else " and removed"
        elif damaged:
            line += " (kept: verify --fix removes them)"
        if foreign:
            line += f", {len(foreign)} signed with another key (kept)"
        print(line)
    return 1 if left else 0


# -- export / import / warm --------------------------------------------------------------------


def _entry_filter(args: argparse.Namespace) -> Any:
    from compilecache.runtime.transfer import EntryFilter, parse_since

    return EntryFilter(
        framework=args.framework,
        since=parse_since(args.since) if args.since else None,
        name=args.name,
    )


def _print_transfer(report: Any, args: argparse.Namespace, done: str) -> None:
    if args.json:
        _print_json(report.as_json())
        return
    if getattr(args, "verbose", False):
        for key, reason in report.skipped:
            print(f"skipped {key}: {reason}")
    else:
        by_reason: dict[str, int] = {}
        for _, reason in report.skipped:
            by_reason[reason] = by_reason.get(reason, 0) + 1
        for reason, count in sorted(by_reason.items(), key=lambda item: -item[1]):
            print(f"skipped {count} {'entry' if count == 1 else 'entries'}: {reason}")
    line = (
        f"compilecache: {done} {len(report.transferred)} of {report.total} entries "
        f"({format_size(report.bytes)})"
    )
    if report.present:
        line += f", {len(report.present)} already present"
    if report.skipped:
        line += f", {len(report.skipped)} skipped"
        if not getattr(args, "verbose", False):
            line += " (--verbose lists them)"
    print(line)


def cmd_export(args: argparse.Namespace) -> int:
    from compilecache.tools import bundle

    signing = _config(args).signing
    if args.format == "torch":
        # Late on purpose: only this path imports torch (seconds).
        from compilecache.frameworks import torch_artifacts

        report = torch_artifacts.export_blob(
            _store(args, create=False), args.file, select=_entry_filter(args), signing=signing
        )
        _print_transfer(report, args, f"wrote {args.file}:")
        if not args.json:
            print(
                "compilecache: load it with torch.compiler.load_cache_artifacts() in a process "
                "that configures torch as the ones that compiled it; it holds no C++ kernels, "
                "which compile again there"
            )
        return 0
    report = bundle.export_bundle(
        _store(args, create=False), args.file, select=_entry_filter(args), signing=signing
    )
    _print_transfer(report, args, f"wrote {args.file}:")
    return 0


def _new_directories(cfg: Config) -> list[str]:
    """The local directories of ``cfg``'s store that do not exist yet (opening it makes them)."""
    from compilecache.stores import registry
    from compilecache.stores.frame import directory_and_size

    out = []
    for level in registry.split_levels(cfg.url):
        parsed = registry.parse_url(level)
        if parsed.scheme == "file":
            path = os.path.expanduser(directory_and_size(parsed)[0])
            if not os.path.exists(path):
                out.append(path)
    return out


def cmd_import(args: argparse.Namespace) -> int:
    """Import a bundle or a torch blob. A store that did not exist before is removed again when
    nothing was imported into it (a damaged bundle, nothing usable here): a failed import
    leaves nothing behind."""
    import shutil

    made = _new_directories(_config(args))
    try:
        report = _import(args)
    except BaseException:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        raise
    if not report.transferred and not report.present:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
    _print_transfer(report, args, "imported")
    return 0 if report.transferred or report.present or not report.total else 1


def _import(args: argparse.Namespace) -> Any:
    from compilecache.frameworks import torch_artifacts
    from compilecache.tools import bundle

    cfg = _config(args)
    signing = cfg.signing
    kind = torch_artifacts.sniff(args.file) if args.format == "auto" else args.format
    if kind == "torch":
        if not cfg.shared_writer:
            raise CompileCacheError(
                f"{args.file}: torch's artifact files carry no signature, and this process "
                "trusts only signed entries (COMPILECACHE_TRUSTED_KEYS) without a signing key "
                "of its own: import it where COMPILECACHE_SIGNING_KEY_FILE is set (its entries "
                "are then signed by that key)"
            )
        report = torch_artifacts.import_blob(
            args.file, _store(args), signing=signing, check=not args.no_check
        )
    else:
        report = bundle.import_bundle(
            args.file, _store(args), signing=signing, check=not args.no_check
        )
    return report


def cmd_warm(args: argparse.Namespace) -> int:
    from compilecache.tools import bundle

    store = _store(args)
    target = store.levels[0]  # the local level: the first of several (fastest first)
    report = bundle.warm(
        _open(_config(args), args.source, create=False),
        target,
        select=_entry_filter(args),
        signing=_config(args).signing,
        check=not args.no_check,
    )
    _print_transfer(report, args, f"copied into {target.url}:")
    return 0


# -- keygen ------------------------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    """A new Ed25519 signing key for a trusted writer; its public key for the readers."""
    from compilecache import signing

    try:
        public = signing.write_new_key(args.out)
    except FileExistsError:
        print(
            f"compilecache keygen: {args.out} exists; not overwritten (remove it first, or "
            "choose another --out)",
            file=sys.stderr,
        )
        return 1
    except OSError as exc:
        # The error names the key's temporary file (written beside it, then linked): the target
        # is what the user asked for.
        reason = exc.strerror or str(exc)
        print(f"compilecache keygen: cannot write {args.out}: {reason}", file=sys.stderr)
        return 1
    print(public)
    print(
        f"compilecache: private key written to {args.out} (mode 0600). Writers: "
        f"COMPILECACHE_SIGNING_KEY_FILE={args.out}; readers: COMPILECACHE_TRUSTED_KEYS={public}",
        file=sys.stderr,
    )
    return 0


def trust_line(cfg: Config) -> str:
    """What this configuration signs and accepts, in words (``stats``, ``doctor``)."""
    signing = cfg.signing
    if signing is None:
        return "nothing signed or checked: any writer of the store can run code here"
    parts = []
    if cfg.trusted_keys or cfg.signing_key:
        # A writer's own key counts once, listed in COMPILECACHE_TRUSTED_KEYS or not.
        count = len({*cfg.trusted_keys, *([signing.public_key] if signing.public_key else [])})
        parts.append(f"only entries signed by {count} trusted key{'s' * (count != 1)}")
    if cfg.secret:
        parts.append("HMAC secret")
    if cfg.signing_key:
        parts.append("this process signs what it writes")
    elif not cfg.shared_writer:
        parts.append(
            "no signing key: writes nothing to shared levels (COMPILECACHE_SIGNING_KEY_FILE)"
        )
    return "; ".join(parts)


# -- run / demo --------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from compilecache import runner

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    overrides = {"COMPILECACHE_URL": args.url} if args.url else {}
    return runner.run(command, overrides)


def cmd_demo(args: argparse.Namespace) -> int:
    from compilecache.tools import demo

    return demo.main(url=args.url, layers=args.layers, json_output=args.json)


# -- parser ------------------------------------------------------------------------------------


URL_HELP = "store URL (default: $COMPILECACHE_URL or the local cache)"


def build_parser() -> argparse.ArgumentParser:
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
    sub = parser.add_subparsers(dest="command_name", required=True)

    def command(name: str, help_text: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--url", help=URL_HELP, default=argparse.SUPPRESS)
        if json_flag:
            p.add_argument(
                "--json", action="store_true", help="print JSON", default=argparse.SUPPRESS
            )
        p.set_defaults(takes_json=json_flag)
        return p

    p = command("run", "run a command with compilecache enabled in it", json_flag=False)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    # run, demo and doctor configure child processes: the parent loads no configuration.
    p.set_defaults(func=cmd_run, needs_config=False)

    p = sub.add_parser(
        "keygen",
        help="write a new Ed25519 signing key; print its public key",
        description="Write a new Ed25519 private key (mode 0600, never over an existing file) "
        "for a trusted writer (COMPILECACHE_SIGNING_KEY_FILE) and print its public key as one "
        "line, ed25519:<base64>, for the readers' COMPILECACHE_TRUSTED_KEYS.",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the private key")
    p.set_defaults(func=cmd_keygen, needs_config=False)

    p = command("demo", "compile JAX and torch.compile workloads cold, then warm, and compare")
    p.add_argument("--layers", type=int, default=8, help="transformer layers (default 8)")
    p.set_defaults(func=cmd_demo, needs_config=False)

    p = command(
        "check",
        "show the configuration and where each setting came from, test every store level "
        "with a round trip, and say what a run would warn about",
    )
    # It loads the configuration itself: a setting that does not load is a problem it reports.
    p.set_defaults(func=cmd_check, needs_config=False)

    p = command("stats", "show hits, misses, writes and time saved")
    p.add_argument("--zero", action="store_true", help="reset the persistent counters")
    p.add_argument("--prometheus", action="store_true", help="print the Prometheus text format")
    p.set_defaults(func=cmd_stats)

    p = command("explain", "list recent misses and why they missed")
    p.add_argument("key", nargs="?", help="a key, key prefix or function name")
    p.add_argument("--limit", type=int, default=20, help="misses to list (default 20)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every difference")
    p.add_argument(
        "--all",
        action="store_true",
        help="also list the internal entries (kernel binaries, headers, probe answers)",
    )
    p.set_defaults(func=cmd_explain)

    p = command(
        "doctor",
        "run a command twice on a scratch store (not your cache); report what will not hit",
    )
    p.add_argument("--timeout", type=float, help="seconds allowed for each run")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=cmd_doctor, needs_config=False)

    p = command("report", "write an HTML report with charts", json_flag=False)
    p.add_argument("--html", required=True, metavar="FILE", help="where to write the report")
    p.set_defaults(func=cmd_report)

    p = command("ls", "list entries")
    p.add_argument("--sort", choices=("key", "size", "accessed", "hits"), default="key")
    p.add_argument("--framework", choices=config_mod.KNOWN_FRAMEWORKS)
    p.add_argument(
        "--all", action="store_true", help="also the jobs' lookup lists kept for prefetching"
    )
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

    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("-v", "--verbose", action="store_true", help="list every skipped entry")
        p.add_argument("--framework", choices=config_mod.KNOWN_FRAMEWORKS)
        p.add_argument("--since", help="only entries used since: 7d, or a date (2024-06-01)")
        p.add_argument("--name", metavar="GLOB", help="only entries whose name or key matches")

    no_check = "do not skip entries built for another host (checksums and signatures still apply)"
    p = command("export", "write entries to one portable bundle file")
    p.add_argument("file", help="the bundle to write, e.g. cache.ccb")
    filters(p)
    p.add_argument(
        "--format",
        choices=("bundle", "torch"),
        default="bundle",
        help="bundle: compilecache's (every entry, C++ kernels included); torch: a blob for "
        "torch.compiler.load_cache_artifacts() (torch FX and AOTAutograd entries only; on CPU "
        "the loading process compiles every kernel again)",
    )
    p.set_defaults(func=cmd_export)

    p = command("import", "add a bundle's entries (verified; what cannot run here is skipped)")
    p.add_argument(
        "file", help="a bundle written by export, or a torch.compiler.save_cache_artifacts() blob"
    )
    p.add_argument("--no-check", action="store_true", help=no_check)
    p.add_argument("-v", "--verbose", action="store_true", help="list every skipped entry")
    p.add_argument(
        "--format",
        choices=("auto", "bundle", "torch"),
        default="auto",
        help="auto (default): from the file's first bytes; torch: a save_cache_artifacts() blob, "
        "whose compiled graphs become torch entries (it holds no C++ kernels: on CPU they "
        "compile again on first use)",
    )
    p.set_defaults(func=cmd_import)

    p = command("warm", "copy entries from another store into the local level")
    p.add_argument("--from", dest="source", required=True, metavar="URL", help="store to copy")
    filters(p)
    p.add_argument("--no-check", action="store_true", help=no_check)
    p.set_defaults(func=cmd_warm)
    return parser


# The status of a command whose reader went away (``compilecache ls | head -1``): 128 + SIGPIPE,
# what the shell reports for ``ls``, ``cat`` or ``yes`` in the same pipeline, so that scripts
# with ``set -o pipefail`` see the same as with the usual Unix tools.
EXIT_BROKEN_PIPE = 141


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments; an option the command does not know is reported with that command's own
    usage (argparse would show the top-level one), and exits with status 2."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if extra:
        commands[args.command_name].error(f"unrecognized arguments: {' '.join(extra)}")
    if args.json and not getattr(args, "takes_json", True):
        commands[args.command_name].error(
            f"{args.command_name} prints no data: --json is not taken"
        )
    return args


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
