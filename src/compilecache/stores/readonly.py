"""Read-only as a wrapper (sccache's RW_MODE): reads pass through, writes raise ReadOnlyStore.

Counters and history are not entries: they pass through, so a read-only client still records
what it hit. Leases do not: a client that never writes has nothing to lead (it compiles at once).
"""

from __future__ import annotations

from compilecache.errors import ReadOnlyStore
from compilecache.stores.base import EntryMeta, Store, StoreWrapper


class ReadOnly(StoreWrapper):
    """Wrap ``inner`` so that ``put`` and ``delete`` are refused."""

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        raise ReadOnlyStore(f"{self.url} is read-only")

    def delete(self, key: str) -> bool:
        raise ReadOnlyStore(f"{self.url} is read-only")

    @property
    def read_only(self) -> bool:
        return True

    # No leases (a client that never writes has nothing to lead): the base's answers, the
    # claims included (a read here never takes the inner store's lease).
    supports_leases = Store.supports_leases
    acquire_lease = Store.acquire_lease
    renew_lease = Store.renew_lease
    release_lease = Store.release_lease
    claim_lease = Store.claim_lease
    get_or_claim = Store.get_or_claim
