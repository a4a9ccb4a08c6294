"""Reading an entry under the trust policy: the one place where stored bytes become an Entry.

Every reader of entries (the cache's lookups, the manifest and its pack, bundles, copies between
stores, ``show`` and ``verify``, the integrations' own lookups) decodes through a :class:`Reader`,
so none can forget a check: that the entry is intact, that it was stored under the key it was
read from, and, when signing is configured, that a writer this process trusts signed it.
``tests/test_architecture.py`` keeps ``entry.decode`` out of every other module.
"""

from __future__ import annotations

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
