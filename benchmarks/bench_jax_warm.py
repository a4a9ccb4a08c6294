"""Warm start of a JAX transformer train step: no cache vs JAX's own cache vs compilecache.

Every run is a fresh process executing ``compilecache.workloads.jax_step`` (one jitted
value_and_grad + SGD step of a transformer LM) under one of these variants:

- ``cold``: no persistent cache at all;
- ``jax populate`` / ``jax warm``: JAX's own cache (``JAX_COMPILATION_CACHE_DIR`` = a fresh
  directory, unbounded, the default mode) with ``jax_persistent_cache_min_compile_time_secs=0``
  so that it caches the same modules compilecache does (compilecache stores every compile; JAX's
  default threshold of 1 s would skip the small helper modules and make the comparison unfair);
- ``compilecache populate`` / ``compilecache warm``: ``compilecache.enable(<fresh local dir>)``;
- with ``--signed`` also ``signed populate`` / ``signed warm``: the same into another directory,
  written by a trusted writer (``COMPILECACHE_SIGNING_KEY_FILE``) and read by a process that
  accepts only its key (``COMPILECACHE_TRUSTED_KEYS``): every entry's Ed25519 signature is
  checked on load (issue 24).

The populate runs fill each cache (cold compile + write); the warm runs are then interleaved with
the cold ones in rotating order. Reported: ``first_step_s`` (first call until
``block_until_ready``: trace + compile or cache load + run), ``total_s`` (import of the workload
module, which the child does first, to the end: importing compilecache and enabling it, importing
JAX, building the inputs, the step, the checksum) and ``wall_s`` (the whole child process seen
from the parent: interpreter start and exit included). Every run must produce the same loss and
parameter digest, and every warm run must hit the cache for every compile.

    python benchmarks/bench_jax_warm.py            # 4 and 12 layers, 3 cold + 15 warm runs each
    python benchmarks/bench_jax_warm.py --quick    # 4 layers, 1 cold + 3 warm runs
    python benchmarks/bench_jax_warm.py --signed --layers 4   # signed entries alongside
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import common

NAME = "bench_jax_warm"
# Issue 12: a warm start within 2% of JAX's own cache (issue 2 asked for 5%).
TARGET_RATIO = 1.02
# Wall-clock spans, then the same spans in CPU seconds (less disturbed by a shared machine's load).
WALL_METRICS = ("first_step_s", "total_s", "wall_s")
CPU_METRICS = ("first_step_cpu_s", "total_cpu_s", "cpu_s")
METRICS = WALL_METRICS + CPU_METRICS
# The targets are on these; the others are reported alongside.
TARGET_METRICS = ("first_step_s", "total_s")

# The child: load the workload first (its clock starts then), then enable compilecache if asked
# (so total_s includes importing and enabling it), then count JAX's persistent-cache events, run
# the step once, print one JSON line.
CHILD = r"""
import importlib.util
import sys
mode, url, layers, workload = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# Load the workload from its file: "from compilecache.workloads import ..." would import the
# compilecache package in every variant and hide the cost of importing it.
spec = importlib.util.spec_from_file_location("jax_step", workload)
jax_step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jax_step)
session = None
import time
setup_start = time.perf_counter()
if mode == "compilecache":
    import compilecache
    session = compilecache.enable(url)
setup_s = time.perf_counter() - setup_start
import json
import jax.monitoring
counts = {}
def on_event(event, **kwargs):
    counts[event] = counts.get(event, 0) + 1
def on_duration(event, duration, **kwargs):
    counts[event] = counts.get(event, 0.0) + duration
jax.monitoring.register_event_listener(on_event)
jax.monitoring.register_event_duration_secs_listener(on_duration)
result = jax_step.run(layers)
prefix = "/jax/compilation_cache/"
result["requests"] = counts.get(prefix + "compile_requests_use_cache", 0)
result["hits"] = counts.get(prefix + "cache_hits", 0)
result["retrieval_s"] = counts.get(prefix + "cache_retrieval_time_sec", 0.0)
result["backend_compile_s"] = counts.get("/jax/core/compile/backend_compile_duration", 0.0)
if session is not None:
    result["compilecache"] = session.stats()
    result["compilecache_setup_s"] = setup_s
print(json.dumps(result), flush=True)
"""

WORKLOAD = common.REPO_ROOT / "src" / "compilecache" / "workloads" / "jax_step.py"

VARIANTS = {
    "cold": "no persistent cache",
    "jax_populate": "JAX cache, first run (compile + write)",
    "compilecache_populate": "compilecache, first run (compile + write)",
    "jax_warm": "JAX cache, warm",
    "compilecache_warm": "compilecache, warm",
}
SIGNED_VARIANTS = {
    "signed_populate": "compilecache, trusted writer, first run (compile + sign + write)",
    "signed_warm": "compilecache, reader verifying Ed25519 signatures, warm",
}
# The signing key of the ``signed`` variants: its file and public key (set by main()).
_KEYS: dict[str, str] = {}


def run_variant(variant: str, layers: int, jax_dir: Path, cc_dir: Path) -> dict[str, Any]:
    if variant.startswith("jax"):
        mode = "jax"
        env = common.clean_env(
            JAX_COMPILATION_CACHE_DIR=str(jax_dir),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
    elif variant.startswith("compilecache"):
        mode, env = "compilecache", common.clean_env()
    elif variant == "signed_populate":
        mode, cc_dir = "compilecache", cc_dir.with_name(cc_dir.name + "-signed")
        env = common.clean_env(COMPILECACHE_SIGNING_KEY_FILE=_KEYS["file"])
    elif variant == "signed_warm":
        mode, cc_dir = "compilecache", cc_dir.with_name(cc_dir.name + "-signed")
        env = common.clean_env(COMPILECACHE_TRUSTED_KEYS=_KEYS["public"])
    else:
        mode, env = "cold", common.clean_env()
    proc = common.run_json(
        [sys.executable, "-c", CHILD, mode, str(cc_dir), str(layers), str(WORKLOAD)],
        env,
        timeout=1800,
    )
    record = dict(proc.record)
    record["wall_s"] = proc.wall_s
    record["cpu_s"] = proc.cpu_s
    record["variant"] = variant
    common.progress(
        f"  {layers:>2} layers {variant:<22} first_step {record['first_step_s']:7.3f} s  "
        f"total {record['total_s']:7.3f} s  wall {proc.wall_s:7.3f} s  "
        f"cpu {record['first_step_cpu_s']:6.3f}/{proc.cpu_s:6.3f} s  "
        f"hits {record['hits']}/{record['requests']}"
    )
    return record


def variants(signed: bool) -> dict[str, str]:
    return {**VARIANTS, **(SIGNED_VARIANTS if signed else {})}


def _per_round(runs: list[dict[str, Any]], variant: str, base: str) -> dict[str, list[float]]:
    """``variant`` / ``base`` for each metric, one ratio per rotation round (the i-th warm run
    of each variant ran in the same round, next to each other)."""
    mine = [r for r in runs if r["variant"] == variant]
    theirs = [r for r in runs if r["variant"] == base]
    return {
        m: [common.ratio(a[m], b[m]) for a, b in zip(mine, theirs, strict=True)] for m in METRICS
    }


def measure(
    layers: int, cold_runs: int, warm_runs: int, workdir: Path, *, signed: bool = False
) -> dict[str, Any]:
    jax_dir = workdir / f"jax-{layers}"
    cc_dir = workdir / f"compilecache-{layers}"
    runs: list[dict[str, Any]] = []
    populate = ["jax_populate", "compilecache_populate"] + (["signed_populate"] if signed else [])
    for variant in populate:
        runs.append(run_variant(variant, layers, jax_dir, cc_dir))
    names = ["cold", "jax_warm", "compilecache_warm"] + (["signed_warm"] if signed else [])
    done = dict.fromkeys(names, 0)
    wanted = {name: cold_runs if name == "cold" else warm_runs for name in names}
    for _, variant in common.rotations(names, max(cold_runs, warm_runs)):
        if done[variant] < wanted[variant]:
            runs.append(run_variant(variant, layers, jax_dir, cc_dir))
            done[variant] += 1

    summary: dict[str, dict[str, Any]] = {}
    for variant in variants(signed):
        mine = [r for r in runs if r["variant"] == variant]
        summary[variant] = {
            "runs": len(mine),
            **{m: common.median([r[m] for r in mine]) for m in METRICS},
            # The spread of each metric over the runs: (min, max).
            "spread": {m: (min(r[m] for r in mine), max(r[m] for r in mine)) for m in METRICS},
            "retrieval_s": common.median([r["retrieval_s"] for r in mine]),
            "hits": [r["hits"] for r in mine],
            # compilecache's own costs: import + enable, and Cache.load (read + verify) per run.
            "compilecache_setup_s": common.median(
                [r.get("compilecache_setup_s", 0.0) for r in mine]
            ),
            "compilecache_load_s": common.median(
                [r.get("compilecache", {}).get("load_time_s", 0.0) for r in mine]
            ),
            "requests": [r["requests"] for r in mine],
        }
    ratios = {
        m: common.ratio(summary["compilecache_warm"][m], summary["jax_warm"][m]) for m in METRICS
    }
    per_round = _per_round(runs, "compilecache_warm", "jax_warm")
    paired = {m: common.median(values) for m, values in per_round.items()}
    signed_paired: dict[str, Any] = {}
    if signed:
        signed_rounds = _per_round(runs, "signed_warm", "compilecache_warm")
        signed_paired = {m: common.median(values) for m, values in signed_rounds.items()}
    paired_spread = {m: (min(values), max(values)) for m, values in per_round.items()}
    results = {(r["loss"], r["checksum"], r["digest"]) for r in runs}
    warm_all_hits = all(
        r["hits"] == r["requests"] and r["requests"] > 0
        for r in runs
        if r["variant"].endswith("_warm")
    )
    # The signed reader's hits are compilecache's own (a rejected entry would be a miss).
    signed_all_hits = all(
        r["compilecache"]["hits"] > 0
        and r["compilecache"]["misses"] == 0
        and r["compilecache"]["foreign"] == 0
        for r in runs
        if r["variant"] == "signed_warm"
    )
    return {
        "layers": layers,
        "summary": summary,
        "ratios_compilecache_over_jax": ratios,
        "paired_ratios_compilecache_over_jax": paired,
        "paired_ratio_spread": paired_spread,
        "paired_ratios_signed_over_unsigned": signed_paired,
        "signed_warm_all_verified_hits": signed_all_hits,
        "identical_results": len(results) == 1,
        "loss": runs[0]["loss"],
        "checksum": runs[0]["checksum"],
        "warm_runs_all_hits": warm_all_hits,
        "runs": runs,
    }


def _with_spread(variant: dict[str, Any], metric: str) -> str:
    low, high = variant.get("spread", {}).get(metric, (variant[metric], variant[metric]))
    return f"{common.fmt(variant[metric])} ({common.fmt(low)}-{common.fmt(high)})"


def render(info: dict[str, Any], per_layers: list[dict[str, Any]], command: str) -> str:
    parts = [
        "# JAX warm start: no cache vs JAX's persistent cache vs compilecache",
        "",
        common.machine_markdown(info),
        "",
        f"Reproduce: `{command}`",
        "",
        "Workload: `compilecache.workloads.jax_step` (transformer LM train step, value_and_grad + "
        "SGD, D=256 T=128 B=8, vocab 1024), each run a fresh process. JAX's cache runs with "
        "`jax_persistent_cache_min_compile_time_secs=0` (default 1 s) so that both caches store "
        "the same modules. Medians; `hits` = persistent-cache hits / cache requests per run.",
    ]
    for block in per_layers:
        s = block["summary"]
        wall_rows, cpu_rows = [], []
        for variant, label in variants("signed_warm" in s).items():
            v = s[variant]
            hits = ", ".join(f"{h}/{q}" for h, q in zip(v["hits"], v["requests"], strict=True))
            wall_rows.append(
                [label, v["runs"], *(v[m] for m in WALL_METRICS), v["retrieval_s"], hits]
            )
            cpu_rows.append([label, v["runs"], *(v[m] for m in CPU_METRICS)])
        ratio_rows = []
        for m in METRICS:
            r, p = (
                block["ratios_compilecache_over_jax"][m],
                block["paired_ratios_compilecache_over_jax"][m],
            )
            verdict = "met" if r <= TARGET_RATIO else "MISSED"
            if m not in TARGET_METRICS:
                verdict = f"({verdict}: cross-check)"
            low, high = block.get("paired_ratio_spread", {}).get(m, (p, p))
            ratio_rows.append(
                [
                    m,
                    _with_spread(s["jax_warm"], m),
                    _with_spread(s["compilecache_warm"], m),
                    r,
                    f"{common.fmt(p)} ({common.fmt(low)}-{common.fmt(high)})",
                    verdict,
                ]
            )
        ratio_headers = [
            "metric",
            "JAX warm (min-max)",
            "compilecache warm (min-max)",
            "ratio",
            "paired ratio (min-max)",
        ]
        ratio_headers.append(f"target <= {TARGET_RATIO}")
        speedup = common.ratio(s["cold"]["first_step_s"], s["compilecache_warm"]["first_step_s"])
        own = s["compilecache_warm"]
        parts += [
            "",
            f"## {block['layers']} layers",
            "",
            "Wall-clock seconds (medians):",
            "",
            common.markdown_table(
                ["variant", "runs", *WALL_METRICS, "retrieval_s", "hits"], wall_rows
            ),
            "",
            "CPU seconds, all threads (medians; `cpu_s` is the whole child process):",
            "",
            common.markdown_table(["variant", "runs", *CPU_METRICS], cpu_rows),
            "",
            "compilecache warm / JAX warm (ratio of medians; median of the per-round ratios):",
            "",
            common.markdown_table(ratio_headers, ratio_rows),
            "",
            f"Cold / compilecache warm, first step: {common.fmt(speedup)}x. "
            f"Identical loss and parameters in all {len(block['runs'])} runs: "
            f"{'yes' if block['identical_results'] else 'NO'} (loss {block['loss']!r}, "
            f"checksum {block['checksum']!r}). Every warm run hit on every compile: "
            f"{'yes' if block['warm_runs_all_hits'] else 'NO'}.",
            "",
            "compilecache's own work in a warm run, timed inside the child (medians): import + "
            f"`enable()` {common.fmt(own['compilecache_setup_s'] * 1000.0)} ms, `Cache.load` "
            f"(read + verify the entry) {common.fmt(own['compilecache_load_s'] * 1000.0)} ms; "
            "the rest of the run is the same JAX work in both variants (`retrieval_s` is JAX's "
            "own timing of the cache read plus deserialising the executable).",
        ]
        if "signed_warm" in s:
            signed = s["signed_warm"]
            ratios = block["paired_ratios_signed_over_unsigned"]
            parts += [
                "",
                "Signed entries (Ed25519, issue 24): reader verifying every entry / unsigned "
                "compilecache warm, median of the per-round ratios: "
                + ", ".join(f"{m} {common.fmt(ratios[m])}" for m in (*TARGET_METRICS, "wall_s"))
                + f". `Cache.load` (read + verify) {common.fmt(signed['compilecache_load_s'] * 1000.0)}"
                f" ms signed vs {common.fmt(own['compilecache_load_s'] * 1000.0)} ms unsigned; "
                f"import + `enable()` {common.fmt(signed['compilecache_setup_s'] * 1000.0)} ms vs "
                f"{common.fmt(own['compilecache_setup_s'] * 1000.0)} ms. Every signed warm run "
                "hit every entry, all verified: "
                f"{'yes' if block['signed_warm_all_verified_hits'] else 'NO'}.",
            ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="4 layers, 1 cold + 3 warm runs")
    parser.add_argument("--layers", type=int, nargs="+", help="layer counts (default 4 12)")
    parser.add_argument("--cold-runs", type=int, help="cold runs per layer count (default 3)")
    parser.add_argument("--warm-runs", type=int, help="warm runs per variant (default 15)")
    parser.add_argument(
        "--signed",
        action="store_true",
        help="also a trusted writer and a reader verifying Ed25519 signatures (issue 24)",
    )
    common.add_no_write(parser)
    args = parser.parse_args(argv)
    layers = args.layers or ([4] if args.quick else [4, 12])
    cold_runs = args.cold_runs or (1 if args.quick else 3)
    warm_runs = args.warm_runs or (3 if args.quick else 15)

    info = common.machine_info()
    per_layers = []
    with tempfile.TemporaryDirectory(prefix="bench-jax-warm-") as tmp:
        if args.signed:
            from compilecache import signing

            _KEYS["file"] = str(Path(tmp) / "writer.pem")
            _KEYS["public"] = signing.write_new_key(_KEYS["file"])
        for n in layers:
            common.progress(f"{n} layers: populate, then {cold_runs} cold / {warm_runs} warm")
            per_layers.append(measure(n, cold_runs, warm_runs, Path(tmp), signed=args.signed))
    command = common.command_line()
    markdown = render(info, per_layers, command)
    print(markdown)
    ok = all(
        b["identical_results"]
        and b["warm_runs_all_hits"]
        and b["signed_warm_all_verified_hits"]
        and all(b["ratios_compilecache_over_jax"][m] <= TARGET_RATIO for m in TARGET_METRICS)
        for b in per_layers
    )
    if not args.no_write:
        data = common.results_record(
            NAME,
            info,
            args.quick,
            target={"compilecache_warm_over_jax_warm_max": TARGET_RATIO},
            targets_met=ok,
            layers=per_layers,
        )
        # A signed run is its own result: it never replaces the plain one.
        common.save_results(NAME + ("-signed" if args.signed else ""), args.quick, data, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
