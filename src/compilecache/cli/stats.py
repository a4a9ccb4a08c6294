"""``stats``, ``explain`` and ``report``: what the cache saved, and why something missed."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from compilecache.cli.common import (
    HEADLINE,
    Commands,
    ago,
    config_of,
    number,
    plural,
    print_json,
    store_of,
)
from compilecache.cli.configure import trust_line
from compilecache.cli.entries import matching_keys
from compilecache.config import format_size


def cmd_stats(args: argparse.Namespace) -> int:
    store = store_of(args, create=False)
    if args.zero:
        if store.counters is not None:  # nothing, where the store keeps no counters
            store.counters.zero()
        if args.json:
            print_json({"zeroed": True, "store": store.url})
        else:
            print("compilecache: statistics zeroed")
        return 0
    from compilecache.tools.store_stats import StatsReport

    report = StatsReport.of(store)
    if args.json:
        print_json(report.to_json())
        return 0
    if args.prometheus:
        from compilecache.tools.report import prometheus

        sys.stdout.write(prometheus(report))
        return 0
    print(f"store                 {report.url}")
    print(f"entries               {report.entries}")
    if report.job_lookup_lists:
        print(
            f"job lookup lists      {report.job_lookup_lists} (kept for prefetching, not "
            "entries: `ls --all` lists them)"
        )
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
    # Two facts: what the store holds, and what this process would sign and accept.
    print(f"signatures            store: {report.signers_line()}")
    print(f"                      this process: {trust_line(config_of(args))}")
    shown = {*HEADLINE, "corrupt", "unrunnable", "compile_time_s"}
    others = [(name, v) for name, v in report.counters.items() if v and name not in shown]
    if others:  # every other counter of stats.COUNTERS that is not zero
        print("also                  " + ", ".join(f"{name} {number(v)}" for name, v in others))
    for setting in report.settings:
        print(f"program setting       {setting}")
    for framework, values in sorted(report.frameworks.items()):
        parts = ", ".join(
            f"{k} {number(v)}" for k, v in sorted(values.items()) if k in (*HEADLINE, "entries")
        )
        print(f"  {framework:<19} {parts}")
    from compilecache.frameworks import internal_kinds

    for framework, (count, size) in sorted(report.internal.items()):
        # Kernels, headers, probe answers, traces: parts of compiles, not functions (`ls` lists
        # them).
        print(
            f"  {framework + ' internal':<19} {plural(count, 'entry', 'entries')} "
            f"({format_size(size)}): {internal_kinds(framework)}; "
            f"`compilecache ls --framework {framework}` lists them"
        )
    traces = report.frameworks.get("jax", {})
    said = [(what, traces.get(f"trace.{what}", 0)) for what in ("served", "stale", "refused")]
    if any(n for _, n in said) or traces.get("trace.writes"):
        # Warm starts that skipped tracing, entries whose guards did not hold, functions traced
        # every time (`explain` says why for each).
        print(
            f"  {'jax traces':<19} "
            + ", ".join(f"{number(n)} {what}" for what, n in said)
            + f", {number(traces.get('trace.writes', 0))} written"
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
        # Counts whole, seconds as seconds: a level's 2.91 s saved is not "2".
        parts = ", ".join(
            f"{k} {v:.2f}s" if k.endswith("_s") else f"{k} {number(v)}"
            for k, v in sorted(values.items())
            if v
        )
        print(f"level {url}: {parts or 'no activity'}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from compilecache import entry
    from compilecache.runtime import explain, history

    store = store_of(args, create=False)
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
            explained = [explain.explain_stored(store, k) for k in matching_keys(store, wanted)]
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
                    print_json([])
                return 1
    internal: list[str] = []  # the keys of the misses of a framework's parts, not listed
    if not args.key and not args.all:
        # Misses of a framework's parts (kernel binaries, probe answers) are counted in one
        # line, not listed among the program's functions.
        internal = [str(r.get("key", "")) for r in records if r.get(entry.INTERNAL)]
        records = [r for r in records if not r.get(entry.INTERNAL)]
    shown = len(records)
    records = records[: args.limit]
    if args.json:
        print_json(records)
        return 0
    if not records and not internal:
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
        when = f"{ago(now - float(r['time']))}" if "time" in r else "now (stored entry)"
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
        from compilecache.frameworks import internal_kinds_of

        # The kinds these misses are, from their keys: only what `explain --all` will list.
        # `--all` lists the newest --limit misses of every kind: a limit that holds them all.
        everything = len(internal) + shown
        hint = "explain --all" + (f" --limit {everything}" if everything > args.limit else "")
        print(
            f"{'':11}and {plural(len(internal), 'internal entry', 'internal entries')} "
            f"({internal_kinds_of(internal)}) "
            f"missed too: `{hint}` lists them"
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


def cmd_report(args: argparse.Namespace) -> int:
    from compilecache import atomicfile
    from compilecache.tools import report

    atomicfile.target_of(args.html)  # a missing directory is an error before the store is read
    page = report.build_html(store_of(args, create=False))
    # Whole or not at all: a full disk never leaves a partial page or spoils an existing one.
    atomicfile.write_text(args.html, page)
    print(f"compilecache: report written to {args.html}")
    return 0


def register(commands: Commands) -> None:
    """Add stats, explain and report to the parser."""
    p = commands.add("stats", "show hits, misses, writes and time saved")
    p.add_argument("--zero", action="store_true", help="reset the persistent counters")
    p.add_argument("--prometheus", action="store_true", help="print the Prometheus text format")
    p.set_defaults(func=cmd_stats)

    p = commands.add("explain", "list recent misses and why they missed")
    p.add_argument("key", nargs="?", help="a key, key prefix or function name")
    p.add_argument("--limit", type=int, default=20, help="misses to list (default 20)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every difference")
    p.add_argument(
        "--all",
        action="store_true",
        help="also list the misses of internal entries (probe answers, headers, XLA's files)",
    )
    p.set_defaults(func=cmd_explain)

    p = commands.add("report", "write an HTML report with charts", json_flag=False)
    p.add_argument("--html", required=True, metavar="FILE", help="where to write the report")
    p.set_defaults(func=cmd_report)
