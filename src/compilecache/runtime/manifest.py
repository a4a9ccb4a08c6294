"""Lookup manifests: what a job asks the cache for, so that a fresh host can fetch it ahead.

A fresh host asks the remote level once per function, in order, as the framework compiles: tens
to hundreds of round trips. Each run therefore records the keys it looked up, in order, as one
small entry ``manifest/<job>`` in the shared levels of the store (written at exit, and only when
the run looked up keys the manifest did not list). At the
next start of the same job, on any host, the session reads the manifest in the background and
asks the tiers to prefetch what the local level lacks (in batches of one round trip each); the
framework's lookups then find their entries local, or wait for the batch on its way.

Beside the manifest, the run writes a pack: the listed entries themselves (up to
``PACK_MAX_BYTES``, in lookup order) in one object ``manifest/<job>.pack``. A fresh host that
lacks several of the listed entries reads the pack first: one request for a hundred entries,
where an object store would take a hundred (each a request the store bills, and that a busy
bucket may answer with HTTP 429). Entries the pack lacks are fetched one batch at a time, as
before.

A copy of the list (not the pack) is also kept in the first level, this host's own: a start
whose every listed entry is already local reads that copy and prefetches nothing, so repeated
starts on one host never touch the network (a new key, or a fresh host, goes to the remote
levels as before).

A store of one level fetches nothing: it keeps the list (no pack) only for a framework that
prepares its entries ahead (the JAX integration deserialises its executables on a thread,
:mod:`compilecache.frameworks.jax.preload`), and reads it only when that framework asks.

The job is named by ``COMPILECACHE_JOB``, or fingerprinted from the command line and the
framework versions. A manifest is only a list of keys: a wrong or stale one costs a prefetch of
entries nobody asks for, never a wrong hit (every entry is still checked when it is used). A
pack's entries are whole entries, each naming its own key: one that names another key is left
out, and each is verified again when it is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence

from compilecache import entry
from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.runtime.prefetch import Prefetcher
from compilecache.runtime.reader import Reader
from compilecache.signing import Signing
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.tiers import Tiered

log = logging.getLogger("compilecache")

FRAMEWORK = "manifest"
PREFIX = "manifest/"
# A manifest lists at most this many keys (a job with more still prefetches the first ones).
MAX_KEYS = 20_000
# A pack holds the manifest's first entries up to this size (the rest are fetched one by one).
PACK_MAX_BYTES = 64 * 1024 * 1024
PACK_SUFFIX = ".pack"


def job_name(cfg: Config, argv: Sequence[str] | None = None) -> str:
    """``COMPILECACHE_JOB``, else a fingerprint of the command line and the framework versions
    (a new version compiles other keys: its manifest is another one)."""
    if cfg.job:
        return cfg.job
    from importlib import metadata  # slow to import: only for tiers, only at enable()

    argv = list(sys.argv if argv is None else argv)
    versions = []
    for dist in ("jax", "jaxlib", "torch"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    text = json.dumps({"argv": argv, "versions": versions, "python": sys.version.split()[0]})
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def key_of(job: str) -> str:
    return PREFIX + hashlib.sha256(job.encode()).hexdigest()[:32]


def load(store: Store, key: str, reader: Reader) -> list[str]:
    """The keys of the manifest under ``key`` (``[]`` when there is none or it is unusable)."""
    try:
        # peek: reading the manifest counts no hit and copies nothing (the remote one is the
        # fleet's newest; each start reads it again, in the background).
        found = reader.peek(store, key)
        if found is None:
            return []
        keys = json.loads(found.payload)
    except Exception as exc:  # a manifest is an optimisation: any problem means no prefetch
        log.debug("compilecache: no usable manifest %s: %s", key, exc)
        return []
    if not isinstance(keys, list):
        return []
    return [k for k in keys if isinstance(k, str) and not k.startswith(PREFIX)][:MAX_KEYS]


def local_copy(store: Tiered, key: str, reader: Reader) -> list[str] | None:
    """The manifest's keys when this host's own level has the list and every entry it names
    (then a start needs nothing from the network); ``None`` otherwise."""
    local = store.levels[0]
    keys = load(local, key, reader)
    if not keys:
        return None
    try:
        if all(local.stat(k) is not None for k in keys):
            return keys
    except Exception as exc:
        log.debug("compilecache: the local manifest of %s not checked: %s", key, exc)
    return None


def load_remote(store: Tiered, key: str, reader: Reader) -> list[str]:
    """The manifest as the slower levels hold it (the fleet's newest), else the local copy."""
    for level in store.levels[1:]:
        keys = load(level, key, reader)
        if keys:
            return keys
    return load(store.levels[0], key, reader)


def unreadable(store: Tiered, key: str, reader: Reader) -> bool:
    """Whether the first level holds a manifest under ``key`` that ``reader`` cannot use
    (signed with another secret, or damaged). Never raises; a level that cannot say holds none."""
    try:
        data = store.levels[0].peek(key)
    except Exception:
        return False
    if data is None:
        return False
    try:
        reader.decode(data, key)
    except Exception:
        return True
    return False


def save(store: Tiered, key: str, job: str, keys: Sequence[str], signing: Signing | None) -> bool:
    """Write the manifest of this run, and its pack, into the slower levels of ``store`` (the
    ones a fresh host reads them from), and the manifest alone into the first level, this host's
    own (a start that finds every entry local reads it there). The pack goes first: a reader of
    the new manifest finds the pack that goes with it. Never raises; ``False`` when the manifest
    is not where a start reads it (the shared levels; the only level of a store of one)."""
    keys = [k for k in keys if not k.startswith(PREFIX)][:MAX_KEYS]
    if not keys:
        return False
    data = _encode(key, job, json.dumps(keys).encode(), signing)
    # A pack is for a fresh host reading the slower levels: a store of one level has none.
    pack = None
    if len(store.levels) > 1:
        pack = _encode(key + PACK_SUFFIX, job, _pack(store.levels[0], keys), signing)
    written = _save_local(store, key, job, data) and len(store.levels) == 1
    # (with several levels, it is the shared levels' copy that counts)
    for level in store.levels[1:]:
        if level.read_only:
            continue
        for name, value in ((key + PACK_SUFFIX, pack), (key, data)):
            if value is None:
                continue
            try:
                level.put(name, value, EntryMeta(FRAMEWORK, job[:80], 0.0))
                written = written or name == key
            except Exception as exc:
                log.debug("compilecache: could not write %s to %s: %s", name, level.url, exc)
    return written


def save_local(
    store: Tiered, key: str, job: str, keys: Sequence[str], signing: Signing | None
) -> bool:
    """Write the manifest into the first level only, this host's own: a start that found the
    list in a slower level (a fresh host) keeps a copy, so that the next start on this host
    reads it locally and never asks the network. Never raises; whether it was written."""
    keys = [k for k in keys if not k.startswith(PREFIX)][:MAX_KEYS]
    if not keys:
        return False
    return _save_local(store, key, job, _encode(key, job, json.dumps(keys).encode(), signing))


def _save_local(store: Tiered, key: str, job: str, data: bytes | None) -> bool:
    local = store.levels[0]
    if data is None or local.read_only:
        return False
    try:
        local.put(key, data, EntryMeta(FRAMEWORK, job[:80], 0.0))
    except Exception as exc:
        log.debug("compilecache: could not write %s to %s: %s", key, local.url, exc)
        return False
    return True


def _encode(key: str, job: str, payload: bytes, signing: Signing | None) -> bytes | None:
    header = EntryHeader(framework=FRAMEWORK, key=key, name=job[:80])
    try:
        return entry.encode(header, payload, compress=False, signing=signing)
    except Exception as exc:
        log.debug("compilecache: could not encode %s: %s", key, exc)
        return None


def _pack(level: Store, keys: Sequence[str]) -> bytes:
    """The entries of ``keys`` that ``level`` holds, up to PACK_MAX_BYTES: a JSON line listing
    ``[key, size]`` pairs, then the entries one after another."""
    listed: list[tuple[str, int]] = []
    values: list[bytes] = []
    total = 0
    for key in keys:
        try:
            value = level.peek(key)
        except Exception as exc:  # a damaged or vanished entry is left out
            log.debug("compilecache: %s left out of the pack: %s", key, exc)
            continue
        if value is None:
            continue
        if total + len(value) > PACK_MAX_BYTES:
            break
        listed.append((key, len(value)))
        values.append(value)
        total += len(value)
    return json.dumps(listed).encode() + b"\n" + b"".join(values)


def unpacker(key: str, reader: Reader) -> Callable[[bytes], dict[str, tuple[bytes, EntryMeta]]]:
    """What reads the pack stored under ``key``: its entries, each with the metadata its own
    header gives; an entry that names another key than the one it is listed under is left out.
    Raises on a pack that fails its checks (the caller then fetches entry by entry)."""

    def unpack(data: bytes) -> dict[str, tuple[bytes, EntryMeta]]:
        payload = reader.decode(data, key).payload
        head, _, body = payload.partition(b"\n")
        found: dict[str, tuple[bytes, EntryMeta]] = {}
        offset = 0
        for name, size in json.loads(head):
            value = body[offset : offset + size]
            offset += size
            try:
                header = entry.read_header(value)
            except Exception:
                continue
            if header.key == name and len(value) == size:
                found[name] = (
                    value,
                    EntryMeta(header.framework, header.name, header.compile_time_s),
                )
        return found

    return unpack


class JobManifest:
    """The manifest side of one session: prefetch at start (in the background), record at
    exit (when this run looked up other keys than the manifest held). ``prefetcher`` is what
    the session's cache tells of each lookup."""

    def __init__(self, store: Tiered, cfg: Config, reader: Reader) -> None:
        self.store = store
        self.prefetcher = Prefetcher(store)
        self.reader = reader  # the session's cache's: what it signs with and accepts
        self._cfg = cfg
        self._job: tuple[str, str] | None = None  # (job, key), named on first use
        self._job_lock = threading.Lock()
        self.known: list[str] | None = None  # the manifest found at start, once read
        # Whether ``known`` was read from this host's own level (else a slower one lent it).
        self.known_locally = False
        self._thread: threading.Thread | None = None
        if len(store.levels) == 1:
            # Nothing to fetch: the list is read only if a framework asks for it (to prepare its
            # entries ahead), on that framework's thread; nothing is read at start.
            self.prefetcher.read_job_keys_with(self._read_local)

    @property
    def job(self) -> str:
        return self._named()[0]

    @property
    def key(self) -> str:
        return self._named()[1]

    def _named(self) -> tuple[str, str]:
        # Named on the manifest's thread, not in enable(): naming a job reads the framework
        # versions (importlib.metadata), which the program's start need not wait for.
        with self._job_lock:
            if self._job is None:
                job = job_name(self._cfg)
                self._job = (job, key_of(job))
            return self._job

    def start(self) -> None:
        """Read the manifest and start prefetching, on a daemon thread: ``enable()`` never
        waits for the network."""
        if len(self.store.levels) == 1:
            return  # nothing to fetch (the list is read when a framework asks: __init__)
        # Before any lookup: they wait for the list, not race it.
        self.prefetcher.expect()
        self._thread = threading.Thread(target=self._run, name="compilecache-manifest", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wanted: list[str] = []
        try:
            local = local_copy(self.store, self.key, self.reader)
            if local is not None:
                self.known = local  # a warm host: nothing to fetch, no network
                self.known_locally = True
            else:
                self.known = wanted = load_remote(self.store, self.key, self.reader)
        finally:
            self.prefetcher.set_job_keys(self.known or [])
            try:  # always: an empty list releases the lookups waiting for it
                pack = (self.key + PACK_SUFFIX, unpacker(self.key + PACK_SUFFIX, self.reader))
                self.prefetcher.start(wanted, pack=pack)
            except Exception as exc:  # never fail a program for a prefetch
                log.debug("compilecache: prefetch of %s failed: %s", self.key, exc)

    def _read_local(self) -> list[str]:
        self.known = load(self.store.levels[0], self.key, self.reader)
        self.known_locally = True
        return self.known

    def record(self) -> bool:
        """Write this run's lookups as the job's manifest, unless the manifest already says so."""
        keys = self.prefetcher.lookups()  # the manifest itself is read with peek: never among them
        if not keys:
            return False
        if len(self.store.levels) == 1 and not self.prefetcher.job_keys_asked:
            return False  # one level: a manifest only serves a framework's read-ahead
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.known is not None and set(keys) <= set(self.known):
            if self.known and not self.known_locally:
                # Nothing new, but the list came from a slower level (a fresh host): keep a
                # copy in this host's own level, so the next start here reads no network.
                save_local(self.store, self.key, self.job, self.known, self.reader.signing)
            return False  # nothing new: the manifest stands
        if not self.known and unreadable(self.store, self.key, self.reader):
            return False  # another writer's (another secret) or damaged: left alone
        merged = list(dict.fromkeys([*keys, *(self.known or [])]))
        return save(self.store, self.key, self.job, merged, self.reader.signing)
