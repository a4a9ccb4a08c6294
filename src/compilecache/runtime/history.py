"""A short memory kept beside the entries: explained misses and per-run totals.

Stores that implement the optional :class:`~compilecache.stores.base.HistoryStore` methods keep
two capped logs (the newest :data:`~compilecache.stores.base.HISTORY_LIMIT` records of each):

- ``miss``: one record per compile that missed the cache, with its explanation (see
  :mod:`compilecache.runtime.explain`) and whether it was stored;
- ``run``: one record per process that used the cache, with its totals (for the report's
  per-run charts).

History is not made of entries: ``ls``, ``stats`` entry counts, ``prune`` and ``verify`` never see
it. The local store keeps it in its SQLite index, the memory store in a deque, Redis in capped
lists, a tiered store in its first writable level that can (per host, like the counters). Other
stores keep none, and ``explain`` says so.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from compilecache.stores.base import HISTORY_LIMIT, Store

log = logging.getLogger("compilecache")

MISS = "miss"
RUN = "run"


def keeps(store: Store) -> bool:
    """Whether ``store`` keeps history. A read-only store does too: a session that may not
    write entries still records why it missed."""
    return store.keeps_history()


def append(store: Store, kind: str, record: Mapping[str, Any]) -> bool:
    """Add ``record`` to ``store``'s ``kind`` log. Never raises; ``False`` when not kept."""
    if not store.keeps_history():
        return False
    try:
        store.add_history(kind, record)
    except Exception as exc:  # history is a convenience: it must never fail a compile
        log.debug("compilecache: could not record %s history: %s", kind, exc)
        return False
    return True


def read(store: Store, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The newest ``limit`` records of ``kind``, newest first (``[]`` without history)."""
    return [dict(r) for r in store.read_history(kind, limit)]


def origin(run_id: str = "") -> dict[str, Any]:
    """Where and when a record was made: time, host, pid and run id."""
    host = socket.gethostname()
    pid = os.getpid()
    return {"time": time.time(), "host": host, "pid": pid, "run": run_id or f"{host}:{pid}"}
