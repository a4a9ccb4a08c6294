"""Framework integrations: one package per framework, imported only when the user's program
imports the framework itself.

Each framework keeps one contract, :class:`FrameworkHooks`: ``install(cache, cfg) -> bool`` and
``uninstall()``. Its ``integration`` module implements it (it gets the session's cache and its
configuration, and reads no compilecache variable itself), and its package's face re-exports it
through :func:`face`. Each face holds its ``integration`` module to the contract for mypy (an
assignment under ``TYPE_CHECKING``), so a signature that drifts is a type error, not a
docstring out of date.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from compilecache import _importhook

if TYPE_CHECKING:
    from compilecache.config import Config
    from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")

# Keys of the entries compilecache keeps for a framework rather than for a compile of the
# program: torch's kernel binaries, precompiled headers, probe answers and autotune records,
# XLA's autotune files, and JAX's guarded traces (records that name an executable). Listed by
# ``ls``, counted apart by ``stats`` and ``explain``.
INTERNAL_PREFIXES = (
    "torch/kernel/",
    "torch/pch/",
    "torch/probe/",
    "torch/autotune/",
    "xla/",
    "jax/trace/",
)

# What each kind of internal entry is, by the prefix of its key (``stats``, ``explain``).
INTERNAL_KINDS = (
    ("torch/kernel/", "kernel binaries"),
    ("torch/pch/", "precompiled headers"),
    ("torch/probe/", "probe answers"),
    ("torch/autotune/", "autotune records"),
    ("xla/", "XLA's autotune files and their lists"),
    ("jax/trace/", "guarded traces"),
)


def internal_kinds(framework: str) -> str:
    """What ``framework``'s internal entries can be, in words (``kernel binaries, ...``)."""
    words = [w for prefix, w in INTERNAL_KINDS if prefix.startswith(f"{framework}/")]
    return ", ".join(words) or "parts of compiles, not functions of the program"


def internal_kinds_of(keys: Iterable[str]) -> str:
    """What the internal entries of ``keys`` are, in words: only the kinds they hold."""
    found = {w for key in keys for prefix, w in INTERNAL_KINDS if key.startswith(prefix)}
    return ", ".join(w for _, w in INTERNAL_KINDS if w in found) or "framework internals"


def is_internal(key: str) -> bool:
    return key.startswith(INTERNAL_PREFIXES)


@runtime_checkable
class FrameworkHooks(Protocol):
    """What compilecache asks of a framework's integration (and of its package's face)."""

    def install(self, cache: Cache, cfg: Config) -> bool:
        """Route the framework's caches through ``cache``, configured by ``cfg`` (the session's
        Config: the integration reads no variable itself). ``False``, with at most one warning
        through ``cache``, where the framework cannot be hooked; never raises into the
        framework. Installing again replaces the earlier installation."""
        ...

    def uninstall(self) -> None:
        """Undo :meth:`install` (every patch, in reverse); nothing when not installed."""
        ...


# framework name -> (the module whose import triggers installation, our package's face)
INTEGRATIONS = {
    "jax": ("jax", "compilecache.frameworks.jax"),
    "torch": ("torch", "compilecache.frameworks.torch"),
    "triton": ("triton", "compilecache.frameworks.triton"),
}


def face(package: str) -> tuple[Callable[[Cache, Config], bool], Callable[[], None]]:
    """``install`` and ``uninstall`` for a framework's package (its face), which call the hooks
    in its ``integration`` module: imported at install only (it may import the framework), never
    for an uninstall that has nothing to undo."""
    module = f"{package}.integration"

    def install(cache: Cache, cfg: Config) -> bool:
        try:
            integration = importlib.import_module(module)
        except ImportError as exc:  # a framework release without what the hooks need: unhooked
            log.debug("compilecache: %s not imported: %s", module, exc)
            return False
        return isinstance(integration, FrameworkHooks) and integration.install(cache, cfg)

    def uninstall() -> None:
        integration = sys.modules.get(module)
        if isinstance(integration, FrameworkHooks):
            integration.uninstall()

    return install, uninstall


def load_vocabularies() -> None:
    """Register every framework's words for its key components with ``explain`` (light modules:
    no framework is imported), for the commands that explain stored entries."""
    for framework in INTEGRATIONS:
        importlib.import_module(f"compilecache.frameworks.{framework}.words")


def _integration(framework: str) -> FrameworkHooks | None:
    try:
        module = importlib.import_module(INTEGRATIONS[framework][1])
    except ImportError:
        return None
    return module if isinstance(module, FrameworkHooks) else None


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
    """Undo :func:`install`. An integration never imported installed nothing: it is not
    imported now (importing it imports its framework: Triton's took 0.23 s at ``disable()``)."""
    trigger, module = INTEGRATIONS[framework]
    _importhook.cancel(trigger)
    integration = sys.modules.get(module)
    if isinstance(integration, FrameworkHooks):
        try:
            integration.uninstall()
        except Exception as exc:
            log.debug("compilecache: uninstalling %s failed: %s", framework, exc)
