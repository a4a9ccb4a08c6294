"""Read-only as a wrapper (sccache's RW_MODE): reads pass through, writes raise ReadOnlyStore.

Counters and history are not entries: they pass through, so a read-only client still records
what it hit. Leases do not: a client that never writes has nothing to lead (it compiles at once).
"""

from __future__ import annotations

from compilecache.errors import ReadOnlyStore
from compilecache.stores.base import EntryMeta, Store, StoreWrapper


class ReadOnly(StoreWrapper):
    """Wrap ``inner`` so that ``put`` and ``delete`` are refused."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.read_only = True
        self.leases = None  # nothing to lead: a read here never takes the inner store's lease

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        raise ReadOnlyStore(f"{self.url} is read-only")

    def delete(self, key: str) -> bool:
        raise ReadOnlyStore(f"{self.url} is read-only")
