"""The exceptions compilecache raises.

Every error is a :class:`CompileCacheError`, so callers can catch one type. The integrations never
let any of these escape into JAX or torch: there they become counted misses.
"""

from __future__ import annotations


class CompileCacheError(Exception):
    """Base class of every error raised by compilecache."""


class ConfigError(CompileCacheError, ValueError):
    """A setting (URL, size, duration, environment variable) could not be understood."""


class StoreUnavailable(CompileCacheError):
    """A store could not be reached or used (missing directory, dead server, missing package).

    ``reported`` is True when the fail-open guard of a remote level has already warned about
    the outage behind it: the cache then counts it without warning again (one warning per
    outage and process, not one per layer).
    """

    reported: bool = False


class LevelSkipped(StoreUnavailable):
    """A call refused without trying because the store failed recently (it is in back-off)."""

    reported = True


class CorruptEntry(CompileCacheError):
    """Bytes that should hold a cache entry do not: truncated, bit-flipped or foreign."""


class ForeignEntry(CompileCacheError):
    """An intact entry signed with another key (or unsigned where a key is set).

    Not a :class:`CorruptEntry` on purpose: it is a miss, but it is left where it is, because
    the entry may be valid for the clients that hold the right key.
    """


class ReadOnlyStore(CompileCacheError):
    """A write was attempted on a store opened read-only."""


class BundleError(CompileCacheError):
    """An export bundle is unreadable or inconsistent."""
