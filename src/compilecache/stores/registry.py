"""The one composition root of the storage layer: URL -> store.

Every store compilecache uses is opened here (the session, the CLI, bundles, ``open_store``):

1. the URL is split into levels at commas (fastest first) and each level is parsed once;
2. its options are checked against what its backend reads (each backend module names its
   ``OPTIONS``), so a typo is an error, not a no-op;
3. the backend is looked up in the scheme table (imported lazily, with an install hint when its
   package is missing, the way fsspec's registry does it), in the ``compilecache.stores``
   entry-point group, or among fsspec's protocols;
4. backend -> :func:`~compilecache.stores.guarded.for_level` (remote levels fail open) ->
   :class:`~compilecache.stores.readonly.ReadOnly` (``?readonly=1`` or a read-only session);
5. the levels -> :class:`~compilecache.stores.tiers.Tiered` (one level too: every caller then
   asks one shape of store, and each capability is placed once, there).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from compilecache.errors import ConfigError, StoreUnavailable
from compilecache.redaction import redact
from compilecache.stores.base import (
    WRAPPER_PARAMS,
    EntryInfo,
    EntryMeta,
    Store,
    StoreURL,
    flag,
    is_local,
)
from compilecache.stores.readonly import ReadOnly
from compilecache.stores.tiers import Tiered, WritePolicy
from compilecache.units import DEFAULT_COLD_STREAK

log = logging.getLogger("compilecache")

StoreFactory = Callable[[StoreURL], Store]

_REDIS_HINT = "redis (pip install 'compilecache[redis]')"
SHARED_DIRECTORY = "file+shared"


@dataclass(frozen=True)
class Backend:
    """One row of the scheme table.

    ``options``: the URL options the backend reads (the wrapper options of every level are
    added); ``passthrough``: whether other options go on to the backend's client library
    (redis-py's URL arguments, fsspec's storage options), which then judges them.
    """

    target: str  # "module:function", imported on first use; the module names its OPTIONS
    install_hint: str = ""
    passthrough: bool = False
    # The package the backend needs (looked for without importing it): its absence is one
    # problem said once with the install hint, not a failure on every call.
    requires: str = ""


_S3 = Backend(
    "compilecache.stores.objectstore:from_url",
    "obstore (pip install 'compilecache[s3]')",
    passthrough=True,
    requires="obstore",
)
_GCS = Backend(
    "compilecache.stores.objectstore:from_url",
    "obstore (pip install 'compilecache[gcs]')",
    passthrough=True,
    requires="obstore",
)
_AZURE = Backend(
    "compilecache.stores.objectstore:from_url",
    "obstore (pip install 'compilecache[azure]')",
    passthrough=True,
    requires="obstore",
)
_REDIS = Backend(
    "compilecache.stores.redis:from_url",
    _REDIS_HINT,
)
# scheme -> backend. Lazy: nothing heavy is imported until a URL with that scheme is opened.
_BUILTIN: dict[str, Backend] = {
    "file": Backend("compilecache.stores.local:from_url"),
    # A directory with ``?shared=1``: the index-free store for NFS/Lustre (no SQLite, no flock).
    SHARED_DIRECTORY: Backend("compilecache.stores.sharedfs:from_url"),
    "memory": Backend("compilecache.stores.memory:from_url"),
    "redis": _REDIS,
    "rediss": _REDIS,
    "redis+cluster": _REDIS,
    "rediss+cluster": _REDIS,
    "s3": _S3,
    "s3a": _S3,
    "gs": _GCS,
    "gcs": _GCS,
    "az": _AZURE,
    "abfs": _AZURE,
    "abfss": _AZURE,
}
# How a URL of each built-in scheme is written, for the error of a malformed one.
_EXAMPLES = {
    "memory": "memory://name",
    "redis": "redis://host:6379/0",
    "rediss": "rediss://host:6380/0",
    "redis+cluster": "redis+cluster://host:7000",
    "rediss+cluster": "rediss+cluster://host:7000",
    "s3": "s3://bucket/prefix",
    "s3a": "s3a://bucket/prefix",
    "gs": "gs://bucket/prefix",
    "gcs": "gcs://bucket/prefix",
    "az": "az://container/prefix",
    "abfs": "abfs://container@account.dfs.core.windows.net/prefix",
    "abfss": "abfss://container@account.dfs.core.windows.net/prefix",
}
# Stores registered at run time (third parties, tests): their options are not checked here.
_REGISTERED: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory, *, clobber: bool = False) -> None:
    """Register a store factory for ``scheme`` (for third-party stores and tests).

    A scheme that is already taken (a built-in one, or another factory) is refused unless
    ``clobber`` says to replace it, as fsspec's ``register_implementation`` does: silently
    replacing ``s3`` would send every level of that scheme elsewhere."""
    name = scheme.lower()
    taken = name in _BUILTIN or _REGISTERED.get(name, factory) is not factory
    if taken and not clobber:
        raise ConfigError(
            f"the store URL scheme {name!r} is already registered; pass clobber=True to replace it"
        )
    _REGISTERED[name] = factory


def known_schemes() -> list[str]:
    return sorted({*_BUILTIN, *_REGISTERED} - {SHARED_DIRECTORY})


# -- parsing -------------------------------------------------------------------------------------


def split_levels(url: str) -> list[str]:
    """The levels of ``a,b,c`` (fastest first), blanks dropped."""
    return [part.strip() for part in url.split(",") if part.strip()]


def parse_url(url: str, max_size: int | None = None, *, create: bool = True) -> StoreURL:
    """Split one level's URL; a bare path (``~/cache``, ``/mnt/c``, ``C:\\c``) is the local store."""
    text = url.strip()
    if not text:
        raise ConfigError("empty store URL")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unclosed [ in an IPv6 host, a bad port, ...
        raise ConfigError(f"malformed store URL {redact(text)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # a bare path (or a Windows drive letter)
        path, _, query = text.partition("?")
        return StoreURL(text, "file", "", path, dict(parse_qsl(query)), max_size, create)
    if scheme in _BUILTIN and scheme != "file" and not text[len(scheme) :].startswith("://"):
        # redis:/host:6379/0 (one slash) would read as a path on localhost's default port.
        raise ConfigError(
            f"malformed store URL {redact(text)!r}: a {scheme} URL begins with {scheme}:// "
            f"(two slashes), as in {_EXAMPLES.get(scheme, scheme + '://...')}"
        )
    return StoreURL(
        raw=text,
        scheme=scheme,
        netloc=parts.netloc,
        path=parts.path,
        params=dict(parse_qsl(parts.query)),
        max_size=max_size,
        create=create,
    )


def check_options(url: StoreURL) -> None:
    """Refuse an option the level's backend does not know, naming the ones it does. The
    backend's module says which it reads (``OPTIONS``) and which its client library takes
    (``CLIENT_OPTIONS``); it is imported here, as its store is opened right after."""
    scheme = SHARED_DIRECTORY if is_shared_directory(url) else url.scheme
    backend = _BUILTIN.get(scheme)
    if backend is None or backend.passthrough:
        return  # a third-party store, or a client library that judges the rest itself
    try:
        module = importlib.import_module(backend.target.partition(":")[0])
    except ImportError:
        return  # opening it says what is missing
    client: frozenset[str] = getattr(module, "CLIENT_OPTIONS", frozenset())
    known = getattr(module, "OPTIONS", frozenset()) | WRAPPER_PARAMS
    unknown = sorted(set(url.params) - known - client)
    if unknown:
        also = f"; and its client's: {', '.join(sorted(client))}" if client else ""
        raise ConfigError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in store URL "
            f"{redact(url.raw)!r}; {url.scheme}:// knows: {', '.join(sorted(known))}{also}"
        )


# -- backends ------------------------------------------------------------------------------------


def resolve_factory(scheme: str) -> StoreFactory:
    """The factory for ``scheme``, importing its module on first use."""
    if scheme in _REGISTERED:
        return _REGISTERED[scheme]
    backend = _BUILTIN.get(scheme)
    if backend is not None:
        module_name, _, attr = backend.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise _missing_package(scheme, exc) from exc
        factory: StoreFactory = getattr(module, attr)
        return factory
    found = _entry_point_factory(scheme)
    if found is not None:
        _REGISTERED[scheme] = found
        return found
    knows = _fsspec_knows(scheme)
    if knows:  # any other fsspec protocol: the generic object store
        from compilecache.stores.objectstore import from_url as fsspec_factory

        return fsspec_factory
    nearest = difflib.get_close_matches(scheme, known_schemes(), n=1, cutoff=0.5)
    meant = f" (did you mean {nearest[0]}://?)" if nearest else ""
    fsspec = "; fsspec's protocols need fsspec installed" if knows is None else ""
    raise ConfigError(
        f"unknown store URL scheme {scheme!r}{meant}; known: {', '.join(known_schemes())} "
        f"(third-party stores register in the 'compilecache.stores' entry-point group{fsspec})"
    )


def _missing_package(scheme: str, exc: ImportError) -> StoreUnavailable:
    backend = _BUILTIN.get(scheme)
    hint = backend.install_hint if backend is not None else ""
    if not hint:
        hint = f"the fsspec implementation of {scheme}://"
    return StoreUnavailable(f"cannot load the {scheme}:// store ({exc}): install {hint}")


def _entry_point_factory(scheme: str) -> StoreFactory | None:
    from importlib import metadata  # slow to import: only when a scheme is unknown

    for ep in metadata.entry_points(group="compilecache.stores"):
        if ep.name.lower() == scheme:
            factory: StoreFactory = ep.load()
            return factory
    return None


def _fsspec_knows(scheme: str) -> bool | None:
    """Whether fsspec knows ``scheme``; ``None`` when fsspec cannot be imported."""
    try:
        from compilecache.stores.objectstore import known_protocol

        return known_protocol(scheme)
    except ImportError:  # fsspec (imported by known_protocol) or obstore is not installed
        return None


def check_requirements(url: StoreURL) -> None:
    """StoreUnavailable, with the install hint, when the package ``url``'s backend needs is not
    installed (found without importing it)."""
    backend = _BUILTIN.get(url.scheme)
    if backend is None or not backend.requires or url.scheme in _REGISTERED:
        return
    if importlib.util.find_spec(backend.requires) is None:
        raise StoreUnavailable(
            f"cannot use {url.scheme}:// stores: {backend.requires} is not installed "
            f"(install {backend.install_hint})"
        )


def is_shared_directory(url: StoreURL) -> bool:
    """A directory with ``?shared=1``: the index-free store for shared mounts."""
    return url.scheme == "file" and flag(url.params, "shared")


def _backend(url: StoreURL) -> Store:
    """The bare backend of one parsed level (no guard, no read-only wrapper)."""
    check_options(url)
    check_requirements(url)
    factory = resolve_factory(SHARED_DIRECTORY if is_shared_directory(url) else url.scheme)
    try:
        store: Any = factory(url)
    except ImportError as exc:  # the scheme's client package (obstore, an fsspec one) is missing
        raise _missing_package(url.scheme, exc) from exc
    return store if isinstance(store, Store) else Adapted(store)


class Adapted(Store):
    """A third-party store written against the plain protocol (get, put, delete, stat, scan,
    close) without subclassing :class:`Store`: it gets the base's safe defaults."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.url = str(getattr(inner, "url", "")) or type(inner).__name__

    def get(self, key: str) -> bytes | None:
        value: bytes | None = self.inner.get(key)
        return value

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self.inner.put(key, value, meta)

    def delete(self, key: str) -> bool:
        return bool(self.inner.delete(key))

    def stat(self, key: str) -> EntryInfo | None:
        info: EntryInfo | None = self.inner.stat(key)
        return info

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        infos: Iterator[EntryInfo] = iter(self.inner.scan(prefix))
        return infos

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


# -- composition ---------------------------------------------------------------------------------


def _level(
    url: str | StoreURL,
    max_size: int | None = None,
    *,
    read_only: bool = False,
    create: bool = True,
    command: bool = False,
    alone: bool = False,
) -> Store:
    """One level: backend -> guard (remote levels fail open) -> read-only (``?readonly=1`` or
    ``read_only``). ``command``: opened for one command (stats, ls), not a running program;
    ``alone``: the store's only level (a command's error is then its error, said once)."""
    parsed = url if isinstance(url, StoreURL) else parse_url(url, max_size, create=create)
    store = _backend(parsed)
    if not is_local(parsed):
        # Imported here: a local-only cache never loads the network wrappers.
        from compilecache.stores.guarded import for_level

        store = for_level(store, parsed, command=command, alone=alone)
    if read_only or flag(parsed.params, "readonly"):
        store = ReadOnly(store)
    return store


class LevelWrites(Protocol):
    """Which levels a store takes writes on (the configuration's ``WritePlan`` says it)."""

    @property
    def levels_read_only(self) -> bool:
        """No level is written, backfills included."""

    @property
    def shared_read_only(self) -> bool:
        """Only this host's own levels (a local directory, memory) are written."""


def open_store(
    url: str,
    max_size: int | None = None,
    *,
    plan: LevelWrites | None = None,
    tier_writes: WritePolicy = "all",
    create: bool = True,
    cold_streak: int = DEFAULT_COLD_STREAK,
    command: bool = False,
) -> Tiered:
    """Open ``url``: one level, or several separated by commas (tiers, fastest first); one
    level alone is tiers of one level, so that every caller asks the same questions.

    ``plan`` (default: every level writable): its ``levels_read_only`` reaches every level (so
    that a read-only session does not backfill either); its ``shared_read_only`` leaves only
    this host's own levels (a local directory or memory) writable.
    ``create=False`` is for commands that only read: a local directory that does not exist is
    an error instead of a new, empty store. Of several levels, one that cannot be opened (a
    missing package, an unusable directory) is left out with a warning rather than failing the
    whole cache; if none can be opened, the first error is raised. Configuration errors (a bad
    URL, an unknown option) are never left out: they are raised.
    """
    urls = split_levels(url)
    if not urls:
        raise ConfigError("empty store URL")
    read_only = plan.levels_read_only if plan is not None else False
    shared_read_only = plan.shared_read_only if plan is not None else False
    if len(urls) == 1:
        parsed = parse_url(urls[0], max_size, create=create)
        level = _level(parsed, read_only=read_only, command=command, alone=True)
        # A remote level alone reads ahead what a framework is about to look up (Tiered.hold).
        remote = [not is_local(parsed)]
        return Tiered([level], writes=tier_writes, cold_streak=cold_streak, remote=remote)
    # Read-only reaches every level (no backfill either), and so the tiers as a whole.
    return from_urls(
        urls,
        max_size,
        writes=tier_writes,
        read_only=read_only,
        create=create,
        cold_streak=cold_streak,
        shared_read_only=shared_read_only,
        command=command,
    )


def shared_levels(url: str) -> list[str]:
    """The levels of ``url`` that other hosts (or other users) can write: every level but a
    private local directory or memory."""
    return [text for text in split_levels(url) if not is_local(parse_url(text))]


def has_private_level(url: str) -> bool:
    """Whether ``url`` has tiers with a level of this host's own in front of shared ones: the
    level a process that may not write shared levels keeps its compiles in. (One level alone
    is the store every reader shares, whatever its kind.)"""
    levels = split_levels(url)
    return len(levels) > 1 and any(is_local(parse_url(text)) for text in levels)


def from_urls(
    urls: Sequence[str],
    max_size: int | None = None,
    *,
    writes: WritePolicy = "all",
    read_only: bool = False,
    create: bool = True,
    cold_streak: int = DEFAULT_COLD_STREAK,
    shared_read_only: bool = False,
    command: bool = False,
) -> Tiered:
    """The tiers of ``COMPILECACHE_URL=a,b,c``, fastest first (``shared_read_only``: the levels
    other than local ones are read-only).

    Levels on another machine (not a local directory or memory) are written in the background
    (``?write_behind=0`` opts a level out), so a compile never waits for the network;
    ``cold_streak``: see :mod:`compilecache.stores.tiers.coldstreak`.
    """
    levels: list[Store] = []
    behind: list[bool] = []
    first_error: StoreUnavailable | None = None
    for text in urls:
        parsed = parse_url(text, max_size, create=create)
        try:
            shared = shared_read_only and not is_local(parsed)
            levels.append(_level(parsed, read_only=read_only or shared, command=command))
        except StoreUnavailable as exc:
            log.warning("compilecache: level %s left out: %s", text, exc)
            first_error = first_error or exc
            continue
        behind.append(flag(parsed.params, "write_behind", default=not is_local(parsed)))
    if not levels:
        assert first_error is not None
        raise first_error
    return Tiered(levels, writes=writes, write_behind=behind, cold_streak=cold_streak)


def open_url(url: str | StoreURL, max_size: int | None = None) -> Store:
    """One level's bare backend (no fail-open guard) with its ``?readonly=1``, for the tools and
    tests that look at one level as it is; the cache and its commands open stores with
    :func:`open_store`."""
    parsed = url if isinstance(url, StoreURL) else parse_url(url, max_size)
    store = _backend(parsed)
    return ReadOnly(store) if flag(parsed.params, "readonly") else store
