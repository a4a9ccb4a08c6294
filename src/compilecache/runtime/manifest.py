"""Lookup manifests: what a job asks the cache for, so that a fresh host can fetch it ahead.

A fresh host asks the remote level once per function, in order, as the framework compiles: tens
to hundreds of round trips. Each run therefore records the keys it looked up, in order, as one
small entry ``manifest/<job>`` in the shared levels of the store (written at exit, and only when
the run looked up keys the manifest did not list). At the
next start of the same job, on any host, the session reads the manifest in the background and
asks the tiers to prefetch what the local level lacks (in batches of one round trip each); the
framework's lookups then find their entries local, or wait for the batch on its way.

The job is named by ``COMPILECACHE_JOB``, or fingerprinted from the command line and the
framework versions. A manifest is only a list of keys: a wrong or stale one costs a prefetch of
entries nobody asks for, never a wrong hit (every entry is still checked when it is used).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from collections.abc import Sequence

from compilecache import entry
from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.stores.base import EntryMeta, Store

log = logging.getLogger("compilecache")

FRAMEWORK = "manifest"
PREFIX = "manifest/"
# A manifest lists at most this many keys (a job with more still prefetches the first ones).
MAX_KEYS = 20_000


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


def load(store: Store, key: str, secret: bytes | None) -> list[str]:
    """The keys of the manifest under ``key`` (``[]`` when there is none or it is unusable)."""
    try:
        # peek: reading the manifest counts no hit and copies nothing (the remote one is the
        # fleet's newest; each start reads it again, in the background).
        data = store.peek(key)
        if data is None:
            return []
        found = entry.decode(data, secret=secret, expect_key=key)
        keys = json.loads(found.payload)
    except Exception as exc:  # a manifest is an optimisation: any problem means no prefetch
        log.debug("compilecache: no usable manifest %s: %s", key, exc)
        return []
    if not isinstance(keys, list):
        return []
    return [k for k in keys if isinstance(k, str) and not k.startswith(PREFIX)][:MAX_KEYS]


def save(store: Store, key: str, job: str, keys: Sequence[str], secret: bytes | None) -> bool:
    """Write the manifest of this run into the slower levels of ``store`` (the ones a fresh host
    reads it from; the first level, this host's own disk, has no use for it). Never raises;
    ``False`` when written nowhere."""
    keys = [k for k in keys if not k.startswith(PREFIX)][:MAX_KEYS]
    if not keys:
        return False
    header = EntryHeader(framework=FRAMEWORK, key=key, name=job[:80])
    try:
        data = entry.encode(header, json.dumps(keys).encode(), secret=secret)
    except Exception as exc:
        log.debug("compilecache: could not encode the manifest %s: %s", key, exc)
        return False
    written = False
    for level in store.levels[1:]:
        if level.read_only:
            continue
        try:
            level.put(key, data, EntryMeta(FRAMEWORK, job[:80], 0.0))
            written = True
        except Exception as exc:
            log.debug("compilecache: could not write the manifest to %s: %s", level.url, exc)
    return written


class Prefetch:
    """The manifest side of one session: prefetch at start (in the background), record at
    exit (when this run looked up other keys than the manifest held)."""

    def __init__(self, store: Store, cfg: Config) -> None:
        self.store = store
        self.secret = cfg.secret
        self.job = job_name(cfg)
        self.key = key_of(self.job)
        self.known: list[str] | None = None  # the manifest found at start, once read
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Read the manifest and start prefetching, on a daemon thread: ``enable()`` never
        waits for the network."""
        self.store.expect_prefetch()  # before any lookup: they wait for the list, not race it
        self._thread = threading.Thread(target=self._run, name="compilecache-manifest", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.known = load(self.store, self.key, self.secret)
        finally:
            try:  # always: an empty list releases the lookups waiting for it
                self.store.prefetch(self.known or [])
            except Exception as exc:  # never fail a program for a prefetch
                log.debug("compilecache: prefetch of %s failed: %s", self.key, exc)

    def record(self) -> bool:
        """Write this run's lookups as the job's manifest, unless the manifest already says so."""
        keys = self.store.lookups()  # the manifest itself is read with peek: never among them
        if not keys:
            return False
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.known is not None and set(keys) <= set(self.known):
            return False  # nothing new: the manifest stands
        merged = list(dict.fromkeys([*keys, *(self.known or [])]))
        return save(self.store, self.key, self.job, merged, self.secret)
