"""Read-only as a wrapper (sccache's RW_MODE): reads pass through, writes raise ReadOnlyStore."""

from __future__ import annotations

from collections.abc import Iterator

from compilecache.errors import ReadOnlyStore
from compilecache.stores.base import EntryInfo, EntryMeta, Store


class ReadOnly:
    """Wrap ``inner`` so that ``put`` and ``delete`` are refused."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
        from compilecache.stores.guarded import fetch_with_meta

        return fetch_with_meta(self.inner, key)

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        raise ReadOnlyStore(f"{self.url} is read-only")

    def delete(self, key: str) -> bool:
        raise ReadOnlyStore(f"{self.url} is read-only")

    def stat(self, key: str) -> EntryInfo | None:
        return self.inner.stat(key)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        return self.inner.scan(prefix)

    def close(self) -> None:
        self.inner.close()
