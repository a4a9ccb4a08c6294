"""The storage layer: bytes in, bytes out, behind one :class:`~compilecache.stores.base.Store`
base; :mod:`compilecache.stores.registry` opens stores from URLs."""

from compilecache.stores.base import EntryInfo, EntryMeta, Store, StoreURL, StoreWrapper
from compilecache.stores.registry import open_store, open_url

__all__ = ["EntryInfo", "EntryMeta", "Store", "StoreURL", "StoreWrapper", "open_store", "open_url"]
