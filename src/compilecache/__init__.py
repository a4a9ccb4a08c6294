"""compilecache: a persistent, shareable, bounded compilation cache for JAX and torch.compile.

    import compilecache
    session = compilecache.enable()          # or enable("redis://cache:6379/0")
    session.stats()
    compilecache.disable()
    store = compilecache.open_store(url)     # the storage layer on its own

Importing this package costs nothing: what it exports is imported on first use (the session,
and the stores behind it, when ``enable``, ``open_store`` or ``active`` is), and frameworks are
hooked only when the program imports them. ``compilecache run`` imports this package for every
command it starts.
"""

from __future__ import annotations

# Not typing's TYPE_CHECKING: importing typing costs every `compilecache run` ~10 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from compilecache.errors import (
        BundleError,
        CompileCacheError,
        ConfigError,
        CorruptEntry,
        ReadOnlyStore,
        StoreUnavailable,
    )
    from compilecache.session import Session, active, disable, enable, open_store

__version__ = "0.1.0"

_SESSION_NAMES = ("Session", "active", "disable", "enable", "open_store")
_ERROR_NAMES = (
    "BundleError",
    "CompileCacheError",
    "ConfigError",
    "CorruptEntry",
    "ReadOnlyStore",
    "StoreUnavailable",
)

__all__ = [
    "BundleError",
    "CompileCacheError",
    "ConfigError",
    "CorruptEntry",
    "ReadOnlyStore",
    "Session",
    "StoreUnavailable",
    "__version__",
    "active",
    "disable",
    "enable",
    "open_store",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the session module (stores, the cache, SQLite) is imported on first use, so that
    # `compilecache run`, the CLI and a Python child that never compiles pay nothing for it.
    if name in _SESSION_NAMES:
        from compilecache import session

        return getattr(session, name)
    if name in _ERROR_NAMES:
        from compilecache import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'compilecache' has no attribute {name!r}")
