"""Storage backends behind one :class:`~compilecache.stores.base.Store` protocol."""

from compilecache.stores.base import EntryInfo, EntryMeta, Store, StoreURL, open_url

__all__ = ["EntryInfo", "EntryMeta", "Store", "StoreURL", "open_url"]
