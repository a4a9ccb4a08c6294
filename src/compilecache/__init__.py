"""compilecache: a persistent, shareable, bounded compilation cache for JAX and torch.compile.

    import compilecache
    session = compilecache.enable()          # or enable("redis://cache:6379/0")
    session.stats()
    compilecache.disable()
    store = compilecache.open_store(url)     # the storage layer on its own

Importing this package is cheap: frameworks are hooked only when the program imports them.
"""

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
