"""A cold start under compilecache against a cold start under JAX's own cache.

A cold start compiles everything and writes every compile: what compilecache adds to it is the
bookkeeping of each miss (the lookup and its lease claim, the key's components for ``explain``,
the entry's encoding and its write). Each round runs, in a fresh process and an empty cache
directory each, in rotating order:

- ``jax``: JAX's own persistent cache (``JAX_COMPILATION_CACHE_DIR``), with
  ``jax_persistent_cache_min_compile_time_secs=0`` so that it writes the same compiles
  compilecache does;
- ``compilecache``: ``compilecache.enable()`` on a local directory.

Workloads: ``many`` (``compilecache.workloads.jax_many --count 60``: 60 small jitted functions,
each its own compile, the case where per-miss costs show) and ``step`` (``jax_step --layers 8``).
Reported per workload: the median of the per-round ratios compilecache / JAX of the whole
process (wall time seen from the parent) and of the workload's own span (``first_calls_s`` or
``first_step_s``), with the spread of the process pairs; both runs of a round must give the
same digest.

    python benchmarks/bench_jax_cold.py                  # 9 rounds of each workload
    python benchmarks/bench_jax_cold.py --rounds 3 --workloads many
    python benchmarks/bench_jax_cold.py --hooks --rounds 5   # ms per compile in the cache interfaces
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    add_no_write,
    clean_env,
    compile_package,
    machine_info,
    machine_markdown,
    markdown_table,
    median,
    progress,
    ratio,
    results_record,
    rotations,
    run_json,
    save_results,
)

NAME = "bench_jax_cold"
TARGETS = {"many": 1.03, "step": 1.02}
WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    # name: (module, arguments, the workload's own span)
    "many": ("compilecache.workloads.jax_many", ["--count", "60", "--json"], "first_calls_s"),
    "step": ("compilecache.workloads.jax_step", ["--layers", "8", "--json"], "first_step_s"),
}
# The child: enable compilecache first when asked (its import and enable() are part of what
# it costs), then run the workload as ``python -m`` would.
CHILD = r"""
import runpy, sys
mode, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if mode == "compilecache":
    import compilecache
    compilecache.enable()
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__")
"""
# --hooks: the time spent inside a JAX cache interface's ``get`` and ``put`` per compile, in the
# process: compilecache's (JaxCacheAdapter: the lookup and its claim; ``put`` hands the entry's
# encoding and write to the background thread) and, for comparison, JAX's own (its LRUCache on the same kind of
# directory); what a whole-process ratio cannot resolve. ``{setup}`` names the class ``TIMED``.
TIMED_CHILD = r"""
import contextlib, io, json, runpy, sys, time
module, args = sys.argv[1], sys.argv[2:]
{setup}
spent = {{"get": 0.0, "put": 0.0, "gets": 0, "puts": 0}}
for name in ("get", "put"):
    original = getattr(TIMED, name)
    def timed(self, *a, _original=original, _name=name, **k):
        start = time.perf_counter()
        try:
            return _original(self, *a, **k)
        finally:
            spent[_name] += time.perf_counter() - start
            spent[_name + "s"] += 1
    setattr(TIMED, name, timed)
{extra}
sys.argv = [module, *args]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    runpy.run_module(module, run_name="__main__")
print(json.dumps(spent))
"""
HOOKS_CHILD = TIMED_CHILD.format(
    setup=(
        "import compilecache\n"
        "compilecache.enable()\n"
        "from compilecache.frameworks.jax import adapter\n"
        "TIMED = adapter.JaxCacheAdapter"
    ),
    # The work a miss leaves to compilecache's background thread (the key's components, the
    # entry's encoding and write, its explanation and history record): CPU seconds, which on a
    # busy machine the program's own threads do without.
    extra=r"""
from compilecache.runtime import background
spent["background"] = 0.0
queue = background.Background.add
def add(self, work, _queue=queue, **options):
    def timed_work():
        start = time.thread_time()
        try:
            return work()
        finally:
            spent["background"] += time.thread_time() - start
    return _queue(self, timed_work, **options)
background.Background.add = add
""",
)
JAX_HOOKS_CHILD = TIMED_CHILD.format(
    setup="from jax._src import lru_cache\nTIMED = lru_cache.LRUCache", extra=""
)


def run_once(mode: str, workload: str, directory: Path, traces: bool = False) -> dict[str, Any]:
    module, args, span = WORKLOADS[workload]
    if mode == "jax":
        env = clean_env(
            JAX_COMPILATION_CACHE_DIR=str(directory),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        )
    else:
        env = clean_env(
            COMPILECACHE_URL=str(directory), COMPILECACHE_JAX_PRECOMPILE="1" if traces else "0"
        )
    result = run_json([sys.executable, "-c", CHILD, mode, module, *args], env)
    return {"wall_s": result.wall_s, "span_s": float(result.record[span]), **result.record}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--workloads", nargs="+", choices=sorted(WORKLOADS), default=["many", "step"]
    )
    parser.add_argument(
        "--hooks",
        action="store_true",
        help="time compilecache's JAX cache interface per compile, in the process (no pairs)",
    )
    parser.add_argument(
        "--traces",
        action="store_true",
        help="compilecache records served traces too (COMPILECACHE_JAX_PRECOMPILE=1)",
    )
    add_no_write(parser)
    args = parser.parse_args()
    compile_package()
    if args.hooks:
        return hooks(args.rounds, args.workloads)
    rows, data = [], []
    with tempfile.TemporaryDirectory(prefix="bench-jax-cold-") as tmp:
        for workload in args.workloads:
            runs: dict[str, list[dict[str, Any]]] = {"jax": [], "compilecache": []}
            for n, (r, mode) in enumerate(rotations(list(runs), args.rounds)):
                if mode == "jax" and r == len(runs["jax"]):
                    progress(f"{workload}: round {r + 1}/{args.rounds}")
                runs[mode].append(
                    run_once(mode, workload, Path(tmp) / f"{workload}-{n}", traces=args.traces)
                )
            pairs = list(zip(runs["jax"], runs["compilecache"], strict=True))
            digests = {(a.get("digest"), b.get("digest")) for a, b in pairs}
            if any(a != b for a, b in digests):
                raise SystemExit(f"{workload}: the two caches computed different results")
            walls = [ratio(b["wall_s"], a["wall_s"]) for a, b in pairs]
            wall = median(walls)
            span = median([ratio(b["span_s"], a["span_s"]) for a, b in pairs])
            row = [
                workload,
                median([a["wall_s"] for a, _ in pairs]),
                median([b["wall_s"] for _, b in pairs]),
                wall,
                f"{min(walls):.3f}-{max(walls):.3f}",
                span,
                TARGETS[workload],
            ]
            rows.append(row)
            data.append(
                dict(
                    zip(
                        (
                            "workload",
                            "jax_s",
                            "compilecache_s",
                            "ratio_wall",
                            "ratio_wall_pairs",
                            "ratio_span",
                            "target",
                        ),
                        row,
                        strict=True,
                    )
                )
            )
    machine = machine_info()
    table = markdown_table(
        [
            "workload",
            "JAX's cache s",
            "compilecache s",
            "paired ratio (process)",
            "pairs min-max",
            "paired ratio (workload span)",
            "target",
        ],
        rows,
    )
    markdown = (
        "# A cold start: compilecache against JAX's own cache\n\n"
        f"{machine_markdown(machine)}\n\nMedians of {args.rounds} interleaved pairs, each run a "
        f"fresh process with an empty cache directory.\n\n{table}\n"
    )
    print(markdown)
    if not args.no_write:
        save_results(NAME, False, results_record(NAME, machine, False, rows=data), markdown)
    return 0


def per_call_ms(record: dict[str, Any], seconds: str, calls: str) -> float:
    """Milliseconds of ``record[seconds]`` per one of ``record[calls]``."""
    return 1000 * record[seconds] / max(record[calls], 1)


def hooks(rounds: int, workloads: list[str]) -> int:
    """Per compile, the milliseconds spent in JaxCacheAdapter.get and .put (medians of
    ``rounds`` fresh processes on an empty directory each)."""
    with tempfile.TemporaryDirectory(prefix="bench-jax-cold-hooks-") as tmp:
        for workload in workloads:
            module, arguments, _ = WORKLOADS[workload]
            per_get, per_put, per_background = [], [], []
            own_get, own_put = [], []
            for r in range(rounds):
                env = clean_env(COMPILECACHE_URL=str(Path(tmp) / f"{workload}-{r}"))
                spent = run_json([sys.executable, "-c", HOOKS_CHILD, module, *arguments], env)
                record = spent.record
                per_get.append(per_call_ms(record, "get", "gets"))
                per_put.append(per_call_ms(record, "put", "puts"))
                per_background.append(per_call_ms(record, "background", "puts"))
                env = clean_env(
                    JAX_COMPILATION_CACHE_DIR=str(Path(tmp) / f"{workload}-{r}-jax"),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                )
                own = run_json([sys.executable, "-c", JAX_HOOKS_CHILD, module, *arguments], env)
                own_get.append(per_call_ms(own.record, "get", "gets"))
                own_put.append(per_call_ms(own.record, "put", "puts"))
            print(
                f"{workload}: {record['puts']} compiles; per compile, median of {rounds}: "
                f"get {median(per_get):.3f} ms, put {median(per_put):.3f} ms, "
                f"together {median([g + p for g, p in zip(per_get, per_put, strict=True)]):.3f} ms; "
                f"background thread CPU {median(per_background):.3f} ms; JAX's own cache: "
                f"get {median(own_get):.3f} ms, put {median(own_put):.3f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
