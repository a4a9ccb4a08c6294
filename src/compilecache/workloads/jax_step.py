"""A realistic JAX workload: one jitted train step of a small transformer language model.

    python -m compilecache.workloads.jax_step --layers 12 [--salt S] [--json]

The step is ``value_and_grad`` of a next-token cross-entropy loss followed by an SGD update, for a
pre-norm transformer (D=256, T=128, B=8, vocabulary 1024, 4 heads) whose layers are unrolled in a
Python loop, so the compiled module grows with ``--layers``: on the 2-core machine of the
benchmarks a cold first step takes about 4 s at 4 layers, 8-12 s at 8 and 10-20 s at 12, load
permitting. It runs once on fixed inputs and prints one JSON line::

    {"layers": 12, "first_step_s": 10.4, "total_s": 11.2, "loss": 7.4636, "checksum": 801454.6, ...}

``first_step_s`` runs from just before the first call to the end of ``block_until_ready``: trace,
lowering, then compile or persistent-cache load, then execution. ``total_s`` runs from the import
of this module (the closest this module can get to process start) to the end. ``loss`` and
``checksum`` (a float summary of the updated parameters; ``digest`` is a SHA-256 of their bytes)
let two runs be compared for bit-identical results. ``first_step_cpu_s`` and ``total_cpu_s`` (the
process's CPU time, all threads, since it started) are the same spans in CPU seconds: on a shared
machine they move much less with other people's load than wall-clock seconds do.

``--salt S`` changes every persistent-cache key without changing the math: it sets JAX's
``cache_key.custom_hook``, whose result is hashed into the key as its last component. The demo uses
a fresh salt so that its "cold" run is really cold while the user's store stays untouched.

This module never imports compilecache: the caller enables it (``compilecache.enable()`` in a
wrapper, ``compilecache run``, or the sitecustomize bootstrap), so the same workload measures JAX
alone, JAX's own cache and compilecache. Parameters and inputs are built with NumPy, so the
step is the only XLA compile in the process (``jax.random`` would add a dozen small ones).
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before the heavy imports: total_s includes importing JAX

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

D_MODEL = 256
SEQ_LEN = 128
BATCH = 8
VOCAB = 1024
HEADS = 4
MLP_RATIO = 4
LEARNING_RATE = 1e-2
SEED = 0

Params = dict[str, Any]


def _jax(name: str = "jax") -> Any:
    """Import a JAX module typed ``Any``: JAX's own annotations are partial, and this module is
    imported before JAX so that ``total_s`` covers importing it."""
    return importlib.import_module(name)


def init_params(layers: int, seed: int = SEED) -> Params:
    """Deterministic float32 parameters, built with NumPy (no XLA compile)."""
    rng = np.random.default_rng(seed)

    def dense(fan_in: int, fan_out: int) -> Any:
        return (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)

    def norm() -> dict[str, Any]:
        return {
            "scale": np.ones((D_MODEL,), np.float32),
            "bias": np.zeros((D_MODEL,), np.float32),
        }

    hidden = MLP_RATIO * D_MODEL
    blocks = [
        {
            "ln1": norm(),
            "qkv": dense(D_MODEL, 3 * D_MODEL),
            "out": dense(D_MODEL, D_MODEL),
            "ln2": norm(),
            "up": dense(D_MODEL, hidden),
            "up_bias": np.zeros((hidden,), np.float32),
            "down": dense(hidden, D_MODEL),
            "down_bias": np.zeros((D_MODEL,), np.float32),
        }
        for _ in range(layers)
    ]
    return {
        "embed": (0.02 * rng.standard_normal((VOCAB, D_MODEL))).astype(np.float32),
        "pos": (0.02 * rng.standard_normal((SEQ_LEN, D_MODEL))).astype(np.float32),
        "blocks": blocks,
        "ln_f": norm(),
        "unembed": dense(D_MODEL, VOCAB),
    }


def make_batch(seed: int = SEED) -> tuple[Any, Any]:
    """Fixed input tokens and their next-token targets, shape (BATCH, SEQ_LEN), int32."""
    rng = np.random.default_rng(seed + 1)
    tokens = rng.integers(0, VOCAB, size=(BATCH, SEQ_LEN + 1), dtype=np.int32)
    return tokens[:, :-1], tokens[:, 1:]


def make_train_step(layers: int) -> Any:
    """The jitted train step ``(params, inputs, targets) -> (loss, new_params)``."""
    jax, jnp = _jax(), _jax("jax.numpy")

    def layer_norm(x: Any, p: dict[str, Any]) -> Any:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]

    def attention(x: Any, block: dict[str, Any]) -> Any:
        b, t, d = x.shape
        head_dim = d // HEADS
        qkv = x @ block["qkv"]
        q, k, v = jnp.split(qkv, 3, axis=-1)

        def heads(z: Any) -> Any:
            return z.reshape(b, t, HEADS, head_dim).transpose(0, 2, 1, 3)

        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(head_dim).astype(np.float32)
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(causal, scores, np.finfo(np.float32).min)
        weights = jax.nn.softmax(scores, axis=-1)
        mixed = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return mixed @ block["out"]

    def mlp(x: Any, block: dict[str, Any]) -> Any:
        hidden = jax.nn.gelu(x @ block["up"] + block["up_bias"])
        return hidden @ block["down"] + block["down_bias"]

    def loss_fn(params: Params, inputs: Any, targets: Any) -> Any:
        x = params["embed"][inputs] + params["pos"][None, : inputs.shape[1]]
        for i in range(layers):  # unrolled: the compiled module grows with the depth
            block = params["blocks"][i]
            x = x + attention(layer_norm(x, block["ln1"]), block)
            x = x + mlp(layer_norm(x, block["ln2"]), block)
        logits = layer_norm(x, params["ln_f"]) @ params["unembed"]
        logp = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)
        return -jnp.mean(picked)

    def train_step(params: Params, inputs: Any, targets: Any) -> tuple[Any, Params]:
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
        new_params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        return loss, new_params

    return jax.jit(train_step)


def set_salt(salt: str) -> None:
    """Change every persistent-cache key (JAX key component 8, ``custom_hook``), not the math."""
    cache_key = _jax("jax._src.cache_key")
    cache_key.custom_hook = lambda: salt


def summarize(params: Params) -> tuple[float, str]:
    """A float checksum of the parameters and a SHA-256 of their bytes, in tree order."""
    jax = _jax()
    total = 0.0
    digest = hashlib.sha256()
    for i, leaf in enumerate(jax.tree_util.tree_leaves(params)):
        arr = np.asarray(leaf)
        digest.update(arr.tobytes())
        # Weight each leaf differently so that swapped or offset leaves change the checksum.
        total += float(np.sum(arr.astype(np.float64))) * (i + 1)
        total += float(np.sum(np.abs(arr.astype(np.float64))))
    return total, digest.hexdigest()


def run(layers: int, salt: str | None = None) -> dict[str, Any]:
    """Build, compile (or load) and run the step once; the result record."""
    jax = _jax()
    if salt is not None:
        set_salt(salt)
    params = jax.device_put(init_params(layers))
    inputs, targets = (jax.device_put(a) for a in make_batch())
    step = make_train_step(layers)

    start, start_cpu = time.perf_counter(), time.process_time()
    loss, new_params = step(params, inputs, targets)
    jax.block_until_ready((loss, new_params))
    first_step_s = time.perf_counter() - start
    first_step_cpu_s = time.process_time() - start_cpu

    checksum, digest = summarize(new_params)
    return {
        "layers": layers,
        "first_step_s": first_step_s,
        "total_s": time.perf_counter() - _T0,
        "loss": float(loss),
        "checksum": checksum,
        "digest": digest,
        # CPU seconds (all threads) are far less disturbed by other load than wall seconds.
        "first_step_cpu_s": first_step_cpu_s,
        "total_cpu_s": time.process_time(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compilecache.workloads.jax_step",
        description="Run one jitted transformer LM train step and print a JSON line.",
    )
    parser.add_argument("--layers", type=int, default=4, help="transformer layers (default 4)")
    parser.add_argument("--salt", default=None, help="change every cache key, not the math")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the JSON line only (without it, a readable summary also goes to stderr)",
    )
    args = parser.parse_args(argv)
    if args.layers < 1:
        parser.error("--layers must be at least 1")
    result = run(args.layers, args.salt)
    if not args.json:
        print(
            f"# {args.layers} layers: first step {result['first_step_s']:.3f} s, "
            f"total {result['total_s']:.3f} s, loss {result['loss']:.6f}",
            file=sys.stderr,
        )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
