"""The torch modules the torch integration hooks, by name (each hook applies when its module is
imported)."""

from __future__ import annotations

from compilecache.frameworks.torch import extensions as torch_extensions

REMOTE_CACHE = "torch._inductor.remote_cache"
CPP_BUILDER = "torch._inductor.cpp_builder"
CODECACHE = "torch._inductor.codecache"
INDUCTOR_UTILS = "torch._inductor.utils"
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"
AOT_RESULT = "torch._functorch._aot_autograd.aot_autograd_result"
GRAPH_COMPILE = "torch._functorch._aot_autograd.graph_compile"
AOT_AUTOGRAD = "torch._functorch.aot_autograd"
AUTOTUNE_CACHE = "torch._inductor.runtime.autotune_cache"
TEST_CASE = "torch._inductor.test_case"
CPU_VEC_ISA = "torch._inductor.cpu_vec_isa"
COMPILE_FX = "torch._inductor.compile_fx"
CODEGEN_COMMON = "torch._inductor.codegen.common"
CPP_EXTENSION = torch_extensions.MODULE
