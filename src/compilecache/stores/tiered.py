"""Tiers: several stores, fastest first (sccache's multi-level cache).

Reads try each level in order and copy a hit into the faster levels before it (backfill), so a
host's local disk fills from the shared level. Writes go to every level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from compilecache.stores.base import EntryInfo, EntryMeta, Store, open_url

log = logging.getLogger("compilecache")


class Tiered:
    """Levels of stores, fastest first."""

    def __init__(self, levels: Sequence[Store]) -> None:
        if not levels:
            raise ValueError("a tiered store needs at least one level")
        self.levels = list(levels)
        self.url = ",".join(level.url for level in self.levels)

    def get(self, key: str) -> bytes | None:
        for depth, level in enumerate(self.levels):
            value = level.get(key)
            if value is None:
                continue
            if depth:
                info = level.stat(key)
                for faster in self.levels[:depth]:
                    try:
                        faster.put(key, value, info.meta if info else None)
                    except Exception as exc:
                        log.debug("compilecache: backfill of %s failed: %s", faster.url, exc)
            return value
        return None

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        for level in self.levels:
            level.put(key, value, meta)

    def delete(self, key: str) -> bool:
        removed = False
        for level in self.levels:
            removed = level.delete(key) or removed
        return removed

    def stat(self, key: str) -> EntryInfo | None:
        for level in self.levels:
            info = level.stat(key)
            if info is not None:
                return info
        return None

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        seen: set[str] = set()
        for level in self.levels:
            for info in level.scan(prefix):
                if info.key not in seen:
                    seen.add(info.key)
                    yield info

    def close(self) -> None:
        for level in self.levels:
            level.close()


def from_urls(urls: Sequence[str], max_size: int | None = None) -> Tiered:
    return Tiered([open_url(url, max_size) for url in urls])
