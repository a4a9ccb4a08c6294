"""torch's ``caching_precompile`` mode as compilecache turns it on: the torch modules its hooks
live in, the releases they were tested on, and the mode's value, which says whose the mode is.
"""

from __future__ import annotations

EVAL_FRAME = "torch._dynamo.eval_frame"
PACKAGE = "torch._dynamo.package"
GUARDS = "torch._dynamo.guards"
CONTEXT = "torch._dynamo.precompile_context"
OUTPUT = "torch._dynamo.output_graph"
DICTS = "torch._dynamo.variables.dicts"
SYMBOLIC = "torch._dynamo.symbolic_convert"
MISC = "torch._dynamo.variables.misc"
BUILTIN = "torch._dynamo.variables.builtin"
SETS = "torch._dynamo.variables.sets"
TORCH_FUNCTIONS = "torch._dynamo.variables.torch"
POLYFILLS = "torch._dynamo.variables.functions"
# Hooked by the torch integration's own hook of this module (see backends.AotBackends).
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"
AOT_RESULT = "torch._functorch._aot_autograd.aot_autograd_result"
FUNCTORCH_CONFIG = "torch._functorch.config"
STANDALONE = "torch._inductor.standalone_compile"
DYNAMO = "torch._dynamo"
DYNAMO_CONFIG = "torch._dynamo.config"
# The modules hooked, each as it finishes importing (the guards module is still importing when
# eval_frame is done: they import each other).
MODULES = (
    EVAL_FRAME,
    PACKAGE,
    GUARDS,
    DICTS,
    SYMBOLIC,
    MISC,
    BUILTIN,
    SETS,
    TORCH_FUNCTIONS,
    POLYFILLS,
    CONTEXT,
    OUTPUT,
    STANDALONE,
    DYNAMO,
)
# The torch releases whose caching_precompile machinery the tests ran on (tests/
# test_torch_dynamo.py, on 2.14 and 2.15 by `make compat-torch`); another is left alone.
TESTED = ("2.13.", "2.14.", "2.15.")
# What compilecache sets ``caching_precompile`` to: true for torch (which only asks ``if
# config.caching_precompile``), and not the ``True`` a program sets: while the program's own
# ``True`` holds, the mode is the program's (torch's own Dynamo cache, as in plain torch).
OURS = 1


def mode_is_ours(value: object) -> bool:
    """Whether ``caching_precompile``'s current value is the one compilecache set."""
    return type(value) is int and value == OURS
