"""The steps of PyTorch's ``test_cache_hot_load`` (test/dynamo/test_aot_autograd_cache.py), as a
program that prints torch's cache counters after each step, one JSON line per case.

Each case (a dtype, static or dynamic shapes) compiles ``x.sin() @ y`` with its backward three
times in one process, each inside ``fresh_cache()``: cold; again after every cache was cleared
(nothing loaded: misses); and again after ``load_cache_artifacts()`` of what the first compile
saved (hits). ``tests/test_torch_portable.py`` runs it plain and under ``compilecache run`` and
compares.

A case ending in ``:precompile`` is ``test_cache_hot_load_caching_precompile``
(test/inductor/test_codecache.py): the program turns on torch's ``caching_precompile`` itself
(``torch._dynamo.config.patch``), compiles again in each step (the mode looks its package up
where ``torch.compile`` is applied), hot-loads under ``set_stance("fail_on_recompile")``, and
counts Dynamo's own cache (``dynamo_cache_hit``/``miss``) and the precompile artifacts too.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import Any

import torch
from torch._dynamo.package import DynamoCache
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
from torch._inductor.codecache import FxGraphCache, PyCodeCache
from torch._inductor.utils import fresh_cache
from torch.compiler._cache import CacheArtifactManager

COUNTED = {
    "inductor": ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_lookup_write_file"),
    "aot_autograd": ("autograd_cache_miss", "autograd_cache_hit", "autograd_cache_saved"),
}
# Counted too where the program turns caching_precompile on.
DYNAMO_COUNTED = {"dynamo_cache": ("dynamo_cache_miss", "dynamo_cache_hit")}


def clear_all(precompile: bool) -> None:
    """Every cache torch keeps, as the test's ``_clear_all_caches`` (with caching_precompile:
    as ``TestFxGraphCache.reset``, Dynamo's cache and the precompile context too)."""
    FxGraphCache.clear()
    AOTAutogradCache.clear()
    CacheArtifactManager.clear()
    if precompile:
        DynamoCache.clear()
        PrecompileContext.clear()
    torch._dynamo.reset()
    PyCodeCache.cache_clear(purge=True)


def snapshot(precompile: bool) -> dict[str, int]:
    groups = {**COUNTED, **DYNAMO_COUNTED} if precompile else COUNTED
    return {name: counters[group][name] for group, names in groups.items() for name in names}


def artifact_counts(info: Any, precompile: bool) -> dict[str, int]:
    counts = {
        "inductor": len(info.inductor_artifacts),
        "aot_autograd": len(info.aot_autograd_artifacts),
        "autotune": len(info.autotune_artifacts),
        "pgo": len(info.pgo_artifacts),
    }
    if precompile:
        counts["precompile"] = len(info.precompile_artifacts)
    return counts


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


def case(dtype: torch.dtype, dynamic: bool, precompile: bool) -> dict[str, Any]:
    counters.clear()
    clear_all(precompile)
    a = torch.rand(100, 100, dtype=dtype, requires_grad=True)
    b = torch.rand(100, 100, dtype=dtype, requires_grad=True)
    report: dict[str, Any] = {"dtype": str(dtype), "dynamic": dynamic, "precompile": precompile}
    with fresh_cache():
        compiled = torch.compile(fn, dynamic=dynamic)
        report["cold_same"] = step(compiled, a, b)
        report["cold"] = snapshot(precompile)
    artifacts = torch.compiler.save_cache_artifacts()
    assert artifacts is not None, "nothing recorded"
    blob, info = artifacts
    report["saved"] = artifact_counts(info, precompile)

    clear_all(precompile)
    with fresh_cache():
        if precompile:  # the mode looks its package up where torch.compile is applied
            compiled = torch.compile(fn, dynamic=dynamic)
        report["again_same"] = step(compiled, a, b)
        report["again"] = snapshot(precompile)

    clear_all(precompile)
    stance = torch.compiler.set_stance("fail_on_recompile") if precompile else nullcontext()
    with fresh_cache(), stance:
        loaded = torch.compiler.load_cache_artifacts(blob)
        assert loaded is not None, "nothing loaded"
        report["loaded"] = artifact_counts(loaded, precompile)
        if precompile:
            compiled = torch.compile(fn, dynamic=dynamic)
        report["hot_same"] = step(compiled, a, b)
        report["hot"] = snapshot(precompile)
    return report


def main() -> None:
    for spec in sys.argv[1:]:  # "float32:static", "bfloat16:dynamic:precompile", ...
        dtype, shapes, *mode = spec.split(":")
        precompile = mode == ["precompile"]
        # As the test's decorator: the program's own choice, made after torch was imported.
        setting = (
            torch._dynamo.config.patch(caching_precompile=True) if precompile else nullcontext()
        )
        with setting:
            report = case(getattr(torch, dtype), shapes == "dynamic", precompile)
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
