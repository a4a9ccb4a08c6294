"""The Store protocol every backend implements, its records, and the URL scheme registry.

A store is bytes in, bytes out. It knows nothing about JAX, torch or the entry format: wrappers
(tiers, read-only, the integrity-checking :class:`compilecache.cache.Cache`) add behaviour on top.

``get`` never raises for a missing key (a miss is ``None``); errors that a store cannot recover
from raise :class:`compilecache.errors.CompileCacheError` subclasses and are turned into counted
misses by the cache layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlsplit

from compilecache.errors import ConfigError, StoreUnavailable


@dataclass(frozen=True)
class EntryMeta:
    """What a writer tells the store about a value, so listings need not read payloads."""

    framework: str = ""
    name: str = ""
    compile_time_s: float = 0.0


@dataclass(frozen=True)
class EntryInfo:
    """Metadata of one stored value, as returned by ``stat`` and ``scan``."""

    key: str
    size: int
    created: float
    accessed: float
    hits: int = 0
    meta: EntryMeta = field(default_factory=EntryMeta)

    @property
    def framework(self) -> str:
        return self.meta.framework

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def compile_time_s(self) -> float:
        return self.meta.compile_time_s


@runtime_checkable
class Store(Protocol):
    """The storage layer: six methods, bytes in and bytes out."""

    url: str

    def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        ...

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        """Store ``value`` under ``key``, replacing any earlier value atomically."""
        ...

    def delete(self, key: str) -> bool:
        """Remove ``key``; ``True`` when something was removed."""
        ...

    def stat(self, key: str) -> EntryInfo | None:
        """Metadata of ``key`` without reading its value."""
        ...

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Metadata of every key starting with ``prefix`` (no payload reads)."""
        ...

    def close(self) -> None:
        """Release connections and files. Idempotent."""
        ...


@runtime_checkable
class StatsStore(Protocol):
    """Optional: a store that keeps persistent counters shared by every process using it."""

    def add_stats(self, counters: Mapping[str, float]) -> None: ...

    def read_stats(self) -> dict[str, float]: ...

    def zero_stats(self) -> None: ...


# How many records of each kind a history keeps (the oldest are dropped first).
HISTORY_LIMIT = 1000
# The kinds of history records compilecache writes.
HISTORY_KINDS = ("miss", "run")


@runtime_checkable
class HistoryStore(Protocol):
    """Optional: a store that keeps a short, capped log of JSON records beside its entries.

    ``kind`` separates the logs (``"miss"``: explained cache misses, ``"run"``: per-process
    totals). History is never an entry: it does not appear in ``scan``, sizes or pruning.
    """

    def add_history(self, kind: str, record: Mapping[str, object]) -> None: ...

    def read_history(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        """The newest ``limit`` records of ``kind``, newest first."""
        ...

    def clear_history(self) -> None: ...


@runtime_checkable
class LeaseStore(Protocol):
    """Optional: short-lived, expiring locks on keys, for single-flight compiles.

    When several processes miss the same key at once, the one that takes the key's lease
    compiles and the others wait for its entry (:mod:`compilecache.singleflight`). A lease
    expires ``ttl_s`` seconds after it was taken or last renewed, so a holder that dies blocks
    nobody for longer than that. Leases are an optimisation, never a correctness device: two
    holders at once (a holder stalled past its expiry) cost a duplicate compile, nothing more.

    ``acquire_lease`` returns a token when the lease was taken, ``None`` when another process
    holds it, and ``""`` (NO_COORDINATION) when this store cannot coordinate (go ahead and
    compile, nothing to release).
    """

    def acquire_lease(self, key: str, ttl_s: float) -> str | None: ...

    def renew_lease(self, key: str, token: str, ttl_s: float) -> bool:
        """Extend a lease still held with ``token``; ``False`` when it was lost."""
        ...

    def release_lease(self, key: str, token: str) -> None:
        """Give up a lease if ``token`` still holds it (never removes another holder's)."""
        ...


# What acquire_lease returns when the store cannot coordinate: lead, with nothing to release.
NO_COORDINATION = ""

# URL options every level takes, handled by the wrappers (ReadOnly, Guarded) and the session,
# never by a backend: backends leave them out of what they pass on to their client libraries.
WRAPPER_PARAMS = frozenset({"readonly", "backoff", "max_backoff", "deadline", "guard", "max_size"})


def supports_leases(store: object) -> bool:
    """Whether ``store`` (through its wrappers) can coordinate compiles with leases."""
    probe = getattr(store, "supports_leases", None)
    if callable(probe):
        return bool(probe())
    return isinstance(store, LeaseStore)


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL plus the settings a backend may need."""

    raw: str
    scheme: str
    netloc: str
    path: str
    params: dict[str, str]
    max_size: int | None = None


def parse_url(url: str, max_size: int | None = None) -> StoreURL:
    """Split ``url``; a bare path (``~/cache``, ``/mnt/c``, ``C:\\c``) means the local store."""
    text = url.strip()
    if not text:
        raise ConfigError("empty store URL")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # a bare path (or a Windows drive letter)
        path, _, query = text.partition("?")
        return StoreURL(text, "file", "", path, dict(parse_qsl(query)), max_size)
    return StoreURL(
        raw=text,
        scheme=scheme,
        netloc=parts.netloc,
        path=parts.path,
        params=dict(parse_qsl(parts.query)),
        max_size=max_size,
    )


StoreFactory = Callable[[StoreURL], Store]

# scheme -> ("module:function", what to install when the import fails). Lazy: nothing heavy is
# imported until a URL with that scheme is opened (the fsspec registry does the same).
_BUILTIN: dict[str, tuple[str, str]] = {
    "file": ("compilecache.stores.local:from_url", ""),
    "memory": ("compilecache.stores.memory:from_url", ""),
    "redis": ("compilecache.stores.redis:from_url", "redis (pip install 'compilecache[redis]')"),
    "rediss": ("compilecache.stores.redis:from_url", "redis (pip install 'compilecache[redis]')"),
    "redis+cluster": (
        "compilecache.stores.redis:from_url",
        "redis (pip install 'compilecache[redis]')",
    ),
    "rediss+cluster": (
        "compilecache.stores.redis:from_url",
        "redis (pip install 'compilecache[redis]')",
    ),
    "s3": (
        "compilecache.stores.objectstore:from_url",
        "fsspec and s3fs (pip install 'compilecache[s3]')",
    ),
    "gs": (
        "compilecache.stores.objectstore:from_url",
        "fsspec and gcsfs (pip install 'compilecache[gcs]')",
    ),
}
_REGISTERED: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Register a store factory for ``scheme`` (for third-party stores and tests)."""
    _REGISTERED[scheme.lower()] = factory


def register_builtin(scheme: str, target: str, install_hint: str = "") -> None:
    """Declare a lazily imported built-in backend (``"module:function"``)."""
    _BUILTIN[scheme.lower()] = (target, install_hint)


def known_schemes() -> list[str]:
    return sorted({*_BUILTIN, *_REGISTERED})


def _entry_point_factory(scheme: str) -> StoreFactory | None:
    from importlib import metadata  # slow to import: only when a scheme is unknown

    for ep in metadata.entry_points(group="compilecache.stores"):
        if ep.name.lower() == scheme:
            factory: StoreFactory = ep.load()
            return factory
    return None


def resolve_factory(scheme: str) -> StoreFactory:
    """The factory for ``scheme``, importing its module on first use."""
    if scheme in _REGISTERED:
        return _REGISTERED[scheme]
    if scheme in _BUILTIN:
        target, hint = _BUILTIN[scheme]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            advice = f": install {hint} to use {scheme}://" if hint else ""
            raise StoreUnavailable(f"cannot load the {scheme}:// store ({exc}){advice}") from exc
        factory: StoreFactory = getattr(module, attr)
        return factory
    found = _entry_point_factory(scheme)
    if found is not None:
        _REGISTERED[scheme] = found
        return found
    if _fsspec_knows(scheme):  # any other fsspec protocol: the generic object store
        from compilecache.stores.objectstore import from_url as fsspec_factory

        return fsspec_factory
    raise ConfigError(
        f"unknown store URL scheme {scheme!r}; known: {', '.join(known_schemes())} "
        "(third-party stores register in the 'compilecache.stores' entry-point group)"
    )


def _fsspec_knows(scheme: str) -> bool:
    try:
        from compilecache.stores.objectstore import known_protocol
    except ImportError:  # fsspec is not installed
        return False
    return known_protocol(scheme)


def open_url(url: str, max_size: int | None = None) -> Store:
    """Open one store level (no commas) and apply the generic ``?readonly=1`` option."""
    parsed = parse_url(url, max_size)
    store = resolve_factory(parsed.scheme)(parsed)
    if _truthy(parsed.params.get("readonly")):
        from compilecache.stores.readonly import ReadOnly

        store = ReadOnly(store)
    return store


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")
