"""Compile one small graph under each combination of torch's cache switches, in this process.

Used by ``tests/test_torch_switches.py``: ``python torch_switches_program.py SPEC_JSON`` where
SPEC holds ``combos`` (each a dict of settings, see :func:`settings`), ``root`` (a directory for
this process's "machines": a fresh ``TORCHINDUCTOR_CACHE_DIR`` per combination), and ``store``:
``null`` (plain torch), ``""`` (compilecache on a fresh, empty store per combination) or a
directory (compilecache on a fresh copy of that store per combination). Prints one JSON line per combination: the error torch raised
(its class name, or null), a digest of the outputs and gradients, torch's cache counters and
compilecache's torch counters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

COUNTERS = (
    ("inductor", "fxgraph_cache_hit"),
    ("inductor", "fxgraph_cache_miss"),
    ("inductor", "fxgraph_cache_bypass"),
    ("aot_autograd", "autograd_cache_hit"),
    ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "autograd_cache_bypass"),
    ("aot_autograd", "autograd_cache_saved"),
)


def settings(combo: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(Inductor, functorch, torch.compiler) config values for a combination."""
    inductor: dict[str, Any] = {}
    functorch: dict[str, Any] = {}
    compiler: dict[str, Any] = {}
    if "fx" in combo:
        inductor["fx_graph_cache"] = combo["fx"]
    if "fx_remote" in combo:
        inductor["fx_graph_remote_cache"] = combo["fx_remote"]
    if "aot" in combo:
        functorch["enable_autograd_cache"] = combo["aot"]
    if "aot_remote" in combo:
        functorch["enable_remote_autograd_cache"] = combo["aot_remote"]
    if "strict" in combo:
        functorch["strict_autograd_cache"] = combo["strict"]
    if "force" in combo:
        compiler["force_disable_caches"] = combo["force"]
    return inductor, functorch, compiler


def digest(*tensors: Any) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def compile_once(torch: Any, combo: dict[str, Any], artifact: Path) -> str:
    """The graph: forward and backward through torch.compile, or standalone_compile saved and
    loaded again (``combo["standalone"]``: "binary" or "unpacked")."""
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(4, 8)

    def fn(x: Any, w: Any) -> Any:
        return x @ w

    mode = combo.get("standalone")
    if not mode:
        out = torch.compile(fn)(x, w)
        out.sum().backward()
        return digest(out, w.grad)
    graphs: list[Any] = []

    def capture(gm: Any, example_inputs: Any) -> Any:
        graphs.append((gm, example_inputs))
        return gm

    torch.compile(fn, backend=capture)(x, w)
    gm, example_inputs = graphs[0]
    compiled = torch._inductor.standalone_compile(gm, example_inputs)
    compiled.save(path=str(artifact), format=mode)
    loaded = torch._inductor.CompiledArtifact.load(path=str(artifact), format=mode)
    result = loaded(x, w)
    return digest(result[0] if isinstance(result, (tuple, list)) else result)


def main() -> None:
    spec = json.loads(sys.argv[1])
    root = Path(spec["root"])
    store = spec.get("store")
    import torch
    import torch._dynamo.utils
    from torch._dynamo.utils import counters

    for index, combo in enumerate(spec["combos"]):
        machine = root / f"machine-{index}"
        machine.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(machine / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(machine / "triton")
        torch._dynamo.reset()
        torch._inductor.utils.clear_caches()
        stats_before: dict[str, float] = {}
        session = None
        if store is not None:
            import compilecache

            copy = root / f"store-{index + 1}"
            if store:
                shutil.copytree(store, copy)
            session = compilecache.enable(str(copy), frameworks=("torch",))
            stats_before = session.stats() if session is not None else {}
        counters.clear()
        inductor, functorch, compiler = settings(combo)
        error = None
        result = ""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch._inductor.config.patch(inductor))
            stack.enter_context(torch._functorch.config.patch(functorch))
            stack.enter_context(torch.compiler.config.patch(compiler))
            try:
                result = compile_once(torch, combo, machine / "artifact")
            except Exception as exc:
                error = type(exc).__name__
                print(traceback.format_exc(), file=sys.stderr)
        stats = session.stats() if session is not None else {}
        ours = {
            k: v - stats_before.get(k, 0.0)
            for k, v in stats.items()
            if k.startswith("torch.") and v != stats_before.get(k, 0.0)
        }
        seen = {f"{group}.{name}": counters[group][name] for group, name in COUNTERS}
        print(
            json.dumps(
                {"index": index, "error": error, "result": result, "torch": seen, "ours": ours}
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
