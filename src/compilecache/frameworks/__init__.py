"""Framework integrations. Each module exposes ``install(cache, cfg) -> bool`` and
``uninstall()``: it gets the session's cache and its configuration, and reads no compilecache
variable itself.

They are imported only when the framework itself is imported by the user's program.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from compilecache import _importhook

if TYPE_CHECKING:
    from compilecache.config import Config
    from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

# Keys of the entries compilecache keeps for a framework rather than for a function of the
# program: torch's kernel binaries, precompiled headers, probe answers and autotune records, and
# XLA's autotune files. Listed by ``ls``, counted apart by ``stats`` and ``explain``.
INTERNAL_PREFIXES = ("torch/kernel/", "torch/pch/", "torch/probe/", "torch/autotune/", "xla/")


def is_internal(key: str) -> bool:
    return key.startswith(INTERNAL_PREFIXES)


# framework name -> (the module whose import triggers installation, our integration module)
INTEGRATIONS = {
    "jax": ("jax", "compilecache.frameworks.jax"),
    "torch": ("torch", "compilecache.frameworks.torch"),
    "triton": ("triton", "compilecache.frameworks.triton"),
}


def load_vocabularies() -> None:
    """Register every framework's words for its key components with ``explain`` (light modules:
    no framework is imported), for the commands that explain stored entries."""
    for framework in INTEGRATIONS:
        importlib.import_module(f"compilecache.frameworks.{framework}_words")


def _integration(framework: str) -> ModuleType | None:
    try:
        return importlib.import_module(INTEGRATIONS[framework][1])
    except ImportError:
        return None


def install(framework: str, cache: Cache, installed: set[str], cfg: Config) -> None:
    """Install ``framework``'s hooks now if it is imported, else as soon as it is."""
    trigger, _ = INTEGRATIONS[framework]

    def _install(_module: ModuleType) -> None:
        integration = _integration(framework)
        if integration is None:
            return
        try:
            if integration.install(cache, cfg):
                installed.add(framework)
        except Exception as exc:  # an integration must never break the user's import
            cache.warn_once(f"install:{framework}", f"could not hook into {framework}: {exc}")

    _importhook.when_imported(trigger, _install)


def uninstall(framework: str) -> None:
    trigger, _ = INTEGRATIONS[framework]
    _importhook.cancel(trigger)
    integration = _integration(framework)
    if integration is not None:
        try:
            integration.uninstall()
        except Exception as exc:
            log.debug("compilecache: uninstalling %s failed: %s", framework, exc)


# -- facts about this process, for `compilecache doctor` (written to the run spool at exit) ----


def facts() -> dict[str, Any]:
    """Framework versions and the settings that decide caching, for frameworks already imported
    by this process (nothing is imported here). Never raises."""
    facts: dict[str, Any] = {"pid": os.getpid(), "python": sys.version.split()[0]}
    if "jax" in sys.modules:
        try:
            facts["jax"] = _jax_facts()
        except Exception as exc:
            facts["jax"] = {"error": str(exc)}
    if "torch" in sys.modules:
        try:
            facts["torch"] = _torch_facts()
        except Exception as exc:
            facts["torch"] = {"error": str(exc)}
    if "triton" in sys.modules:
        try:
            facts["triton"] = _triton_facts()
        except Exception as exc:
            facts["triton"] = {"error": str(exc)}
    return facts


def _jax_facts() -> dict[str, Any]:
    from compilecache.frameworks import jax as integration

    jax: Any = sys.modules["jax"]
    cfg = jax.config
    return {
        "version": str(jax.__version__),
        "hooked": integration.active_adapter() is not None,
        "marker": integration.MARKER_DIR,
        "cache_dir": str(cfg.jax_compilation_cache_dir),
        # The program's own minimum (0.0: it left JAX's default, and compilecache's applies).
        "min_compile_time_secs": float(integration.program_min_compile_time() or 0.0),
        "settings": {k: str(v) for k, v in integration.settings_in_effect().items()},
        "enable_xla_caches": str(getattr(cfg, "jax_persistent_cache_enable_xla_caches", "")),
    }


def _triton_facts() -> dict[str, Any]:
    from compilecache.frameworks import triton as integration

    triton: Any = sys.modules["triton"]
    return {
        "version": str(triton.__version__),
        "hooked": integration.installed(),
        "hooks": integration.hook_status(),
        "chained": integration.chained(),
        "cache_dir": str(sys.modules["triton.knobs"].cache.dir)
        if "triton.knobs" in sys.modules
        else "",
    }


def _torch_facts() -> dict[str, Any]:
    torch: Any = sys.modules["torch"]
    out: dict[str, Any] = {
        "version": str(torch.__version__),
        "num_threads": int(torch.get_num_threads()),
    }
    inductor: Any = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        out["precompile_headers"] = bool(getattr(inductor, "cpp_cache_precompile_headers", False))
    return out
