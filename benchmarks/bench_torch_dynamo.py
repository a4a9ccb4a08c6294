"""Warm starts past Dynamo: compilecache's Dynamo packages against torch's own warm starts.

Every run is a fresh process executing ``compilecache.workloads.torch_step`` (forward and
backward of one model). Per model, once: a plain torch cold run on the "local" directories, a
plain torch cold run with ``TORCH_CACHING_PRECOMPILE=1`` that ends with
``save_cache_artifacts()`` (torch writes its Dynamo packages then), and compilecache cold runs
seeding two stores (``COMPILECACHE_TORCH_PRECOMPILE=0`` and ``=1``). Then, interleaved
over ``--rounds``:

- ``eager``: no torch.compile (the baseline the compile overhead is measured from);
- ``torch_warm_local``: torch's own warm start on its directories;
- ``torch_precompile_local``: torch's own warm start with ``TORCH_CACHING_PRECOMPILE=1``;
- ``cc_new_machine``: compilecache on empty directories (a new machine), the store, without
  Dynamo packages (``COMPILECACHE_TORCH_PRECOMPILE=0``);
- ``cc_precompile_new_machine``: the same with ``COMPILECACHE_TORCH_PRECOMPILE=1``.

The compile overhead of a run is its wall time minus the eager run's of the same round; ratios
are medians over rounds of the per-round ratios against ``torch_warm_local``. Every compiled run
must compute the same loss and gradients (digest), and the runs say whether Dynamo traced.

    python benchmarks/bench_torch_dynamo.py                 # mlp and block, 3 rounds
    python benchmarks/bench_torch_dynamo.py --models gpt2 llama --rounds 2   # transformers
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import common
from compilecache import runner

NAME = "bench_torch_dynamo"
SRC = common.REPO_ROOT / "src"
MODELS = {
    "mlp": "MLP 256-1024-256",
    "block": "transformer block d=128 h=4",
    "gpt2": "transformers GPT2LMHeadModel, 2 layers, 4 heads, width 128, vocabulary 512",
    "llama": "transformers LlamaForCausalLM, 2 layers, 4 heads (2 KV), width 128, vocabulary 512",
    "qwen2": "transformers Qwen2ForCausalLM, Llama's shape, biases on the attention projections",
}
TARGET = 0.35  # compile overhead on a new machine / torch's own warm local start
VARIANTS = {
    "eager": "eager (no torch.compile)",
    "torch_warm_local": "torch warm local disk (same dirs)",
    "torch_precompile_local": "torch warm local, TORCH_CACHING_PRECOMPILE=1 (same dirs)",
    "cc_new_machine": "compilecache, COMPILECACHE_TORCH_PRECOMPILE=0, new machine",
    "cc_precompile_new_machine": "compilecache + COMPILECACHE_TORCH_PRECOMPILE=1, new machine",
}


class Model:
    """The directories and stores of one model's runs."""

    def __init__(self, model: str, root: Path) -> None:
        self.model = model
        self.root = root / model
        self.root.mkdir(parents=True)
        self.salt = f"bench-{uuid.uuid4().hex}"
        self.local = common.fresh_torch_dirs(self.root)
        self.precompile_local = common.fresh_torch_dirs(self.root)
        self.store = str(self.root / "store")
        self.precompile_store = str(self.root / "store-precompile")
        self.failed: dict[str, str] = {}  # variant -> the error's last line

    def _plain(self, dirs: dict[str, str], extra: list[str], **env: str) -> common.ProcessResult:
        child = common.clean_env(**dirs, **env, PYTHONPATH=str(SRC))
        args = [sys.executable, "-m", "compilecache.workloads.torch_step", "--model", self.model]
        return common.run_json([*args, "--salt", self.salt, *extra], child, timeout=1800)

    def _cc(self, dirs: dict[str, str], store: str, precompile: bool) -> common.ProcessResult:
        overrides = {"COMPILECACHE_URL": store}
        overrides["COMPILECACHE_TORCH_PRECOMPILE"] = "1" if precompile else "0"
        env = runner.child_environment(
            common.clean_env(**dirs, PYTHONPATH=str(SRC)), None, overrides
        )
        args = [sys.executable, "-m", "compilecache.workloads.torch_step", "--model", self.model]
        return common.run_json([*args, "--salt", self.salt], env, timeout=1800)

    def seed(self) -> dict[str, float]:
        """The cold runs that fill the directories and stores; their walls."""
        mega = str(self.root / "mega.bin")
        runs = {
            "torch_cold": lambda: self._plain(self.local, []),
            "torch_precompile_cold": lambda: self._plain(
                self.precompile_local, ["--save-mega", mega], TORCH_CACHING_PRECOMPILE="1"
            ),
            "cc_cold": lambda: self._cc(common.fresh_torch_dirs(self.root), self.store, False),
            "cc_precompile_cold": lambda: self._cc(
                common.fresh_torch_dirs(self.root), self.precompile_store, True
            ),
        }
        walls: dict[str, float] = {}
        for name, run in runs.items():
            try:
                walls[name] = run().wall_s
            except RuntimeError as exc:  # torch's own precompile raises on some models
                self.failed[name] = _last_line(str(exc))
                common.progress(f"  {self.model:<5} {name:<26} FAILED: {self.failed[name]}")
                continue
            common.progress(f"  {self.model:<5} {name:<26} wall {walls[name]:7.2f} s")
        return walls

    def run(self, variant: str) -> dict[str, Any] | None:
        """One run of ``variant``; None when it cannot run (its seeding failed, or it raised)."""
        if variant == "torch_precompile_local" and "torch_precompile_cold" in self.failed:
            return None
        try:
            return self._run(variant)
        except RuntimeError as exc:
            self.failed[variant] = _last_line(str(exc))
            common.progress(f"  {self.model:<5} {variant:<26} FAILED: {self.failed[variant]}")
            return None

    def _run(self, variant: str) -> dict[str, Any]:
        if variant == "eager":
            proc = self._plain(common.fresh_torch_dirs(self.root), ["--eager"])
        elif variant == "torch_warm_local":
            proc = self._plain(self.local, [])
        elif variant == "torch_precompile_local":
            proc = self._plain(self.precompile_local, [], TORCH_CACHING_PRECOMPILE="1")
        elif variant == "cc_new_machine":
            proc = self._cc(common.fresh_torch_dirs(self.root), self.store, False)
        else:
            proc = self._cc(common.fresh_torch_dirs(self.root), self.precompile_store, True)
        record = {"variant": variant, "wall_s": proc.wall_s, **proc.record}
        common.progress(
            f"  {self.model:<5} {variant:<26} wall {proc.wall_s:7.2f} s  "
            f"first step {record['first_step_s']:7.2f} s"
        )
        return record


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else text[:300]


def summarize(
    model: str, runs: list[dict[str, Any]], rounds: int, failed: dict[str, str]
) -> dict[str, Any]:
    overhead, ratios = common.overhead_against(
        runs, [v for v in VARIANTS if v != "eager"], "torch_warm_local"
    )
    digests = {r["digest"] for r in runs if r["variant"] != "eager"}
    return {
        "model": model,
        "rounds": rounds,
        "overhead_s": {k: common.median(v) for k, v in overhead.items()},
        "ratio_to_torch_warm_local": {k: common.median(v) for k, v in ratios.items()},
        "first_step_s": {
            v: common.median([r["first_step_s"] for r in runs if r["variant"] == v])
            for v in VARIANTS
        },
        "identical": len(digests) == 1,
        "failed": failed,
    }


def markdown(info: dict[str, Any], summaries: list[dict[str, Any]], seeds: dict[str, Any]) -> str:
    lines = [
        "# torch warm starts past Dynamo: Dynamo packages from the store",
        "",
        common.machine_markdown(info),
        "",
        f"Reproduce: `{common.command_line()}`",
        "",
        "Each round runs every variant once, each a fresh process; the compile overhead is a "
        "run's wall time minus the eager run's of the same round; ratios are medians over rounds "
        "of the per-round ratios against torch's own warm local start.",
    ]
    for summary in summaries:
        model = summary["model"]
        lines += ["", f"## {MODELS[model]}", ""]
        rows = []
        for variant, label in VARIANTS.items():
            over = summary["overhead_s"].get(variant, float("nan"))
            ratio = summary["ratio_to_torch_warm_local"].get(variant, float("nan"))
            rows.append([label, summary["first_step_s"][variant], over, ratio])
        lines.append(
            common.markdown_table(
                ["variant", "first_step_s", "overhead_s", "overhead / torch warm local"], rows
            )
        )
        achieved = summary["ratio_to_torch_warm_local"]["cc_precompile_new_machine"]
        verdict = "met" if achieved <= TARGET else "NOT met"
        lines += [
            "",
            f"Target: compilecache + precompile on a new machine <= {TARGET}x torch's warm local "
            f"compile overhead: {common.fmt(achieved)}, {verdict}. Identical loss and gradients in "
            f"every compiled run: {'yes' if summary['identical'] else 'NO'}. Seeding runs (wall "
            f"s): {', '.join(f'{k} {v:.1f}' for k, v in seeds[model].items())}.",
        ]
        for variant, error in summary["failed"].items():
            lines.append(f"- `{variant}` failed: {error}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=["mlp", "block"])
    parser.add_argument("--rounds", type=int, default=3)
    common.add_no_write(parser)
    args = parser.parse_args()
    info = common.machine_info()
    summaries, seeds, all_runs = [], {}, []
    with tempfile.TemporaryDirectory(prefix="bench-torch-precompile-") as tmp:
        for model in args.models:
            bench = Model(model, Path(tmp))
            common.progress(f"{model}: seeding")
            seeds[model] = bench.seed()
            runs = common.interleaved(bench.run, list(VARIANTS), args.rounds)
            summaries.append(summarize(model, runs, args.rounds, bench.failed))
            all_runs += [{"model": model, **r} for r in runs]
    text = markdown(info, summaries, seeds)
    data = common.results_record(NAME, info, False, summaries=summaries, seeds=seeds, runs=all_runs)
    common.publish(NAME, text, not args.no_write, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
