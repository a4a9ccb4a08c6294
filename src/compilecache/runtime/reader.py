"""Reading an entry under the trust policy: the one place where stored bytes become an Entry.

Every reader of entries (the cache's lookups, the manifest and its pack, bundles, copies between
stores, ``show`` and ``verify``, the integrations' own lookups) decodes through a :class:`Reader`,
so none can forget a check: that the entry is intact, that it was stored under the key it was
read from, and, when signing is configured, that a writer this process trusts signed it.
``tests/test_architecture.py`` keeps ``entry.decode`` out of every other module.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from compilecache import entry
from compilecache.signing import Signing
from compilecache.stores.base import Store


class Reader:
    """Verifies and decodes entries with one trust policy (``signing``: the keys accepted, and
    whether an unsigned entry is; ``None`` accepts any intact entry).

    Its methods raise what :func:`compilecache.entry.decode` raises (``CorruptEntry`` for damage
    or another key's data, ``ForeignEntry`` for an intact entry this policy does not trust) and
    what the store raises; each caller decides what a failure means to it (a counted miss, a
    line in a report, an entry left where it is).
    """

    __slots__ = ("signing",)

    def __init__(self, signing: Signing | None = None) -> None:
        self.signing = signing

    def decode(self, data: bytes | memoryview, key: str) -> entry.Entry:
        """The entry in ``data``, read from under ``key``."""
        return entry.decode(data, signing=self.signing, expect_key=key)

    def verify(self, data: bytes | memoryview, key: str) -> entry.EntryHeader:
        """The header of the entry in ``data`` after the same checks as :meth:`decode`, without
        decompressing its payload: for a pass that only decides whether a set is acceptable."""
        return entry.verify(data, signing=self.signing, expect_key=key)

    def peek(self, store: Store, key: str) -> entry.Entry | None:
        """The entry under ``key`` in ``store``, read without counting a hit, touching its
        access time or copying it between levels; ``None`` when there is none."""
        data = store.peek(key)
        return None if data is None else self.decode(data, key)


# Most headers fit in this; a longer one (torch's readable key components) takes a second read.
_HEAD_GUESS = 64 * 1024


def claimed_header(store: Store, key: str) -> entry.EntryHeader | None:
    """What the entry under ``key`` says of itself (its header, read without its payload where
    the store can read part of a value), unverified: for listings (``ls``'s CPU column), never
    for serving. ``None`` when there is no entry; raises ``CorruptEntry`` for one that is not an
    entry, and what the store raises."""
    start = store.head(key, _HEAD_GUESS)
    if start is None:
        return None
    end = entry.header_end(bytes(start[: entry.PREFIX_SIZE]))
    if end > len(start):
        start = store.head(key, end)
        if start is None:
            return None
    return entry.unverified_header(start)


def cpu_targets(store: Store, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The CPU target each entry of ``keys`` records (``extra["cpu"]``: the CPU its code was
    compiled for), from their headers, several at a time (a remote store answers each read in a
    round trip); entries that record none, or cannot be read, are left out."""

    def target(key: str) -> Any:
        try:
            header = claimed_header(store, key)
        except Exception:  # a listing reports what it can read
            return None
        return header.extra.get("cpu") if header is not None else None

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = dict(zip(keys, pool.map(target, keys), strict=True))
    return {key: cpu for key, cpu in found.items() if isinstance(cpu, dict)}
