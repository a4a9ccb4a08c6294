"""A new machine warm from torch's portable artifacts, from compilecache's store, or from both.

torch's portable workflow: a program calls ``torch.compiler.save_cache_artifacts()`` after
compiling, ships the bytes, and a program on another machine calls
``torch.compiler.load_cache_artifacts()`` before compiling. This benchmark sets that beside
compilecache's store. Every run is a fresh process of ``compilecache.workloads.torch_step``
(forward and backward of one model). Per model, once: a plain torch cold run on the "local"
directories that saves its artifacts (``plain.bin``), and a cold run under ``compilecache run``
on an empty store that saves its artifacts too (``cc.bin``). Then, interleaved over ``--rounds``,
each a fresh process:

- ``eager``: no torch.compile (the baseline a compile's overhead is measured from);
- ``torch_warm_local``: torch's own warm start on its directories (what the others are held
  against);
- ``torch_portable``: plain torch on empty directories (a new machine), loading ``plain.bin``;
- ``torch_portable_cc_saved``: the same, loading what the program saved under compilecache
  (``cc.bin``): whether a consumer without compilecache gets the same hits;
- ``cc_store``: ``compilecache run`` on empty directories, the store;
- ``cc_both``: the same, and the program loads ``cc.bin`` first.

The compile overhead of a run is its wall time minus the eager run's of the same round; ratios are
medians over rounds of the per-round ratios against ``torch_warm_local``. Every compiled run must
compute the same loss and gradients (digest). torch's counters (FX graph and AOTAutograd cache
hits and misses) say what each run was served; a run under compilecache whose Dynamo package was
installed from the store traces nothing, so torch's caches see no lookup at all.

    python benchmarks/bench_torch_portable.py                    # mlp and block, 5 rounds
    python benchmarks/bench_torch_portable.py --models gpt2 llama qwen2 --rounds 3
    python benchmarks/bench_torch_portable.py --models qwen2 --layers 8 --rounds 3

Results go to ``results/bench_torch_portable.*`` for the default models, else to a name that
says the models (and the layers, when not 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from compilecache import runner

NAME = "bench_torch_portable"
SRC = common.REPO_ROOT / "src"
MODELS = {
    "mlp": "MLP 256-1024-256",
    "block": "transformer block d=128 h=4",
    "gpt2": "transformers GPT2LMHeadModel, 2 layers, 4 heads, width 128, vocabulary 512",
    "llama": "transformers LlamaForCausalLM, 2 layers, 4 heads (2 KV), width 128, vocabulary 512",
    "qwen2": "transformers Qwen2ForCausalLM, Llama's shape, biases on the attention projections",
}
HF_MODELS = ("gpt2", "llama", "qwen2")
DEFAULT_MODELS = ["mlp", "block"]
VARIANTS = {
    "eager": "eager (no torch.compile)",
    "torch_warm_local": "torch warm local disk (same dirs)",
    "torch_portable": "torch, new machine, its own portable artifacts",
    "torch_portable_cc_saved": "torch, new machine, artifacts saved under compilecache",
    "cc_store": "compilecache, new machine, the store",
    "cc_both": "compilecache, new machine, the store and the artifacts",
}


class Model:
    """The directories, artifacts and store of one model's runs."""

    def __init__(self, model: str, root: Path, layers: int = 2) -> None:
        self.model = model
        self.layers = layers
        self.root = root / model
        self.root.mkdir(parents=True)
        self.salt = f"bench-{uuid.uuid4().hex}"
        self.local = common.fresh_torch_dirs(self.root)
        self.store = str(self.root / "store")
        self.plain_bin = str(self.root / "plain.bin")
        self.cc_bin = str(self.root / "cc.bin")

    def _args(self, extra: list[str]) -> list[str]:
        module = "compilecache.workloads.torch_step"
        model = ["--model", self.model, "--layers", str(self.layers)]
        return [sys.executable, "-m", module, *model, "--salt", self.salt, *extra]

    def _plain(self, dirs: dict[str, str], extra: list[str]) -> common.ProcessResult:
        env = common.clean_env(**dirs, PYTHONPATH=str(SRC))
        return common.run_json(self._args(extra), env, timeout=1800)

    def _cc(self, dirs: dict[str, str], extra: list[str]) -> common.ProcessResult:
        base = common.clean_env(**dirs, PYTHONPATH=str(SRC))
        env = runner.child_environment(base, None, {"COMPILECACHE_URL": self.store})
        return common.run_json(self._args(extra), env, timeout=1800)

    def seed(self) -> dict[str, dict[str, Any]]:
        """The cold runs that fill the local directories, the store and both artifact files."""
        runs: dict[str, Callable[[], common.ProcessResult]] = {
            "torch_cold": lambda: self._plain(self.local, ["--save-mega", self.plain_bin]),
            "cc_cold": lambda: self._cc(
                common.fresh_torch_dirs(self.root), ["--save-mega", self.cc_bin]
            ),
        }
        seeds = {}
        for name, run in runs.items():
            seeds[name] = _record(name, run())
            common.progress(f"  {self.model:<5} {name:<24} wall {seeds[name]['wall_s']:7.2f} s")
        return seeds

    def run(self, variant: str) -> dict[str, Any]:
        fresh = common.fresh_torch_dirs(self.root)
        if variant == "eager":
            proc = self._plain(fresh, ["--eager"])
        elif variant == "torch_warm_local":
            proc = self._plain(self.local, [])
        elif variant == "torch_portable":
            proc = self._plain(fresh, ["--load-mega", self.plain_bin])
        elif variant == "torch_portable_cc_saved":
            proc = self._plain(fresh, ["--load-mega", self.cc_bin])
        elif variant == "cc_store":
            proc = self._cc(fresh, [])
        else:
            proc = self._cc(fresh, ["--load-mega", self.cc_bin])
        record = _record(variant, proc)
        common.progress(
            f"  {self.model:<5} {variant:<24} wall {proc.wall_s:7.2f} s  "
            f"first step {record['first_step_s']:6.2f} s  {served(record)}"
        )
        return record


def _record(variant: str, proc: common.ProcessResult) -> dict[str, Any]:
    return {"variant": variant, "wall_s": proc.wall_s, **proc.record}


def served(record: dict[str, Any]) -> str:
    """What a run was served, in torch's own counters."""
    c = record["torch_counters"]
    if not any(c.values()):
        return "no FX or AOT lookup (nothing traced)"
    return (
        f"FX {c['fxgraph_cache_hit']} hit / {c['fxgraph_cache_miss']} miss, "
        f"AOT {c['autograd_cache_hit']} hit / {c['autograd_cache_miss']} miss"
    )


def summarize(model: str, runs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    compiled = [v for v in VARIANTS if v != "eager"]
    overhead, ratios = common.overhead_against(runs, compiled, "torch_warm_local")
    _, step_ratios = common.overhead_against(runs, compiled, "torch_warm_local", "first_step_s")
    last = {r["variant"]: r for r in runs}
    return {
        "model": model,
        "rounds": rounds,
        "wall_s": {
            v: common.median([r["wall_s"] for r in runs if r["variant"] == v]) for v in VARIANTS
        },
        "first_step_s": {
            v: common.median([r["first_step_s"] for r in runs if r["variant"] == v])
            for v in VARIANTS
        },
        "overhead_s": {k: common.median(v) for k, v in overhead.items()},
        "ratio_to_torch_warm_local": {k: common.median(v) for k, v in ratios.items()},
        "first_step_ratio": {k: common.median(v) for k, v in step_ratios.items()},
        "served": {v: served(last[v]) for v in compiled},
        "identical": len({r["digest"] for r in runs if r["variant"] != "eager"}) == 1,
    }


def markdown(
    info: dict[str, Any], summaries: list[dict[str, Any]], seeds: dict[str, Any], layers: int = 2
) -> str:
    lines = [
        "# A new machine warm from torch's portable artifacts, compilecache's store, or both",
        "",
        common.machine_markdown(info),
        "",
        f"Reproduce: `{common.command_line()}`",
        "",
        "Each round runs every variant once, each a fresh process, in rotating order. The compile "
        "overhead is a run's wall time minus the eager run's of the same round; its ratio is the "
        "median over rounds of the per-round ratios against torch's own warm local start; the "
        "first step's ratio is the same of the first step alone (compile or load, and one run). "
        "`served`: torch's own counters in the variant's last run.",
    ]
    for summary in summaries:
        model = summary["model"]
        shape = f" ({layers} layers, not 2)" if layers != 2 and model in HF_MODELS else ""
        lines += ["", f"## {MODELS[model]}{shape}", ""]
        rows = []
        for variant, label in VARIANTS.items():
            rows.append(
                [
                    label,
                    summary["wall_s"][variant],
                    summary["first_step_s"][variant],
                    summary["overhead_s"].get(variant, float("nan")),
                    summary["ratio_to_torch_warm_local"].get(variant, float("nan")),
                    summary["first_step_ratio"].get(variant, float("nan")),
                    summary["served"].get(variant, ""),
                ]
            )
        headers = ["variant", "wall_s", "first_step_s", "overhead_s", "/ torch warm local"]
        headers += ["first step / torch's"]
        lines.append(common.markdown_table([*headers, "served"], rows))
        walls = ", ".join(f"{k} {v['wall_s']:.1f} s ({served(v)})" for k, v in seeds[model].items())
        lines += [
            "",
            f"Identical loss and gradients in every compiled run: "
            f"{'yes' if summary['identical'] else 'NO'}. Cold seeding runs: {walls}.",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=2, help="of the transformers models")
    common.add_no_write(parser)
    args = parser.parse_args()
    info = common.machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-torch-portable-") as tmp:
        summaries, seeds, all_runs = common.measure_models(
            args.models,
            lambda model: Model(model, Path(tmp), args.layers),
            list(VARIANTS),
            args.rounds,
            summarize,
        )
    text = markdown(info, summaries, seeds, args.layers)
    data = common.results_record(
        NAME, info, False, summaries=summaries, seeds=seeds, runs=all_runs, layers=args.layers
    )
    # Other models or shapes than the default run's are written beside its results, not over.
    name = NAME if args.models == DEFAULT_MODELS else f"{NAME}-{'-'.join(args.models)}"
    name += f"-{args.layers}-layers" if args.layers != 2 else ""
    common.publish(name, text, not args.no_write, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
