"""The steps of PyTorch's ``test_cache_hot_load`` (test/dynamo/test_aot_autograd_cache.py), as a
program that prints torch's cache counters after each step, one JSON line per case.

Each case (a dtype, static or dynamic shapes) compiles ``x.sin() @ y`` with its backward three
times in one process, each inside ``fresh_cache()``: cold; again after every cache was cleared
(nothing loaded: misses); and again after ``load_cache_artifacts()`` of what the first compile
saved (hits). ``tests/test_torch_portable.py`` runs it plain and under ``compilecache run`` and
compares.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
from torch._inductor.codecache import FxGraphCache, PyCodeCache
from torch._inductor.utils import fresh_cache
from torch.compiler._cache import CacheArtifactManager

COUNTED = {
    "inductor": ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_lookup_write_file"),
    "aot_autograd": ("autograd_cache_miss", "autograd_cache_hit", "autograd_cache_saved"),
}


def clear_all() -> None:
    """Every cache torch keeps, as the test's ``_clear_all_caches``."""
    FxGraphCache.clear()
    AOTAutogradCache.clear()
    CacheArtifactManager.clear()
    torch._dynamo.reset()
    PyCodeCache.cache_clear(purge=True)


def snapshot() -> dict[str, int]:
    return {name: counters[group][name] for group, names in COUNTED.items() for name in names}


def artifact_counts(info: Any) -> dict[str, int]:
    return {
        "inductor": len(info.inductor_artifacts),
        "aot_autograd": len(info.aot_autograd_artifacts),
        "autotune": len(info.autotune_artifacts),
        "pgo": len(info.pgo_artifacts),
    }


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.sin() @ y


def step(compiled: Any, a: torch.Tensor, b: torch.Tensor) -> bool:
    """One forward and backward; whether the compiled result is the eager one."""
    expected = fn(a, b)
    result = compiled(a, b)
    result.sum().backward()
    if hasattr(a, "_dynamo_weak_dynamic_indices"):
        del a._dynamo_weak_dynamic_indices
    return bool(torch.allclose(expected, result, rtol=1e-2, atol=1e-2))


def case(dtype: torch.dtype, dynamic: bool) -> dict[str, Any]:
    counters.clear()
    clear_all()
    a = torch.rand(100, 100, dtype=dtype, requires_grad=True)
    b = torch.rand(100, 100, dtype=dtype, requires_grad=True)
    report: dict[str, Any] = {"dtype": str(dtype), "dynamic": dynamic}
    with fresh_cache():
        compiled = torch.compile(fn, dynamic=dynamic)
        report["cold_same"] = step(compiled, a, b)
        report["cold"] = snapshot()
    artifacts = torch.compiler.save_cache_artifacts()
    assert artifacts is not None, "nothing recorded"
    blob, info = artifacts
    report["saved"] = artifact_counts(info)

    clear_all()
    with fresh_cache():
        report["again_same"] = step(compiled, a, b)
        report["again"] = snapshot()

    clear_all()
    with fresh_cache():
        loaded = torch.compiler.load_cache_artifacts(blob)
        assert loaded is not None, "nothing loaded"
        report["loaded"] = artifact_counts(loaded)
        report["hot_same"] = step(compiled, a, b)
        report["hot"] = snapshot()
    return report


def main() -> None:
    for spec in sys.argv[1:]:  # "float32:static", "bfloat16:dynamic", ...
        dtype, shapes = spec.split(":")
        print(json.dumps(case(getattr(torch, dtype), shapes == "dynamic")), flush=True)


if __name__ == "__main__":
    main()
