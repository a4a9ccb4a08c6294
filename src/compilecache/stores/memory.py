"""``memory://``: a process-local store, for tests and for short-lived single-process runs.

Stores opened with the same URL in one process share their contents (``memory://name``), the way
two local stores on one directory do.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import replace

from compilecache.stores.base import EntryInfo, EntryMeta, Store, StoreURL
from compilecache.stores.capabilities import HISTORY_LIMIT, Counters, History

_SHARED: dict[str, _MemoryData] = {}
_SHARED_LOCK = threading.Lock()


class _MemoryData:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, bytes] = {}
        # Least recently used first: eviction pops from the front, get and put move to the end.
        self.infos: OrderedDict[str, EntryInfo] = OrderedDict()
        self.total = 0
        self.stats: dict[str, float] = {}
        self.history: dict[str, deque[dict[str, object]]] = {}


class MemoryStore(Store):
    """A dict behind a lock, with LRU eviction when ``max_size`` is set.

    Like the local store, get and put cost O(1) in the number of entries: the LRU order and the
    running total are maintained as entries change, never recomputed by sorting or summing.
    """

    def __init__(self, url: str = "memory://", max_size: int | None = None) -> None:
        self.url = url
        self.max_size = max_size
        with _SHARED_LOCK:
            self._data = _SHARED.setdefault(url, _MemoryData())
        self.counters = _MemoryCounters(self._data)
        self.history = _MemoryHistory(self._data)

    def get(self, key: str) -> bytes | None:
        with self._data.lock:
            value = self._data.values.get(key)
            if value is not None:
                info = self._data.infos[key]
                self._data.infos[key] = replace(info, accessed=time.time(), hits=info.hits + 1)
                self._data.infos.move_to_end(key)
            return value

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        now = time.time()
        with self._data.lock:
            self._discard(key)
            self._data.values[key] = bytes(value)
            self._data.infos[key] = EntryInfo(key, len(value), now, now, 0, meta or EntryMeta())
            self._data.total += len(value)
            self._evict()

    def _discard(self, key: str) -> bool:
        info = self._data.infos.pop(key, None)
        if info is None:
            return False
        del self._data.values[key]
        self._data.total -= info.size
        return True

    def _evict(self) -> None:
        if self.max_size is None:
            return
        # Sorting every entry by access time on each put made puts O(n log n).
        while self._data.total > self.max_size and self._data.infos:
            self._discard(next(iter(self._data.infos)))

    def total_size(self) -> int:
        """Bytes of values held (a running total)."""
        with self._data.lock:
            return self._data.total

    def delete(self, key: str) -> bool:
        with self._data.lock:
            return self._discard(key)

    def stat(self, key: str) -> EntryInfo | None:
        with self._data.lock:
            return self._data.infos.get(key)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        with self._data.lock:
            infos = [i for k, i in self._data.infos.items() if k.startswith(prefix)]
        return iter(infos)

    def peek(self, key: str) -> bytes | None:
        """The value under ``key`` without counting a hit or moving it in the LRU order."""
        with self._data.lock:
            return self._data.values.get(key)

    def close(self) -> None:
        pass


class _MemoryCounters(Counters):
    def __init__(self, data: _MemoryData) -> None:
        self._data = data

    def add(self, counters: Mapping[str, float]) -> None:
        with self._data.lock:
            for name, value in counters.items():
                self._data.stats[name] = self._data.stats.get(name, 0.0) + value

    def read(self) -> dict[str, float]:
        with self._data.lock:
            return dict(self._data.stats)

    def zero(self) -> None:
        with self._data.lock:
            self._data.stats.clear()


class _MemoryHistory(History):
    def __init__(self, data: _MemoryData) -> None:
        self._data = data

    def add(self, kind: str, record: Mapping[str, object]) -> None:
        with self._data.lock:
            records = self._data.history.setdefault(kind, deque(maxlen=HISTORY_LIMIT))
            records.appendleft(dict(record))

    def read(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        with self._data.lock:
            return [dict(r) for r in list(self._data.history.get(kind, ()))[:limit]]

    def clear(self) -> None:
        with self._data.lock:
            self._data.history.clear()


def from_url(url: StoreURL) -> MemoryStore:
    return MemoryStore(f"memory://{url.netloc}{url.path}", max_size=url.max_size)
