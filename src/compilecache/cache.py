"""The integrity-checking layer between the framework integrations and a store.

:class:`Cache` turns compiles into entries and entries back into payloads. It is the one place
where the principles are enforced for every backend alike:

- a storage error is a counted miss (or a counted failed write) with one warning, never an
  exception into the framework;
- an entry is returned only when its checksum, its signature (with a secret) and its key all
  match; anything else is counted as corrupt, removed, and reported as a miss;
- read-only mode and the minimum compile time are applied here, not in each integration.
"""

from __future__ import annotations

import logging
import threading
import time

from compilecache import entry
from compilecache.entry import Entry, EntryHeader
from compilecache.errors import CorruptEntry
from compilecache.stats import Stats
from compilecache.stores.base import EntryMeta, Store

log = logging.getLogger("compilecache")


class Cache:
    """A store plus the entry format, counters and the never-raise policy."""

    def __init__(
        self,
        store: Store,
        *,
        stats: Stats | None = None,
        read_only: bool = False,
        min_compile_time: float = 0.0,
        secret: bytes | None = None,
    ) -> None:
        self.store = store
        self.stats = stats or Stats()
        self.read_only = read_only
        self.min_compile_time = min_compile_time
        self.secret = secret
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    def warn_once(self, category: str, message: str) -> None:
        """Log ``message`` as a warning the first time ``category`` occurs, at debug later."""
        with self._warn_lock:
            first = category not in self._warned
            self._warned.add(category)
        log.log(logging.WARNING if first else logging.DEBUG, "compilecache: %s", message)

    def load(self, framework: str, key: str) -> Entry | None:
        """The verified entry stored under ``key``, or ``None`` (counted as a miss)."""
        start = time.perf_counter()
        try:
            data = self.store.get(key)
        except CorruptEntry as exc:
            self._corrupt(framework, key, exc, remove=False)
            return None
        except Exception as exc:  # any backend failure must degrade to a miss
            self.stats.add("errors", framework=framework)
            self.stats.add("misses", framework=framework)
            self.warn_once(f"get:{type(exc).__name__}", f"read from {self.store.url} failed: {exc}")
            return None
        if data is None:
            self.stats.add("misses", framework=framework)
            return None
        try:
            found = entry.decode(data, secret=self.secret)
            if found.header.key != key:
                raise CorruptEntry(f"entry holds key {found.header.key!r}")
            if found.header.framework != framework:
                raise CorruptEntry(f"entry belongs to {found.header.framework!r}")
        except CorruptEntry as exc:
            self._corrupt(framework, key, exc, remove=True)
            return None
        except Exception as exc:  # a store returning something other than bytes
            self.stats.add("errors", framework=framework)
            self.stats.add("misses", framework=framework)
            self.warn_once(
                f"get:{type(exc).__name__}", f"read from {self.store.url} returned junk: {exc}"
            )
            return None
        elapsed = time.perf_counter() - start
        self.stats.add("hits", framework=framework)
        self.stats.add("bytes_read", len(data), framework=framework)
        self.stats.add("load_time_s", elapsed, framework=framework)
        self.stats.add(
            "compile_time_saved_s", found.header.compile_time_s - elapsed, framework=framework
        )
        return found

    def _corrupt(self, framework: str, key: str, exc: Exception, *, remove: bool) -> None:
        self.stats.add("corrupt", framework=framework)
        self.stats.add("misses", framework=framework)
        self.warn_once("corrupt", f"entry {key} is corrupt ({exc}); treated as a miss and removed")
        if remove and not self.read_only:
            try:
                self.store.delete(key)
            except Exception as delete_exc:
                log.debug("compilecache: could not remove corrupt entry %s: %s", key, delete_exc)

    def save(self, header: EntryHeader, payload: bytes, *, compress: bool | None = None) -> bool:
        """Store ``payload``; ``False`` when skipped (read-only, too fast) or failed (counted)."""
        framework = header.framework
        if self.read_only:
            self.stats.add("skipped", framework=framework)
            return False
        if header.compile_time_s < self.min_compile_time:
            self.stats.add("skipped", framework=framework)
            return False
        try:
            data = entry.encode(header, payload, compress=compress, secret=self.secret)
            meta = EntryMeta(framework, header.name, header.compile_time_s)
            self.store.put(header.key, data, meta)
        except Exception as exc:  # a failed write must never fail the user's compile
            self.stats.add("errors", framework=framework)
            self.warn_once(f"put:{type(exc).__name__}", f"write to {self.store.url} failed: {exc}")
            return False
        self.stats.add("writes", framework=framework)
        self.stats.add("bytes_written", len(data), framework=framework)
        self.stats.add("compile_time_s", header.compile_time_s, framework=framework)
        return True

    def close(self) -> None:
        try:
            self.store.close()
        except Exception as exc:  # closing is best effort, and never fails the user's program
            log.debug("compilecache: closing %s failed: %s", self.store.url, exc)
