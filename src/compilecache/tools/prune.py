"""Plan-then-execute pruning (huggingface_hub's cache manager does the same): build the list of
entries to remove, show it with ``--dry-run``, then delete. Works on any store through ``scan``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from compilecache.runtime.transfer import split_keys
from compilecache.stores.base import EntryInfo, Store


@dataclass(frozen=True)
class PrunePlan:
    """Entries selected for removal, and why."""

    victims: tuple[tuple[EntryInfo, str], ...]
    entries_before: int  # entries, not counting the jobs' lookup lists
    bytes_before: int  # everything: entries and lookup lists

    @property
    def bytes_freed(self) -> int:
        return sum(info.size for info, _ in self.victims)

    @property
    def bytes_after(self) -> int:
        return self.bytes_before - self.bytes_freed


def plan(
    store: Store,
    *,
    max_size: int | None = None,
    older_than: float | None = None,
    now: float | None = None,
) -> PrunePlan:
    """Select entries not accessed for ``older_than`` seconds, then least recently used ones
    until the rest fits in ``max_size`` bytes."""
    now = time.time() if now is None else now
    infos = sorted(store.scan(), key=lambda i: i.accessed)
    total = sum(i.size for i in infos)
    victims: list[tuple[EntryInfo, str]] = []
    kept: list[EntryInfo] = []
    for info in infos:
        if older_than is not None and now - info.accessed > older_than:
            victims.append((info, f"not used for {_age(now - info.accessed)}"))
        else:
            kept.append(info)
    if max_size is not None:
        remaining = sum(i.size for i in kept)
        for info in kept:  # oldest access first
            if remaining <= max_size:
                break
            victims.append((info, "least recently used, over the size bound"))
            remaining -= info.size
    return PrunePlan(tuple(victims), split_keys(i.key for i in infos)[0], total)


def execute(store: Store, prune_plan: PrunePlan) -> list[str]:
    """Delete the planned entries; returns the keys removed."""
    return [info.key for info, _ in prune_plan.victims if store.delete(info.key)]


def _age(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.1f}{unit}"
    return f"{seconds:.0f}s"
