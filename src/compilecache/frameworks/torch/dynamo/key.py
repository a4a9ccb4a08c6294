"""What a Dynamo package's key holds: what Dynamo's guards do not see.

The function (module, qualified name, first line) and the digest of its module's file, what the
``torch.compile`` call asked for (:func:`compile_options`), the versions, Dynamo's, Inductor's,
functorch's and ``torch.compiler``'s configuration (its ``cache_key_tag`` shown apart), the
thread count, grad mode, the default dtype and device, deterministic algorithms and the CUDA
device, and whether Python hashes strings without a seed (``torch_dynamo`` says how the key is
used).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Mapping
from typing import Any

from compilecache.frameworks import hashorder
from compilecache.frameworks.torch.dynamo.guards import Unverifiable, canonical, digest
from compilecache.frameworks.torch.kernels import current_tag
from compilecache.host import installed_version, torch_versions
from compilecache.runtime import keys

FRAMEWORK = "torch"
LAYER = "dynamo"
PREFIX = f"{FRAMEWORK}/{LAYER}/"
# Chained into every key: a new recipe for the key components never meets an old entry.
_KEY_RECIPE = "torch-dynamo-1"


def source_digest(module_name: str, files: dict[str, str]) -> str:
    """The digest of a module's file (memoised per process: files do not change under us)."""
    if module_name in files:
        return files[module_name]
    module = sys.modules.get(module_name)
    if module is None:
        module = importlib.import_module(module_name)
    try:
        path = inspect.getsourcefile(module) or getattr(module, "__file__", None)
    except TypeError:  # a module without a file: ``python -c``'s __main__, a notebook's
        path = None
    if not path:
        raise Unverifiable(f"module {module_name} has no source file")
    with open(path, "rb") as f:
        files[module_name] = digest(f.read())
    return files[module_name]


def package_key(fn: Any, compile_call: str, files: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Our key for ``fn``'s package compiled as ``compile_call`` asked (:func:`compile_options`),
    and its components (for ``explain``); ``files`` memoises the source digests."""
    torch: Any = sys.modules["torch"]
    code = fn.__code__
    components = {
        "function": f"{fn.__module__}.{fn.__qualname__}:{code.co_firstlineno}",
        "compile_call": compile_call,
        "module_source": source_digest(fn.__module__, files),
        **version_components(),
        # caching_precompile is compilecache's OURS (1) where packages are made: as its truth.
        "dynamo_config": _config_digest("torch._dynamo.config", truths=("caching_precompile",)),
        "inductor_config": _config_digest("torch._inductor.config"),
        "functorch_config": _config_digest("torch._functorch.config"),
        # The program's tag for its cache entries (torch.compiler.config): a package is not
        # shared across tags, as torch's own entries are not.
        "cache_key_tag": current_tag(),
        "compiler_config": _config_digest("torch.compiler.config", leave_out=("cache_key_tag",)),
        # Inductor's C++ kernels are generated for it (its FX graphs' keys hold it too).
        "threads": str(torch.get_num_threads()),
        "grad_enabled": str(torch.is_grad_enabled()),
        "default_dtype": str(torch.get_default_dtype()),
        "default_device": str(torch.get_default_device()),
        "deterministic": str(torch.are_deterministic_algorithms_enabled()),
        "cuda": _cuda_facts(torch),
    }
    if not hashorder.SEEDED:
        # PYTHONHASHSEED=0: a trace may rest on the order of a set of strings, which is then
        # the same in every such process only (see unguarded.UnguardedReads._ordering).
        components["string_hashing"] = "unseeded"
    return f"{PREFIX}{fn.__qualname__}-{keys.chain(_KEY_RECIPE, components)[:32]}", components


def compile_options(context: Any) -> str | None:
    """What a ``torch.compile`` call asks beyond its function, the same in every process:
    Inductor's settings from its ``mode`` and ``options``, ``dynamic``, ``fullgraph`` and
    ``error_on_graph_break``. ``None`` for another backend (``eager``, a function of the
    program's): torch's own mode would serve such a call the package another backend compiled."""
    backend: Any = getattr(context, "callback", None)
    while hasattr(backend, "_torchdynamo_orig_backend"):
        backend = backend._torchdynamo_orig_backend
    options = getattr(backend, "config", None)
    if getattr(backend, "compiler_name", None) != "inductor" or not isinstance(options, dict):
        return None
    return canonical(
        {
            "options": options,
            "dynamic": getattr(context, "_dynamic", None),
            "fullgraph": getattr(context, "fullgraph", None),
            "error_on_graph_break": getattr(context, "error_on_graph_break", None),
        }
    )


# Components that are digests (of a file, of a configuration): explain says they changed, not
# from which digest to which.
_DIGESTS = (
    "module_source",
    "dynamo_config",
    "inductor_config",
    "functorch_config",
    "compiler_config",
)


def readable(components: Mapping[str, str]) -> dict[str, str]:
    """The components ``explain`` shows before and after (thread count, dtype, versions)."""
    return {name: value for name, value in components.items() if name not in _DIGESTS}


def version_components() -> dict[str, str]:
    """torch's (and its git revision), Python's, and Triton's version when it is installed."""
    return {**torch_versions(), "triton": _triton_version()}


@functools.cache
def _triton_version() -> str:
    # Read from its metadata once per process: every key computation asks.
    return installed_version("triton") or ""


def _config_digest(
    module_name: str, *, leave_out: tuple[str, ...] = (), truths: tuple[str, ...] = ()
) -> str:
    module: Any = importlib.import_module(module_name)
    settings = {k: v for k, v in module.save_config_portable().items() if k not in leave_out}
    for name in truths:
        if name in settings:
            settings[name] = bool(settings[name])
    return digest(canonical(settings).encode())[:32]


def _cuda_facts(torch: Any) -> str:
    if not torch.cuda.is_available():
        return "none"
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm{major}{minor} cuda {torch.version.cuda}"
