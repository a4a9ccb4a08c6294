"""Moving entries between stores: the pieces bundles, ``warm`` and the torch blob import and
export share.

:class:`EntryFilter` picks entries (``--framework``, ``--since``, ``--name``), :class:`Report`
says what was moved and what was skipped and why, :class:`Progress` draws a bar on a terminal,
:func:`read_entry` reads one entry to copy it without changing the source, and :func:`admit`
writes one entry into a target only if it is valid, can run on this host and is not there
already. Below the framework integrations, so the torch blob import/export can use it.
"""

from __future__ import annotations

import fnmatch
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from compilecache import entry
from compilecache.config import parse_duration
from compilecache.errors import BundleError, ConfigError, CorruptEntry, ForeignEntry
from compilecache.host import HostCheck
from compilecache.runtime import manifest
from compilecache.runtime.reader import Reader
from compilecache.stores.base import EntryInfo, EntryMeta, Store

# -- counting ------------------------------------------------------------------------------------


def is_job_list(key: str) -> bool:
    """Whether ``key`` is a job's lookup list (kept beside the entries for prefetching): not a
    compiled entry, so no command counts it as one."""
    return key.startswith(manifest.PREFIX)


def count_words(entries: int, lists: int = 0, *, of: tuple[int, int] | None = None) -> str:
    """What a store holds, in the words every command uses: ``13 entries``, ``13 entries and 1
    job lookup list``; with ``of`` (the totals), ``13 of 14 entries and 1 of 1 job lookup
    list``. Lists are named only when there are some."""
    totals = of if of is not None else (entries, lists)

    def part(n: int, total: int, one: str, many: str) -> str:
        head = f"{n} of " if of is not None else ""
        return f"{head}{total} {one if total == 1 else many}"

    words = part(entries, totals[0], "entry", "entries")
    if totals[1]:
        words += " and " + part(lists, totals[1], "job lookup list", "job lookup lists")
    return words


def split_keys(keys: Iterable[str]) -> tuple[int, int]:
    """How many of ``keys`` are entries, and how many jobs' lookup lists. A list's pack (the
    copies of its entries a shared level keeps for a fresh host, ``manifest/<job>.pack``) is
    part of that list, not one more."""
    entries = lists = 0
    for key in keys:
        if not is_job_list(key):
            entries += 1
        elif not key.endswith(manifest.PACK_SUFFIX):
            lists += 1
    return entries, lists


# -- selection and reports -----------------------------------------------------------------------


@dataclass(frozen=True)
class EntryFilter:
    """``--framework``, ``--since`` and ``--name``: which entries to export or warm."""

    framework: str | None = None
    since: float | None = None  # a time: entries used (or written) at or after it
    name: str | None = None  # a glob over the function name or the key

    def describe(self) -> str:
        """The filter in the words of its options (``--name 'zzz*'``), or ``no filter``."""
        parts = [f"--framework {self.framework}"] if self.framework else []
        if self.since is not None:
            parts.append(f"--since {datetime.fromtimestamp(self.since).isoformat(' ', 'seconds')}")
        if self.name:
            parts.append(f"--name {self.name!r}")
        return " ".join(parts) or "no filter"

    def matches(self, info: EntryInfo) -> bool:
        if self.framework and info.framework != self.framework:
            return False
        if self.since is not None and max(info.accessed, info.created) < self.since:
            return False
        return not self.name or (
            fnmatch.fnmatchcase(info.name, self.name) or fnmatch.fnmatchcase(info.key, self.name)
        )


def nothing_matched(store: Store, select: EntryFilter, what: str = "entry") -> BundleError:
    """The error of an export that matched nothing: nothing is written, the status is not 0."""
    return BundleError(f"no {what} of {store.url} matches ({select.describe()}): nothing written")


def parse_since(text: str, now: float | None = None) -> float:
    """``7d`` (that long ago) or an ISO date or time (``2024-06-01``) into a time."""
    try:
        return (time.time() if now is None else now) - parse_duration(text, "--since")
    except ConfigError:
        if text.strip().replace(".", "", 1).isdigit():
            raise  # a number without its unit: the error that names the units
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ConfigError(
            f"--since: cannot read {text!r}: a duration with its unit (such as 7d or 12h), or a "
            "date (such as 2024-06-01)"
        ) from None


@dataclass
class Report:
    """What an export, import or warm did."""

    operation: str
    source: str
    target: str
    total: int = 0
    transferred: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    bytes: int = 0

    total_lists: int = 0  # of ``total``, the jobs' lookup lists

    def counted(self) -> str:
        """``13 of 13 entries and 1 of 1 job lookup list``: what was moved, of what matched."""
        moved = split_keys(self.transferred)
        return count_words(*moved, of=(self.total - self.total_lists, self.total_lists))

    def as_json(self) -> dict[str, Any]:
        """Counts of entries; the jobs' lookup lists counted apart, as every command does."""
        moved, present = split_keys(self.transferred), split_keys(self.present)
        return {
            "operation": self.operation,
            "source": self.source,
            "target": self.target,
            "total": self.total - self.total_lists,
            "transferred": moved[0],
            "already_present": present[0],
            "job_lookup_lists": {
                "total": self.total_lists,
                "transferred": moved[1],
                "already_present": present[1],
            },
            "skipped": [{"key": k, "reason": r} for k, r in self.skipped],
            "bytes": self.bytes,
        }


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total: int, label: str, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.label = label
        self.done = 0
        self._last = 0.0
        self._drawn = False
        try:
            self.enabled = total > 0 and self.stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label:<10} [{bar:<30}] {self.done}/{self.total} {frac:4.0%}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


# -- reading an entry to move it, and admitting one ------------------------------------------


def read_entry(store: Store, key: str, reader: Reader) -> tuple[bytes, entry.Entry] | str:
    """The bytes under ``key`` and their decoded entry, read with ``peek`` (no hit counted, no
    access time touched, nothing backfilled, nothing repaired); or why there is none. A damaged
    or foreign entry is reported and left where it is: a command that reads a store to copy it
    never deletes from it."""
    data = peek_entry(store, key)
    if isinstance(data, str):
        return data
    try:
        return data, reader.decode(data, key)
    except CorruptEntry as exc:
        return f"corrupt (left in the source): {exc}"
    except ForeignEntry as exc:
        return f"foreign (left in the source): {exc}"


def peek_entry(store: Store, key: str) -> bytes | str:
    """The bytes under ``key`` read with ``peek``, or why there are none (a file the store
    finds damaged stays where it is)."""
    try:
        data = store.peek(key)
    except CorruptEntry as exc:
        return f"corrupt (left in the source): {exc}"
    return "removed while reading it" if data is None else data


def admit(
    target: Store,
    key: str,
    data: bytes,
    report: Report,
    *,
    reader: Reader,
    host: HostCheck | None,
) -> bool:
    """Write one entry to ``target`` if it is valid, can run here and is not there already."""
    try:
        found = reader.decode(data, key)
    except (CorruptEntry, ForeignEntry) as exc:
        report.skipped.append((key, f"rejected: {exc}"))
        return False
    reason = host.reason(found.header) if host is not None else None
    if reason:
        report.skipped.append((key, reason))
        return False
    try:
        # A damaged file raises here: it is replaced below.
        if reader.peek(target, key) is not None:
            report.present.append(key)
            return False  # a good entry is kept as it is
    except ForeignEntry as exc:  # valid for another key's holders: never overwritten
        report.skipped.append((key, f"foreign entry there left in place: {exc}"))
        return False
    except CorruptEntry:
        pass  # a damaged one is replaced by the verified one
    header = found.header
    target.put(key, data, EntryMeta(header.framework, header.name, header.compile_time_s))
    report.transferred.append(key)
    report.bytes += len(data)
    return True
