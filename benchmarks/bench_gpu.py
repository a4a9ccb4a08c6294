"""GPU start-up: what a fresh GPU host still compiles, autotunes and builds (issue 20).

For each workload, in one run, each variant in fresh processes:

- ``cold``: the framework's own caches on, in empty directories;
- ``own warm``: the same machine again (the framework's own warm cache);
- ``own portable``: a fresh machine with what the framework offers to carry (torch.compile's
  ``save_cache_artifacts``/``load_cache_artifacts``; for JAX, Triton and extensions the cold
  run's cache directory copied);
- ``cc cold``: under ``compilecache run``, empty directories, a fresh local level in front of a
  store shared by the machines (a directory standing in for Redis or a bucket);
- ``cc fresh``: a fresh machine under ``compilecache run`` (empty Inductor, Triton, extension
  and XLA directories, a fresh local level) in front of that store.

Reported: the time to the first step inside the process and the process's wall time, and what
still ran, counted by wrappers and hooks: Triton compiles (``ptxas`` runs), autotuning benchmarks
(Triton's autotuner and Inductor's benchmarker), compiler and ninja runs of extension builds
(``c++``/``nvcc`` writing an output), and fusions XLA autotuned (files it added to its autotune
directory). Goals: 0 of each on ``cc fresh``, and ``cc fresh`` no slower than ``own warm``.

Workloads: torchvision's ResNet-50 (random weights, a training step) under ``max-autotune`` and
``reduce-overhead``; a user Triton kernel under ``@triton.autotune(cache_results=True)``; a
``load_inline`` CUDA extension; a JAX transformer train step (``workloads/jax_step``). This needs
an NVIDIA GPU; without one it says so and exits 2. ``--cpu`` runs the same machinery on two CPU
workloads instead (a Triton kernel cross-compiled for sm_80, a C++ extension; ``--workloads
extension-inline`` adds a ``load_inline`` of a torch module), which is what the test suite checks.

Usage: python benchmarks/bench_gpu.py [--rounds N] [--workloads a,b] [--cpu] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

GPU_WORKLOADS = (
    "resnet50-max-autotune",
    "resnet50-reduce-overhead",
    "triton-autotune",
    "extension-cuda",
    "jax-transformer",
)
CPU_WORKLOADS = ("triton-cross", "extension-cpp")
# CPU workloads run only when named (--workloads): a load_inline build takes 15-20 s here.
CPU_EXTRA = ("extension-inline",)
VARIANTS = ("cold", "own warm", "own portable", "cc cold", "cc fresh")
COUNTS = ("triton_compiles", "autotune_benchmarks", "compiler_runs", "ninja_runs", "xla_autotuned")
# A tool wrapper, one path for every machine (a compiler's path is part of a build's key): log
# to the running machine's file what ran (builds only: a compiler run that writes an output, any ninja run
# but --version and its -t tools, every ptxas assembly but --version), then run the real tool.
WRAPPER = """#!/bin/sh
kind=""
case "{tool}" in
  ptxas*) [ "$1" != "--version" ] && kind=triton_compiles ;;
  ninja) case "$1" in --version|-t) ;; *) kind=ninja_runs ;; esac ;;
  *) for a in "$@"; do [ "$a" = -o ] && kind=compiler_runs; done ;;
esac
[ -n "$kind" ] && echo "$kind {tool}" >> "$BENCH_GPU_TOOL_LOG"
exec "{real}" "$@"
"""


# -- the child: one workload, one process ---------------------------------------------------------


def _count_autotuning() -> Callable[[], int]:
    """Count autotuning benchmarks: Triton's autotuner and Inductor's benchmarker."""
    calls = [0]

    def counting(owner: Any, name: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)

    try:
        from triton.runtime import autotuner

        counting(autotuner.Autotuner, "_bench")
    except ImportError:
        pass
    try:
        from torch._inductor.runtime import benchmarking

        counting(benchmarking.Benchmarker, "benchmark_gpu")
    except ImportError:
        pass
    return lambda: calls[0]


def _torch_resnet(mode: str, artifacts: str, save: bool) -> float:
    import torch
    import torchvision

    if artifacts and not save and os.path.exists(artifacts):
        torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())
    model = torchvision.models.resnet50(weights=None).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    compiled = torch.compile(model, mode=mode)
    x = torch.randn(16, 3, 224, 224, device="cuda")
    start = time.perf_counter()
    loss = compiled(x).float().mean()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    if artifacts and save:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            Path(artifacts).write_bytes(saved[0])
    return first


def _triton_autotune() -> float:
    import torch
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024) for w in (2, 4, 8)
    ]

    @triton.autotune(configs=configs, key=["n"], cache_results=True)
    @triton.jit
    def scale_shift(x, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) * 2.0 + 1.0, mask=mask)

    x = torch.randn(1 << 22, device="cuda")
    out = torch.empty_like(x)
    start = time.perf_counter()
    scale_shift[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    torch.cuda.synchronize()
    return time.perf_counter() - start


CUDA_SOURCE = """
__global__ void axpy_kernel(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
    int n = x.numel();
    axpy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), a, n);
    return y;
}
"""


def _extension_cuda() -> float:
    import torch
    from torch.utils.cpp_extension import load_inline

    start = time.perf_counter()
    module = load_inline(
        "bench_axpy",
        cpp_sources="torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a);",
        cuda_sources=CUDA_SOURCE,
        functions=["axpy"],
    )
    y = module.axpy(torch.ones(1024, device="cuda"), torch.zeros(1024, device="cuda"), 2.0)
    torch.cuda.synchronize()
    assert float(y.sum()) == 2048.0
    return time.perf_counter() - start


def _jax_transformer() -> float:
    from compilecache.workloads import jax_step

    start = time.perf_counter()
    jax_step.run(layers=8)
    return time.perf_counter() - start


def _triton_cross() -> float:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def scale_shift(x, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) * 2.0 + 1.0, mask=mask)

    start = time.perf_counter()
    for block in (128, 256, 512):
        source = triton.compiler.ASTSource(
            fn=scale_shift,
            signature={"x": "*fp32", "out": "*fp32", "n": "i32"},
            constexprs={"BLOCK": block},
        )
        triton.compile(source, target=GPUTarget("cuda", 80, 32))
    return time.perf_counter() - start


CPP_SOURCE = 'extern "C" int bench_value(int x) { return 2 * x + 1; }\n'


def _extension_cpp(work: str) -> float:
    from torch.utils.cpp_extension import load

    source = os.path.join(work, "bench_value.cpp")
    if not os.path.exists(source):
        Path(source).write_text(CPP_SOURCE)
    start = time.perf_counter()
    load("bench_value", sources=[source], is_python_module=False)
    return time.perf_counter() - start


def _extension_inline() -> float:
    import torch
    from torch.utils.cpp_extension import load_inline

    start = time.perf_counter()
    module = load_inline(
        "bench_twice",
        cpp_sources="torch::Tensor twice(torch::Tensor x) { return x * 2; }",
        functions=["twice"],
    )
    assert float(module.twice(torch.ones(4)).sum()) == 8.0
    return time.perf_counter() - start


def child(args: argparse.Namespace) -> None:
    autotuned = _count_autotuning()
    workload = args.child
    if workload.startswith("resnet50-"):
        mode = workload.removeprefix("resnet50-")
        first = _torch_resnet(mode, args.artifacts, args.save_artifacts)
    elif workload == "triton-autotune":
        first = _triton_autotune()
    elif workload == "extension-cuda":
        first = _extension_cuda()
    elif workload == "jax-transformer":
        first = _jax_transformer()
    elif workload == "triton-cross":
        first = _triton_cross()
    elif workload == "extension-cpp":
        first = _extension_cpp(args.work)
    elif workload == "extension-inline":
        first = _extension_inline()
    else:
        raise SystemExit(f"unknown workload {workload!r}")
    print(json.dumps({"first_step_s": first, "autotune_benchmarks": autotuned()}), flush=True)


# -- the parent: machines, variants, counts ------------------------------------------------------


def has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible (``nvidia-smi -L`` lists one)."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return False
    try:
        out = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _real_tools() -> dict[str, str]:
    tools: dict[str, str] = {}
    for name in ("ninja", "c++"):
        found = shutil.which(name)
        if found:
            tools[name] = found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = shutil.which("nvcc") or os.path.join(cuda_home, "bin", "nvcc")
    if os.path.exists(nvcc):
        tools["nvcc"] = nvcc
    try:
        import triton

        bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        for name in ("ptxas", "ptxas-blackwell"):
            if (bin_dir / name).exists():
                tools[name] = str(bin_dir / name)
    except ImportError:
        pass
    return tools


class Machine:
    """One host: its own cache directories, tool wrappers and a log of what ran."""

    def __init__(self, root: Path, name: str, tools: dict[str, str]) -> None:
        self.root = root / name
        self.root.mkdir(parents=True)
        self.log = self.root / "tools.log"
        self.bin = root / "bin"
        if not self.bin.exists():
            self.bin.mkdir()
            for tool, real in tools.items():
                script = self.bin / tool
                script.write_text(WRAPPER.format(tool=tool, real=real))
                script.chmod(0o755)
        self.tools = tools

    def env(self, job: str) -> dict[str, str]:
        env = common.clean_env(
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            TORCHINDUCTOR_CACHE_DIR=str(self.root / "inductor"),
            TRITON_CACHE_DIR=str(self.root / "triton"),
            TORCH_EXTENSIONS_DIR=str(self.root / "extensions"),
            XDG_CACHE_HOME=str(self.root / "xdg"),
            COMPILECACHE_JOB=job,
            BENCH_GPU_TOOL_LOG=str(self.log),
            COMPILECACHE_MIN_COMPILE_TIME="0",
            TRITON_DEFAULT_FP_FUSION="1",
        )
        if "ptxas" in self.tools:
            env["TRITON_PTXAS_PATH"] = str(self.bin / "ptxas")
        if "ptxas-blackwell" in self.tools:
            env["TRITON_PTXAS_BLACKWELL_PATH"] = str(self.bin / "ptxas-blackwell")
        if "nvcc" in self.tools:
            env["PYTORCH_NVCC"] = str(self.bin / "nvcc")
        if "c++" in self.tools:
            env["CXX"] = str(self.bin / "c++")
        return env

    def own_cache_env(self) -> dict[str, str]:
        """The frameworks' own persistent caches on, in this machine's directories."""
        return {
            "JAX_COMPILATION_CACHE_DIR": str(self.root / "jax-cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        }

    def xla_autotune_files(self) -> int:
        dirs = [
            self.root / "xdg" / "compilecache-xla" / "per_fusion_autotune",
            self.root / "jax-cache" / "xla_gpu_per_fusion_autotune_cache_dir",
        ]
        return sum(len(list(d.iterdir())) for d in dirs if d.is_dir())

    def counts(self) -> dict[str, int]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return {kind: sum(1 for line in lines if line.split()[0] == kind) for kind in COUNTS}

    def copy_from(self, other: Machine) -> None:
        """What the framework's own portable path carries: its cache directories."""
        for name in ("inductor", "triton", "extensions", "jax-cache"):
            if (other.root / name).exists():
                shutil.copytree(other.root / name, self.root / name)


def run_variant(
    machine: Machine,
    workload: str,
    *,
    job: str,
    url: str = "",
    own: bool = True,
    artifacts: str = "",
    save_artifacts: bool = False,
) -> dict[str, Any]:
    """One process of ``workload`` on ``machine``; its times and what ran (counted afresh)."""
    if machine.log.exists():
        machine.log.unlink()
    xla_before = machine.xla_autotune_files()
    env = machine.env(job)
    if own:
        env.update(machine.own_cache_env())
    command = [sys.executable, str(Path(__file__).resolve()), "--child", workload]
    command += ["--work", str(machine.root.parent)]
    if artifacts:
        command += ["--artifacts", artifacts] + (["--save-artifacts"] if save_artifacts else [])
    if url:
        command = [sys.executable, "-m", "compilecache", "run", "--url", url, "--", *command]
    result = common.run_json(command, env, timeout=3600)
    counts = machine.counts()
    counts["autotune_benchmarks"] = int(result.record.get("autotune_benchmarks", 0))
    counts["xla_autotuned"] = machine.xla_autotune_files() - xla_before
    return {"first_step_s": result.record["first_step_s"], "wall_s": result.wall_s, **counts}


def run_round(workload: str, root: Path, tools: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every variant of ``workload`` once, on fresh machines under ``root``."""
    job = f"bench-gpu-{workload}"
    store = root / "shared-store"
    artifacts = str(root / "torch-artifacts.bin") if workload.startswith("resnet50-") else ""
    cold = Machine(root, "cold", tools)
    out: dict[str, dict[str, Any]] = {}
    out["cold"] = run_variant(cold, workload, job=job, artifacts=artifacts, save_artifacts=True)
    out["own warm"] = run_variant(cold, workload, job=job)
    portable = Machine(root, "portable", tools)
    if not artifacts:
        portable.copy_from(cold)
    out["own portable"] = run_variant(portable, workload, job=job, artifacts=artifacts)
    first = Machine(root, "cc-first", tools)
    url = f"{first.root / 'local'},{store}"
    out["cc cold"] = run_variant(first, workload, job=job, url=url, own=False)
    fresh = Machine(root, "cc-fresh", tools)
    url = f"{fresh.root / 'local'},{store}"
    out["cc fresh"] = run_variant(fresh, workload, job=job, url=url, own=False)
    return out


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant: median times over rounds, counts of the last round."""
    summary: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        runs = [r[variant] for r in rounds if variant in r]
        if not runs:
            continue
        summary[variant] = {
            "first_step_s": statistics.median(r["first_step_s"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            **{k: runs[-1][k] for k in COUNTS},
        }
    warm = summary.get("own warm", {}).get("wall_s")
    for values in summary.values():
        values["vs_own_warm"] = common.ratio(values["wall_s"], warm) if warm else float("nan")
    return summary


def render(results: dict[str, dict[str, dict[str, Any]]], command: str, info: Any) -> str:
    lines = [
        "# GPU start-up: what a fresh host still compiles, autotunes and builds",
        "",
        common.machine_markdown(info),
        "",
        f"Reproduce: `{command}`",
        "",
        "Times are medians over rounds (first step inside the process; process wall time, and "
        "its ratio to the framework's own warm cache on the same machine); counts are what ran "
        "in the last round. Goal: `cc fresh` runs nothing and is no slower than `own warm`.",
        "",
    ]
    headers = [
        "workload",
        "variant",
        "first step s",
        "process s",
        "vs own warm",
        "Triton compiles",
        "autotune benchmarks",
        "compiler runs",
        "ninja runs",
        "XLA fusions autotuned",
    ]
    rows = [
        [
            workload,
            variant,
            v["first_step_s"],
            v["wall_s"],
            v["vs_own_warm"],
            *(v[k] for k in COUNTS),
        ]
        for workload, summary in results.items()
        for variant, v in summary.items()
    ]
    lines.append(common.markdown_table(headers, rows))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workloads", default="", help="comma-separated; default: all")
    parser.add_argument("--cpu", action="store_true", help="the CPU-side checks, no GPU needed")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--work", default="", help=argparse.SUPPRESS)
    parser.add_argument("--artifacts", default="", help=argparse.SUPPRESS)
    parser.add_argument("--save-artifacts", action="store_true", help=argparse.SUPPRESS)
    common.add_no_write(parser)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if not args.cpu and not has_gpu():
        print(
            "bench_gpu.py needs an NVIDIA GPU, and nvidia-smi lists none on this machine. "
            "Run it on a GPU host (see docs/benchmarks.md); --cpu runs its "
            "machinery on CPU workloads only.",
            file=sys.stderr,
        )
        return 2
    default = CPU_WORKLOADS if args.cpu else GPU_WORKLOADS
    known = (*CPU_WORKLOADS, *CPU_EXTRA) if args.cpu else GPU_WORKLOADS
    workloads = [w for w in args.workloads.split(",") if w] or list(default)
    unknown = [w for w in workloads if w not in known]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(known)}")
    tools = _real_tools()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for workload in workloads:
        rounds = []
        for r in range(args.rounds):
            common.progress(f"{workload}: round {r + 1} of {args.rounds}")
            with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
                rounds.append(run_round(workload, Path(tmp), tools))
        results[workload] = summarize(rounds)
    info = common.machine_info()
    markdown = render(results, common.command_line(), info)
    print(markdown)
    if not args.no_write:
        name = "bench_gpu-cpu" if args.cpu else "bench_gpu"
        paths = common.write_results(name, {"machine": info, "results": results}, markdown)
        common.progress(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
