"""Process state a jitted function's answer rests on, set differently by ``SITUATION=B``, for
``test_jax_traces.py``: a class's subclasses, a module's names (``dir``), a NumPy array's
layout (Fortran order, a view) with equal values, NumPy's error callback, a dataclass's pytree
registration (its fields' order, a field made static) on the output, a codec registered by
name, an XLA pass registered with jaxlib, and torch's default dtype. Prints the results and
the trace counters."""

from __future__ import annotations

import codecs
import dataclasses
import os
import types

import jax
import jax.numpy as jnp
import numpy as np

from jax_trace_report import report  # beside this file

B = os.environ.get("SITUATION") == "B"
X = np.arange(3, dtype=np.float32)


class Plugin:
    factor = 1


class First(Plugin):
    factor = 2


if B:

    class Second(Plugin):
        factor = 3


PLUGINS = types.ModuleType("plugins")
PLUGINS.scale = 1
if B:
    PLUGINS.shift = 2

# Equal values: C order in A, Fortran order in B; a copy in A, a view of BASE in B.
GRID = np.arange(4.0, dtype=np.float32).reshape(2, 2)
if B:
    GRID = np.asfortranarray(GRID)
BASE = np.arange(4.0, dtype=np.float32)
HEAD = BASE[:2] if B else BASE[:2].copy()

np.seterr(over="call")
if B:
    np.seterrcall(slice)  # called on overflow instead of raising


@dataclasses.dataclass
class Pair:
    a: object
    b: object


@dataclasses.dataclass
class Tagged:
    a: object
    b: object


jax.tree_util.register_dataclass(Pair, data_fields=["b", "a"] if B else ["a", "b"], meta_fields=[])
if B:
    jax.tree_util.register_dataclass(Tagged, data_fields=["a"], meta_fields=["b"])
else:
    jax.tree_util.register_dataclass(Tagged, data_fields=["a", "b"], meta_fields=[])

try:
    import torch
except ImportError:  # the torch extra is not installed: its answer is left out
    torch = None
if torch is not None and B:
    torch.set_default_dtype(torch.float64)

codecs.register(
    lambda name: codecs.lookup("utf-16-le" if B else "utf-8") if name == "ccx" else None
)
"warm".encode("ccx")  # the interpreter caches the lookup

PASS_CALLS: list[int] = []
from jax.extend import xla as jax_xla  # noqa: E402  (in both situations: it binds modules)

if B:
    register = getattr(jax_xla, "register_hlo_module_transformation", None)
    if register is not None:
        TRIPLED = (
            jax.jit(lambda x: x * 3).lower(X).compiler_ir("hlo").as_serialized_hlo_module_proto()
        )

        def swap(module: bytes) -> bytes | None:
            PASS_CALLS.append(1)
            return TRIPLED if b"doubled" in module else None

        register(swap, name="compilecache-test-swap")


@jax.jit
def newest_plugin(x):  # type: ignore[no-untyped-def]
    return x * Plugin.__subclasses__()[-1].factor


@jax.jit
def names(x):  # type: ignore[no-untyped-def]
    return x * len([n for n in dir(PLUGINS) if not n.startswith("_")])


@jax.jit
def layout(x):  # type: ignore[no-untyped-def]
    return (
        x + jnp.asarray(GRID.ravel(order="K"))[:3] + (1.0 if np.shares_memory(HEAD, BASE) else 0.0)
    )


@jax.jit
def overflow(x):  # type: ignore[no-untyped-def]
    try:
        np.float32(3e38) * np.float32(10)
        return x * 3
    except NameError:  # what np.seterr(over="call") raises with no callback set
        return x * 2


@jax.jit
def pair(x):  # type: ignore[no-untyped-def]
    return Pair(a=x, b=x * 2)


@jax.jit
def tagged(x):  # type: ignore[no-untyped-def]
    return Tagged(a=x, b=2)


@jax.jit
def encoded(x):  # type: ignore[no-untyped-def]
    return x * len("ab".encode("ccx"))


@jax.jit
def torch_dtype(x):  # type: ignore[no-untyped-def]
    return x * (3 if torch.get_default_dtype() == torch.float64 else 2)


@jax.jit
def doubled(x):  # type: ignore[no-untyped-def]
    return x * 2


def answer(compute):  # type: ignore[no-untyped-def]
    """What ``compute`` returns, or the error it raised (a stale trace can fail in JAX)."""
    try:
        return compute()
    except Exception as exc:
        return f"error: {type(exc).__name__}"


report(
    {
        "newest_plugin": answer(lambda: np.asarray(newest_plugin(X)).tolist()),
        "names": answer(lambda: np.asarray(names(X)).tolist()),
        "layout": answer(lambda: np.asarray(layout(X)).tolist()),
        "overflow": answer(lambda: np.asarray(overflow(X)).tolist()),
        "pair": answer(lambda: np.asarray(pair(X).a).tolist()),
        "tagged": answer(lambda: [len(jax.tree_util.tree_leaves(tagged(X))), float(tagged(X).b)]),
        "encoded": answer(lambda: np.asarray(encoded(X)).tolist()),
        "doubled": answer(lambda: np.asarray(doubled(X)).tolist()),
        **({"torch_dtype": answer(lambda: np.asarray(torch_dtype(X)).tolist())} if torch else {}),
    }
)
