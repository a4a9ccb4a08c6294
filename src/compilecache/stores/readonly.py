"""Read-only as a wrapper (sccache's RW_MODE): reads pass through, writes raise ReadOnlyStore.

Counters and history are not entries: they pass through, so a read-only client still records
what it hit. Leases do not: a client that never writes has nothing to lead (it compiles at once).
"""

from __future__ import annotations

from compilecache.errors import ReadOnlyStore
from compilecache.stores.base import NO_COORDINATION, EntryMeta, StoreWrapper


class ReadOnly(StoreWrapper):
    """Wrap ``inner`` so that ``put`` and ``delete`` are refused."""

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        raise ReadOnlyStore(f"{self.url} is read-only")

    def delete(self, key: str) -> bool:
        raise ReadOnlyStore(f"{self.url} is read-only")

    @property
    def read_only(self) -> bool:
        return True

    def supports_leases(self) -> bool:
        return False

    def acquire_lease(self, key: str, ttl_s: float) -> str | None:
        return NO_COORDINATION

    def renew_lease(self, key: str, token: str, ttl_s: float) -> bool:
        return False

    def release_lease(self, key: str, token: str) -> None:
        pass
