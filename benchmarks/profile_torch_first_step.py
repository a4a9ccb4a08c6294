"""Where a new machine's first torch step goes under compilecache: a profile.

One model (``compilecache.workloads.torch_step``), fresh processes:

1. a cold run under ``compilecache run`` seeds a store (Dynamo packages on, the default);
2. ``--rounds`` new-machine runs (empty torch directories, the store), unprofiled: import and
   first-step seconds as the workload measures them;
3. one new-machine run under ``cProfile`` (which slows Python code, Dynamo's most: its figures
   are a split, not timings), summarised by what the time was spent on: torch's import,
   compilecache's own work (enabling, store reads, entry decoding and checks, the package's
   lookup and its checks, the FX and AOTAutograd lookups), torch's package install and guard
   building, and the first run; and compilecache's own time by module (time in its own
   functions, not in what they call), with the calls that read the store counted;
4. torch's import floor: in plain fresh processes, the modules any warm first step imports
   (Inductor's output code needs its lowering and IR), timed after those the workload imports.

    python benchmarks/profile_torch_first_step.py                    # block, 3 rounds
    python benchmarks/profile_torch_first_step.py --model qwen2 --rounds 3 --top 25

Writes ``results/profile_torch_first_step.{json,md}`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import pstats
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import common

NAME = "profile_torch_first_step"
SRC = str(common.REPO_ROOT / "src" / "compilecache")
STEP = ("-m", "compilecache.workloads.torch_step")

# What the profiled run's time went to: (label, file suffix, function name). Cumulative seconds
# of each (a function that calls itself is counted once per outermost call by cProfile).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("module imports, torch's own included", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("compilecache enabled (at torch's import)", "compilecache/session.py", "enable"),
    ("hooks applied as torch's modules load", "frameworks/torch/integration.py", "apply"),
    (
        "torch.compile() call (package mode: lookup, install)",
        "site-packages/torch/__init__.py",
        "compile",
    ),
    (
        "  torch's lazy imports: get_compiler_config",
        "site-packages/torch/__init__.py",
        "get_compiler_config",
    ),
    ("  torch's lazy imports: get_compiler_fn", "torch/_dynamo/eval_frame.py", "get_compiler_fn"),
    ("  Dynamo package lookup (DynamoPackages._load)", "torch/dynamo/packages.py", "_load"),
    ("    its key (package_key)", "frameworks/torch/dynamo/key.py", "package_key"),
    ("    sources and dropped guards checked (_stale)", "torch/dynamo/packages.py", "_stale"),
    ("    store read and decode (Cache.load)", "compilecache/runtime/cache.py", "load"),
    (
        "  torch installs the package (CompilePackage.install)",
        "torch/_dynamo/package.py",
        "install",
    ),
    ("    guards built from their saved state", "torch/_dynamo/package.py", "load_guard_manager"),
    (
        "    FX graph loads (FxGraphCache._lookup_graph)",
        "torch/_inductor/codecache.py",
        "_lookup_graph",
    ),
    ("      FX store lookups (Cache.load_or_lead)", "runtime/cache.py", "load_or_lead"),
    (
        "      kernels loaded (PyCodeCache.load_by_key_path)",
        "torch/_inductor/codecache.py",
        "load_by_key_path",
    ),
    ("the step's forward: first run", "workloads/torch_step.py", "forward_loss"),
    ("the step's backward", "site-packages/torch/_tensor.py", "backward"),
    ("entry decodes and checks (entry.decode)", "src/compilecache/entry.py", "decode"),
    (
        "Dynamo frame compiles (convert_frame._compile)",
        "torch/_dynamo/convert_frame.py",
        "_compile",
    ),
)
# torch's import floor: what a warm first step imports whatever the cache, timed in plain fresh
# processes after the modules the workload imports itself. Inductor's output code (what a hit
# loads) imports ``extern_kernels`` from select_algorithm, which imports its lowering and IR;
# torch.compile() imports the rest of the list on its first call.
FLOOR_SCRIPT = """
import json, time, importlib
import torch, torch._dynamo, torch._inductor.config
out = {}
for label, names in (
    ("output code's imports (select_algorithm: lowering, IR)", ["torch._inductor.select_algorithm"]),
    ("the rest torch.compile() imports (compile_fx, after_dynamo, cpp_extension)",
     ["torch._inductor.compile_fx", "torch._dynamo.repro.after_dynamo", "torch.utils.cpp_extension"]),
):
    start = time.perf_counter()
    for name in names:
        importlib.import_module(name)
    out[label] = time.perf_counter() - start
print(json.dumps(out))
"""

# Store methods whose calls are counted (reads one by one show here).
STORE_CALLS = ("get", "get_many", "peek", "stat", "put")


def summary_line(stderr: str) -> str:
    """compilecache run's summary (hits, misses, writes) from a run's stderr."""
    found = [line for line in stderr.splitlines() if re.match(r"compilecache: \d+ hits", line)]
    return found[-1].removeprefix("compilecache: ") if found else "?"


def workload(model: str) -> list[str]:
    return [sys.executable, *STEP, "--model", model]


def under_compilecache(store: Path, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "compilecache", "run", "--url", str(store), "--", *argv]


def summarise(path: Path, top: int) -> dict[str, Any]:
    stats = pstats.Stats(str(path))
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    phases = []
    for label, suffix, function in PHASES:
        cumulative, calls = 0.0, 0
        for (filename, _line, name), (_cc, nc, _tt, ct, _callers) in table.items():
            if name == function and filename.endswith(suffix):
                cumulative += ct
                calls += nc
        phases.append({"what": label, "seconds": cumulative, "calls": calls})
    own: dict[str, float] = {}
    store_calls: dict[str, int] = {}
    for (filename, _line, name), (_cc, nc, tt, _ct, _callers) in table.items():
        if not filename.startswith(SRC):
            continue
        module = filename[len(SRC) + 1 :].removesuffix(".py").replace("/", ".")
        own[module] = own.get(module, 0.0) + tt
        if module.startswith("stores.") and name in STORE_CALLS:
            label = f"{module}.{name}"
            store_calls[label] = store_calls.get(label, 0) + nc
    ranked = sorted(own.items(), key=lambda item: -item[1])
    return {
        "total_s": float(stats.total_tt),  # type: ignore[attr-defined]
        "phases": phases,
        "compilecache_own_s": sum(own.values()),
        "compilecache_by_module": [{"module": m, "seconds": s} for m, s in ranked[:top]],
        "store_calls": store_calls,
    }


def markdown(data: dict[str, Any]) -> str:
    runs = data["runs"]
    profile = data["profile"]
    parts = [
        f"# {NAME}: model `{data['model']}`",
        "",
        common.machine_markdown(data["machine"]),
        "",
        "## New machine, unprofiled (compilecache run, empty torch directories, seeded store)",
        "",
        common.markdown_table(
            [
                "round",
                "import torch (s)",
                "first step (s)",
                "process wall (s)",
                "compilecache said",
            ],
            [
                [r["round"], r["import_s"], r["first_step_s"], r["wall_s"], r["summary"]]
                for r in runs
            ],
        ),
        "",
        "## torch's import floor (plain torch, fresh processes, medians over the rounds)",
        "",
        common.markdown_table(
            ["imported after torch, torch._dynamo and Inductor's config", "seconds"],
            [[label, seconds] for label, seconds in data["import_floor"].items()],
        ),
        "",
        "## One new-machine run under cProfile (a split: cProfile slows Python code)",
        "",
        f"Profiled process: import torch {common.fmt(profile['import_s'])} s, first step "
        f"{common.fmt(profile['first_step_s'])} s, profile total "
        f"{common.fmt(profile['total_s'])} s; compilecache's own functions (their own time, "
        f"not what they call) {common.fmt(profile['compilecache_own_s'])} s.",
        "",
        common.markdown_table(
            ["what (cumulative)", "seconds", "calls"],
            [[p["what"], p["seconds"], p["calls"]] for p in profile["phases"]],
        ),
        "",
        common.markdown_table(
            ["compilecache module (own time)", "seconds"],
            [[m["module"], m["seconds"]] for m in profile["compilecache_by_module"]],
        ),
        "",
        common.markdown_table(["store call", "calls"], sorted(profile["store_calls"].items())),
    ]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="compilecache modules listed")
    parser.add_argument("--keep", metavar="FILE", help="keep the cProfile output there too")
    common.add_no_write(parser)
    args = parser.parse_args()
    common.compile_package()
    with tempfile.TemporaryDirectory(prefix=f"{NAME}-") as tmp:
        root = Path(tmp)
        store = root / "store"
        common.progress(f"{args.model}: seeding the store (cold compile)")
        env = common.clean_env(**common.fresh_torch_dirs(root))
        common.run_json(under_compilecache(store, workload(args.model)), env)
        runs = []
        for number in range(args.rounds):
            common.progress(f"{args.model}: new machine, round {number + 1}")
            env = common.clean_env(**common.fresh_torch_dirs(root))
            result = common.run_json(under_compilecache(store, workload(args.model)), env)
            record = result.record
            runs.append(
                {
                    "round": number + 1,
                    "import_s": record.get("import_s", float("nan")),
                    "first_step_s": record.get("first_step_s", float("nan")),
                    "wall_s": result.wall_s,
                    "summary": summary_line(result.stderr),
                }
            )
        floor: dict[str, list[float]] = {}
        for number in range(args.rounds):
            common.progress(f"torch's import floor, round {number + 1}")
            env = common.clean_env(**common.fresh_torch_dirs(root))
            timed = common.run_json([sys.executable, "-c", FLOOR_SCRIPT], env).record
            for label, seconds in timed.items():
                floor.setdefault(label, []).append(float(seconds))
        common.progress(f"{args.model}: new machine under cProfile")
        profile_path = root / "first_step.prof"
        env = common.clean_env(**common.fresh_torch_dirs(root))
        argv = [sys.executable, "-m", "cProfile", "-o", str(profile_path), *STEP]
        result = common.run_json(
            under_compilecache(store, [*argv, "--model", args.model]), env, timeout=1800
        )
        profile = summarise(profile_path, args.top)
        if args.keep:
            shutil.copyfile(profile_path, args.keep)
        profile["import_s"] = result.record.get("import_s", float("nan"))
        profile["first_step_s"] = result.record.get("first_step_s", float("nan"))
    data = common.results_record(
        NAME,
        common.machine_info(),
        False,
        model=args.model,
        runs=runs,
        profile=profile,
        import_floor={label: statistics.median(times) for label, times in floor.items()},
    )
    common.publish(NAME, markdown(data), not args.no_write, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
