"""The storage layer: bytes in, bytes out, behind one :class:`~compilecache.stores.base.Store`
base; :mod:`compilecache.stores.registry` opens stores from URLs."""

from __future__ import annotations

from typing import Any

from compilecache.stores.base import EntryInfo, EntryMeta, Store, StoreURL, StoreWrapper

__all__ = ["EntryInfo", "EntryMeta", "Store", "StoreURL", "StoreWrapper", "open_store", "open_url"]


def __getattr__(name: str) -> Any:
    # The registry (and the wrappers it imports) loads on first use, not with every submodule.
    if name in ("open_store", "open_url"):
        from compilecache.stores import registry

        return getattr(registry, name)
    raise AttributeError(name)
