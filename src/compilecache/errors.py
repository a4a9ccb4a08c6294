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


def failure_text(where: str, what: str, exc: BaseException) -> str:
    """One line for a failed call, its cause said once: a :class:`StoreUnavailable` raised
    further down already names the store and the call (``s3://b: stat failed: ...``) and is
    kept as it is; anything else becomes ``where: what failed: Type: first line``."""
    if isinstance(exc, StoreUnavailable):
        return str(exc)
    lines = str(exc).strip().splitlines()
    detail = lines[0] if lines else ""
    if detail.startswith(f"{where}: "):
        return detail  # the store's own words, already naming it (a missing bucket, say)
    cause = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return f"{where}: {what} failed: {cause}"


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


class EntryTooLarge(CompileCacheError):
    """An entry larger than the store's whole size bound: it could never be kept there."""


class BundleError(CompileCacheError):
    """An export bundle is unreadable or inconsistent."""
