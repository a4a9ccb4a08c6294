"""A warm JAX start under compilecache against a warm start under JAX's own cache.

Each workload's caches are filled once (one run each), then every round runs, in fresh
processes and rotating order:

- ``jax``: JAX's own persistent cache (``JAX_COMPILATION_CACHE_DIR``, with
  ``jax_persistent_cache_min_compile_time_secs=0`` so that it holds the same compiles);
- ``compilecache``: ``compilecache.enable()`` on a local directory with served traces
  (``COMPILECACHE_JAX_PRECOMPILE=1``): a jitted function whose guards hold is not traced or
  lowered, and the job's executables are read ahead (deserialised on a thread once the
  program's backends exist);
- ``no-traces``: the same store with ``COMPILECACHE_JAX_PRECOMPILE=0`` (every jitted function is
  traced and lowered again, as with JAX's own cache; its executables still read ahead);
- ``no-read-ahead``: the same store with ``COMPILECACHE_PREFETCH=0`` (lookups read and
  deserialise on the program's thread, as JAX's own cache does).

Workloads: ``step`` (``jax_step --layers 12``: one large executable), ``deep`` (``--layers 48``,
reported without a goal), ``many``
(``jax_many --count 200``: 200 small ones) and ``optax`` (optax's own ``alias_test.py`` under
pytest, from the installed optax; needs ``pip install optax scikit-learn``; ``jax`` and
``compilecache`` only, each run about two minutes here). Reported per workload and variant: the median of the
per-round ratios against ``jax`` of the whole process (wall time seen from the parent) and of the
workload's own span (``first_step_s``: trace, lowering, cache load and the first run of the step;
``first_calls_s``: the same for all 200 functions; ``suite_s``: the test session), with their
spread. Every run of a workload must compute the same digest (the suite: the same outcome of
every test), and every warm run of ``step`` and ``many`` must hit every compile.

    python benchmarks/bench_jax_read_ahead.py                 # 9 rounds of each workload
    python benchmarks/bench_jax_read_ahead.py --rounds 3 --workloads many
    python benchmarks/bench_jax_read_ahead.py --rounds 3 --workloads optax
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    add_no_write,
    clean_env,
    compile_package,
    fmt,
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

NAME = "bench_jax_read_ahead"
# The goals: (whole process, workload span) at most these ratios against JAX's own cache.
TARGETS = {"step": (0.75, 0.45), "many": (0.65, 0.65), "optax": (0.85, 0.85)}
WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    # name: (module, arguments, the workload's own span)
    "step": ("compilecache.workloads.jax_step", ["--layers", "12", "--json"], "first_step_s"),
    # Reported, no goal: a deeper model, where tracing and lowering grow with the layers.
    "deep": ("compilecache.workloads.jax_step", ["--layers", "48", "--json"], "first_step_s"),
    "many": ("compilecache.workloads.jax_many", ["--count", "200", "--json"], "first_calls_s"),
    "optax": ("pytest", ["-q", "-p", "no:cacheprovider", "<optax>/_src/alias_test.py"], "suite_s"),
}
VARIANTS = ("jax", "compilecache", "no-traces", "no-read-ahead")
# A test suite is long: its rounds leave out the variant without read-ahead.
SUITE_VARIANTS = ("jax", "compilecache")
# The child: enable compilecache first when asked (its import and enable() are part of what it
# costs), count JAX's cache events, run the workload as ``python -m`` would, then print the
# workload's JSON line with the counts and compilecache's own.
CHILD = r"""
import contextlib, io, json, runpy, sys
mode, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
session = None
if mode != "jax":
    import compilecache
    session = compilecache.enable()
import jax.monitoring
counts = {}
def on_event(event, **kwargs):
    counts[event] = counts.get(event, 0) + 1
jax.monitoring.register_event_listener(on_event)
out = io.StringIO()
if module == "pytest":  # a test suite: its time and every test's outcome
    import hashlib, time, pytest
    outcomes = []
    class Outcomes:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                outcomes.append(f"{report.nodeid} {report.when} {report.outcome}")
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        status = pytest.main(args, plugins=[Outcomes()])
    record = {"suite_s": time.perf_counter() - start, "exit": int(status),
              "tests": len(outcomes),
              "digest": hashlib.sha256("\n".join(sorted(outcomes)).encode()).hexdigest()}
else:
    sys.argv = [module, *args]
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        runpy.run_module(module, run_name="__main__")
    record = json.loads(out.getvalue().strip().splitlines()[-1])
prefix = "/jax/compilation_cache/"
record["requests"] = counts.get(prefix + "compile_requests_use_cache", 0)
record["hits"] = counts.get(prefix + "cache_hits", 0)
if session is not None:
    record["read_ahead_hits"] = session.stats().get("jax.read_ahead_hits", 0)
    record["traces_served"] = session.stats().get("jax.trace.served", 0)
print(json.dumps(record))
"""


def _optax() -> str:
    """Where the installed optax is (without importing it: that would import JAX here)."""
    spec = importlib.util.find_spec("optax")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the optax workload needs optax: pip install optax scikit-learn")
    return str(next(iter(spec.submodule_search_locations)))


def run_once(variant: str, workload: str, directory: Path) -> dict[str, Any]:
    module, args, span = WORKLOADS[workload]
    args = [a.replace("<optax>", _optax()) if "<optax>" in a else a for a in args]
    if variant == "jax":
        env = clean_env(
            JAX_COMPILATION_CACHE_DIR=str(directory / "jax"),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
    else:
        env = clean_env(
            COMPILECACHE_URL=str(directory / "compilecache"),
            COMPILECACHE_JOB=f"bench-{workload}",
            **({"COMPILECACHE_PREFETCH": "0"} if variant == "no-read-ahead" else {}),
            # Served traces (off by default while new) for every variant but no-traces.
            COMPILECACHE_JAX_PRECOMPILE="0" if variant == "no-traces" else "1",
        )
    result = run_json([sys.executable, "-c", CHILD, variant, module, *args], env, timeout=1800)
    return {"wall_s": result.wall_s, "span_s": float(result.record[span]), **result.record}


def measure(workload: str, rounds: int, directory: Path) -> dict[str, Any]:
    """Fill both caches, then ``rounds`` rotating rounds of the warm variants."""
    progress(f"{workload}: filling the caches")
    filled = [run_once(v, workload, directory) for v in ("jax", "compilecache")]
    variants = SUITE_VARIANTS if WORKLOADS[workload][0] == "pytest" else VARIANTS
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r, variant in rotations(variants, rounds):
        record = run_once(variant, workload, directory)
        runs[variant].append(record)
        progress(
            f"  {workload} round {r + 1}/{rounds} {variant:<14} span {record['span_s']:7.3f} s"
            f"  process {record['wall_s']:7.3f} s  hits {record['hits']}/{record['requests']}"
            f"  read ahead {record.get('read_ahead_hits', '-')}"
            f"  traces served {record.get('traces_served', '-')}"
        )
    every = [*filled, *(r for v in variants for r in runs[v])]
    if len({r["digest"] for r in every}) != 1:
        raise SystemExit(f"{workload}: the runs computed different results")
    warm = [r for v in variants for r in runs[v]]
    # Every lookup JAX made hit (a served trace makes none: its executable is read directly).
    if variants == VARIANTS and any(
        r["hits"] != r["requests"] or not (r["requests"] or r.get("traces_served")) for r in warm
    ):
        raise SystemExit(f"{workload}: a warm run missed")
    result: dict[str, Any] = {"workload": workload, "rounds": rounds, "variants": {}}
    for variant in variants:
        mine = runs[variant]
        pairs = list(zip(mine, runs["jax"], strict=True))
        walls = [ratio(a["wall_s"], b["wall_s"]) for a, b in pairs]
        spans = [ratio(a["span_s"], b["span_s"]) for a, b in pairs]
        result["variants"][variant] = {
            "wall_s": median([r["wall_s"] for r in mine]),
            "span_s": median([r["span_s"] for r in mine]),
            "ratio_wall": median(walls),
            "ratio_wall_range": (min(walls), max(walls)),
            "ratio_span": median(spans),
            "ratio_span_range": (min(spans), max(spans)),
            "hits": median([r["hits"] for r in mine]),
            "read_ahead_hits": median([r.get("read_ahead_hits", 0) for r in mine]),
            "traces_served": median([r.get("traces_served", 0) for r in mine]),
            "requests": mine[0]["requests"],
        }
    return result


def _rows(results: list[dict[str, Any]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for found in results:
        workload = found["workload"]
        target_wall, target_span = TARGETS.get(workload, (None, None))
        for variant, v in found["variants"].items():
            if variant == "jax":
                ratios = ["1", "1"]
            else:
                low, high = v["ratio_wall_range"]
                span_low, span_high = v["ratio_span_range"]
                ratios = [
                    f"**{fmt(v['ratio_wall'])}** ({fmt(low)}-{fmt(high)})",
                    f"**{fmt(v['ratio_span'])}** ({fmt(span_low)}-{fmt(span_high)})",
                ]
            met = ""
            if variant == "compilecache" and target_wall is not None and target_span is not None:
                met = (
                    f"{'met' if v['ratio_wall'] <= target_wall else 'not met'} / "
                    f"{'met' if v['ratio_span'] <= target_span else 'not met'}"
                )
            rows.append(
                [
                    workload,
                    variant,
                    fmt(v["wall_s"]),
                    fmt(v["span_s"]),
                    *ratios,
                    f"{fmt(v['hits'], 0)} / {fmt(v['read_ahead_hits'], 0)} / {v['requests']}"
                    f" / {fmt(v['traces_served'], 0)}",
                    f"<= {target_wall} / <= {target_span}: {met}" if met else "",
                ]
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--workloads", nargs="+", choices=sorted(WORKLOADS), default=["step", "many"]
    )
    add_no_write(parser)
    args = parser.parse_args()
    compile_package()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-jax-read-ahead-") as tmp:
        for workload in args.workloads:
            results.append(measure(workload, args.rounds, Path(tmp) / workload))
    machine = machine_info()
    table = markdown_table(
        [
            "workload",
            "variant",
            "process s",
            "workload span s",
            "process / JAX's (paired; min-max)",
            "span / JAX's (paired; min-max)",
            "hits / read ahead / lookups / traces served",
            "goal (process / span)",
        ],
        _rows(results),
    )
    markdown = (
        "# A warm JAX start: compilecache against JAX's own cache\n\n"
        f"{machine_markdown(machine)}\n\nMedians of {args.rounds} rounds; each round runs the "
        "variants in fresh processes, in rotating order, on caches filled once. Every "
        f"run of a workload computed the same digest and every warm run hit every compile.\n\n"
        f"{table}\n"
    )
    print(markdown)
    if not args.no_write:
        # One results file per set of workloads: step and many, and the test suite apart.
        default = sorted(args.workloads) == ["many", "step"]
        name = NAME if default else f"{NAME}-{'-'.join(args.workloads)}"
        save_results(name, False, results_record(name, machine, False, results=results), markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
