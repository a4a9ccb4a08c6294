"""A small torch.compile workload: the first forward and backward call of an MLP or a transformer block.

    python -m compilecache.workloads.torch_step --model mlp [--salt S] [--fresh-dirs]

Models (float32, CPU or the default device, fixed seeds):

- ``tiny``: MLP 16-32-16 on a batch of 8 (for tests: a few kernels, a quick cold compile);
- ``mlp``: MLP 256-1024-256 (GELU) on a batch of 64;
- ``block``: a pre-norm transformer block, d=128, 4 heads, MLP ratio 4, batch 8 x 32 tokens;
- ``gpt2``: transformers' ``GPT2LMHeadModel`` from a ``GPT2Config`` (2 layers, 4 heads, width 128,
  vocabulary 512, context 64), random init, a batch of 4 x 32 distinct tokens, the LM loss;
- ``llama``: transformers' ``LlamaForCausalLM`` from a ``LlamaConfig`` (2 layers, 4 heads and 2
  key-value heads, width 128, MLP 256, vocabulary 512), random init, the same batch and loss;
- ``qwen2``: transformers' ``Qwen2ForCausalLM`` from a ``Qwen2Config`` of the same shape as
  ``llama`` (Qwen2 adds biases to the attention's projections), the same batch and loss.

``--layers N`` gives a transformers model N layers instead of 2 (Dynamo's trace grows with them).

The transformers models need ``pip install transformers`` (``make bench`` installs it); nothing is
downloaded: the weights are random and the configurations are written here.

The step compiles the model with ``torch.compile`` (Inductor), runs it forward, takes the mean square
of the output as the loss and runs backward, so Dynamo, AOTAutograd and Inductor each compile a
forward and a backward graph. It prints one JSON line::

    {"model": "mlp", "first_step_s": 14.1, "total_s": 17.0, "loss": 0.12, "digest": "...", ...}

``first_step_s`` runs from just before ``torch.compile`` to the end of ``backward``: trace, compile
or cache load (Inductor's FX graph cache, the AOTAutograd cache, the C++ kernels) and execution;
``first_step_cpu_s`` is the CPU time spent meanwhile, this process's threads plus its finished
children (the C++ compiler runs as a child).
Importing torch, Dynamo and Inductor happens before that and is reported as ``import_s``.
``digest`` is a SHA-256 of the output and of every parameter gradient, so two runs can be compared
for bit-identical results. ``torch_counters`` holds torch's own cache counters (FX graph cache and
AOTAutograd cache hits and misses).

``--salt S`` changes every torch.compile cache key without changing the math (it sets
``torch.compiler.config.cache_key_tag``, which torch hashes into the FX graph, AOTAutograd and
autotune keys and compilecache into its kernel keys). ``--fresh-dirs`` points
``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` at new empty directories before torch is imported, as
on a new machine, and removes them at exit. ``--save-mega FILE`` / ``--load-mega FILE`` save
torch's own portable cache artifacts after the step or load them before it (``load_s``).

Like ``jax_step``, this module never imports compilecache: the caller enables it
(``compilecache.enable()`` in a wrapper, ``compilecache run`` or the sitecustomize bootstrap), so
the same workload measures torch alone, torch's own caches and compilecache.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before the heavy imports: total_s includes importing torch

import argparse  # noqa: E402
import ast  # noqa: E402
import atexit  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

MODELS = ("tiny", "mlp", "block", "gpt2", "llama", "qwen2")
# transformers models: the loss is computed by the model from its labels.
HF_MODELS = ("gpt2", "llama", "qwen2")
SEED = 0


def make_fresh_dirs() -> dict[str, str]:
    """Empty TORCHINDUCTOR_CACHE_DIR and TMPDIR, as on a new machine; must run before torch."""
    root = Path(tempfile.mkdtemp(prefix="torch-step-"))
    inductor = root / "inductor"
    tmp = root / "tmp"
    inductor.mkdir()
    tmp.mkdir()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # forget the cached gettempdir()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return {"TORCHINDUCTOR_CACHE_DIR": str(inductor), "TMPDIR": str(tmp)}


def build_hf(model: str, layers: int = 2) -> tuple[Any, Any]:
    """A small transformers causal LM of ``layers`` layers with random weights, and its token
    batch."""
    import torch
    import transformers

    config: Any
    module: Any
    common: dict[str, Any] = {
        "vocab_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
    if model == "gpt2":
        config = transformers.GPT2Config(n_embd=128, n_positions=64, **common)
        module = transformers.GPT2LMHeadModel(config)
    else:
        # Llama and Qwen2: the same shape; Qwen2's attention projections carry biases.
        shape: dict[str, Any] = {
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_key_value_heads": 2,
            "max_position_embeddings": 64,
        }
        if model == "qwen2":
            config = transformers.Qwen2Config(**shape, **common)
            module = transformers.Qwen2ForCausalLM(config)
        else:
            config = transformers.LlamaConfig(**shape, **common)
            module = transformers.LlamaForCausalLM(config)
    module.train()
    # Distinct token ids: Inductor's CPU backward of the embedding adds each token's gradient
    # into its row with atomic adds across OpenMP threads, so a token that occurs twice makes the
    # gradient depend on which thread got there first (seen with torch alone, its two threads
    # on one core). The outputs compared between runs must not depend on thread timing.
    return module, torch.randperm(512)[:128].reshape(4, 32)


def build(model: str, seed: int = SEED, layers: int = 2) -> tuple[Any, Any]:
    """The module and its fixed input, with deterministic parameters (``layers``: of a
    transformers model)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if model in HF_MODELS:
        return build_hf(model, layers)

    from compilecache.workloads.torch_models import MLP, Block

    module: nn.Module
    shape: tuple[int, ...]
    if model == "tiny":
        module, shape = MLP(16, 32, 16), (8, 16)
    elif model == "mlp":
        module, shape = MLP(256, 1024, 256), (64, 256)
    elif model == "block":
        module, shape = Block(128, 4), (8, 32, 128)
    else:
        raise ValueError(f"unknown model {model!r} (choose from {', '.join(MODELS)})")
    return module, torch.randn(*shape)


def forward_loss(compiled: Any, model: str, x: Any) -> tuple[Any, Any]:
    """One forward call: (output, loss)."""
    if model in HF_MODELS:
        out = compiled(input_ids=x, labels=x)
        return out.logits, out.loss
    out = compiled(x)
    return out, out.pow(2).mean()


def digest(output: Any, module: Any) -> tuple[float, str]:
    """A float checksum and a SHA-256 of the output and every gradient, in parameter order."""
    hasher = hashlib.sha256(output.detach().contiguous().numpy().tobytes())
    total = float(output.detach().double().sum())
    for name, param in module.named_parameters():
        hasher.update(name.encode())
        if param.grad is not None:
            hasher.update(param.grad.contiguous().numpy().tobytes())
            total += float(param.grad.double().abs().sum())
    return total, hasher.hexdigest()


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) plus its finished children (the C++ compiler)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def torch_counters() -> dict[str, int]:
    """torch's own cache counters for this process."""
    from torch._dynamo.utils import counters

    wanted = {
        "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
        "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
    }
    return {name: int(counters[group][name]) for group, names in wanted.items() for name in names}


def run(
    model: str,
    salt: str | None = None,
    save_mega: str | None = None,
    load_mega: str | None = None,
    inductor_config: dict[str, Any] | None = None,
    eager: bool = False,
    layers: int = 2,
) -> dict[str, Any]:
    """Import, build, compile (or load) and run forward+backward once; the result record.

    ``inductor_config``: ``torch._inductor.config`` values to set first (``{"cpp.simdlen": 256}``).
    ``eager``: run the step without ``torch.compile`` (the baseline a compile's overhead is
    measured against).
    """
    import torch
    import torch._dynamo
    import torch._inductor.config

    if salt is not None:
        torch.compiler.config.cache_key_tag = salt
    for name, value in (inductor_config or {}).items():
        setattr(torch._inductor.config, name, value)
    import_s = time.perf_counter() - _T0
    module, x = build(model, layers=layers)

    load_s = 0.0
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    if load_mega:
        torch.compiler.load_cache_artifacts(Path(load_mega).read_bytes())
        load_s = time.perf_counter() - start
    compiled: Any = module if eager else torch.compile(module)
    out, loss = forward_loss(compiled, model, x)
    loss.backward()
    first_step_s = time.perf_counter() - start
    first_step_cpu_s = _cpu_seconds() - cpu_start

    if save_mega:
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is None:
            raise RuntimeError("torch recorded no cache artifacts")
        Path(save_mega).write_bytes(artifacts[0])

    checksum, hexdigest = digest(out, module)
    return {
        "model": model,
        "eager": eager,
        "first_step_s": first_step_s,
        "first_step_cpu_s": first_step_cpu_s,
        "import_s": import_s,
        "load_s": load_s,
        "total_s": time.perf_counter() - _T0,
        "loss": float(loss.detach()),
        "checksum": checksum,
        "digest": hexdigest,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "torch_counters": torch_counters(),
    }


def parse_setting(text: str) -> tuple[str, Any]:
    """``cpp.simdlen=256`` -> ``("cpp.simdlen", 256)``; a value that is not a literal stays text."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--config wants NAME=VALUE, got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compilecache.workloads.torch_step",
        description="Run the first torch.compile forward+backward call and print a JSON line.",
    )
    parser.add_argument("--model", choices=MODELS, default="mlp")
    parser.add_argument("--salt", help="set torch.compiler.config.cache_key_tag (fresh keys)")
    parser.add_argument(
        "--fresh-dirs",
        action="store_true",
        help="use new empty TORCHINDUCTOR_CACHE_DIR and TMPDIR (a new machine)",
    )
    parser.add_argument("--save-mega", metavar="FILE", help="save_cache_artifacts() after")
    parser.add_argument("--load-mega", metavar="FILE", help="load_cache_artifacts() before")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a torch._inductor.config value first (cpp.simdlen=256); VALUE is a Python literal",
    )
    parser.add_argument("--eager", action="store_true", help="no torch.compile (the baseline)")
    parser.add_argument(
        "--layers", type=int, default=2, help="layers of a transformers model (default 2)"
    )
    parser.add_argument("--json", action="store_true", help="accepted for symmetry; always JSON")
    args = parser.parse_args(argv)
    dirs = make_fresh_dirs() if args.fresh_dirs else {}
    config = dict(parse_setting(text) for text in args.config)
    result = run(
        args.model, args.salt, args.save_mega, args.load_mega, config, args.eager, args.layers
    )
    result["dirs"] = dirs
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
