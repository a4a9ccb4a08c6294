"""A short memory kept beside the entries: explained misses and per-run totals.

Stores that have a :class:`~compilecache.stores.capabilities.History` (``store.history``) keep
two capped logs (the newest :data:`~compilecache.stores.capabilities.HISTORY_LIMIT` records of
each):

- ``miss``: one record per compile that missed the cache, with its explanation (see
  :mod:`compilecache.runtime.explain`) and whether it was stored;
- ``run``: one record per process that used the cache, with its totals (for the report's
  per-run charts).

History is not made of entries: ``ls``, ``stats`` entry counts, ``prune`` and ``verify`` never see
it. The local store keeps it in its SQLite index, the memory store in a deque, Redis in capped
lists, tiers in their first writable level that can (per host, like the counters). Other
stores keep none, and ``explain`` says so.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from compilecache.stores.base import Store
from compilecache.stores.capabilities import HISTORY_LIMIT

log = logging.getLogger("compilecache")

MISS = "miss"
RUN = "run"


def keeps(store: Store) -> bool:
    """Whether ``store`` keeps history. A read-only store does too: a session that may not
    write entries still records why it missed."""
    return store.history is not None


def append(store: Store, kind: str, record: Mapping[str, Any]) -> bool:
    """Add ``record`` to ``store``'s ``kind`` log. Never raises; ``False`` when not kept."""
    if store.history is None:
        return False
    try:
        store.history.add(kind, record)
    except Exception as exc:  # history is a convenience: it must never fail a compile
        log.debug("compilecache: could not record %s history: %s", kind, exc)
        return False
    return True


def read(store: Store, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The newest ``limit`` records of ``kind``, newest first (``[]`` without history)."""
    if store.history is None:
        return []
    return [dict(r) for r in store.history.read(kind, limit)]


@functools.lru_cache(maxsize=1)
def _hostname() -> str:
    return socket.gethostname()


def origin(run_id: str = "") -> dict[str, Any]:
    """Where and when a record was made: time, host, pid and run id."""
    host = _hostname()  # asked once: a system call per record held up a cold run's misses
    pid = os.getpid()
    return {"time": time.time(), "host": host, "pid": pid, "run": run_id or f"{host}:{pid}"}
