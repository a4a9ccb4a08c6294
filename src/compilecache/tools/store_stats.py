"""The statistics report: one frozen, typed record of a store's counters and contents.

``stats`` (text, ``--json``, ``--prometheus``) and ``report --html`` all show this record, so they
cannot disagree. It is built from two questions every store answers: ``read_stats()`` (the
persistent counters; ``{}`` where none are kept) and ``scan()`` (entry metadata, no payloads).
Entries are compiled entries: the jobs' lookup lists kept beside them for prefetching
(:mod:`compilecache.runtime.manifest`) are counted apart, as every command counts them.

Why a module of its own: :mod:`compilecache.stats` is ground level (``stores.tiered`` imports it
to name level counters), while this record reads a store, so it sits just above the stores and
below both :mod:`compilecache.cli` and :mod:`compilecache.tools.report`, which used to import each other
for it. It is generic over :data:`compilecache.stats.COUNTERS`: a counter added there appears in
``stats --json`` and in the Prometheus output without a change here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from compilecache import entry, stats
from compilecache.errors import CorruptEntry
from compilecache.frameworks import is_internal
from compilecache.redaction import redact
from compilecache.runtime import history
from compilecache.runtime.transfer import is_job_list, split_keys
from compilecache.stores.base import EntryInfo, Store


def _frozen(nested: Mapping[str, Mapping[str, float]]) -> Mapping[str, Mapping[str, float]]:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in nested.items()})


@dataclass(frozen=True)
class FunctionStats:
    """One function's persistent counters and the entries it has in the store now."""

    framework: str
    name: str
    hits: int = 0
    misses: int = 0
    writes: int = 0
    compile_time_s: float = 0.0
    compile_time_saved_s: float = 0.0
    entries: int = 0
    size_bytes: int = 0

    @property
    def label(self) -> str:
        """``jax/jit_step``: the function's key in :attr:`StatsReport.functions`."""
        return f"{self.framework}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StatsReport:
    """What ``stats`` shows: every total of ``COUNTERS``, plus per framework, function and level.

    ``counters`` holds every name of :data:`~compilecache.stats.COUNTERS` (zero when never
    counted); the headline numbers are typed properties over it. ``frameworks`` maps a framework
    to its counters plus ``entries`` and ``size_bytes`` of its stored entries; ``functions`` maps
    ``framework/name`` to a :class:`FunctionStats`; ``levels`` maps a level URL to its counters.
    The mappings are read-only views.
    """

    url: str
    counters: Mapping[str, float]
    entries: int
    size_bytes: int
    frameworks: Mapping[str, Mapping[str, float]]
    functions: Mapping[str, FunctionStats]
    levels: Mapping[str, Mapping[str, float]]
    # framework -> (entries, bytes) of the entries compilecache keeps for it (kernels, probe
    # answers: frameworks.INTERNAL_PREFIXES), counted in the totals but not listed per function.
    internal: Mapping[str, tuple[int, int]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    # What the programs' own framework settings changed (a cache switched off, a threshold, a
    # directory served from the store), newest first, each once: why a count may be low.
    settings: tuple[str, ...] = ()
    # The compile time the stored entries hold (what their compiles took), from the entries
    # themselves: the same on every level, whoever counted what.
    stored_compile_time_s: float = 0.0
    # The jobs' lookup lists kept beside the entries for prefetching: counted apart, never as
    # entries (every command counts them so).
    job_lookup_lists: int = 0
    # Who signed the newest entries (at most SIGNERS_LOOKED_AT of them), as each entry says:
    # ``ed25519:...``, ``hmac`` or ``""`` (unsigned), with counts. What the store holds, whatever
    # this process would sign or accept.
    signers: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, store: Store) -> StatsReport:
        """The report of ``store``: its persistent counters, a scan of its entries and the
        settings its history recorded."""
        counters = store.counters.read() if store.counters is not None else {}
        infos = list(store.scan())
        report = cls.build(store.url, counters, infos)
        return dataclasses.replace(
            report, settings=program_settings(store), signers=signers_of(store, infos)
        )

    @classmethod
    def build(
        cls, url: str, counters: Mapping[str, float], infos: Iterable[EntryInfo]
    ) -> StatsReport:
        """The report of a flat counter mapping (see :mod:`compilecache.stats`) and entries."""
        totals, per_framework, per_function, levels = stats.split_counters(counters)
        frameworks = {fw: dict(values) for fw, values in per_framework.items()}
        stored: dict[tuple[str, str], tuple[int, int]] = {}  # (framework, name) -> entries, bytes
        internal: dict[str, tuple[int, int]] = {}
        entries = size = lists = 0
        stored_time = 0.0
        for info in infos:
            if is_job_list(info.key):
                # kept beside the entries: not a compiled entry (a pack is part of its list)
                lists += split_keys([info.key])[1]
                continue
            if is_internal(info.key):
                fw_name = info.framework or "other"
                n, b = internal.get(fw_name, (0, 0))
                internal[fw_name] = (n + 1, b + info.size)
            entries += 1
            size += info.size
            stored_time += info.compile_time_s
            fw = frameworks.setdefault(info.framework or "other", {})
            # Integers on purpose: the JSON has always shown entry counts and sizes as such.
            fw["entries"] = int(fw.get("entries", 0)) + 1
            fw["size_bytes"] = int(fw.get("size_bytes", 0)) + info.size
            n, b = stored.get((info.framework, info.name), (0, 0))
            stored[(info.framework, info.name)] = (n + 1, b + info.size)
        functions = {}
        for (framework, name), values in per_function.items():
            n, b = stored.get((framework, name), (0, 0))
            function = FunctionStats(
                framework,
                name,
                hits=int(values.get("hits", 0)),
                misses=int(values.get("misses", 0)),
                writes=int(values.get("writes", 0)),
                compile_time_s=values.get("compile_time_s", 0.0),
                compile_time_saved_s=max(0.0, values.get("compile_time_saved_s", 0.0)),
                entries=n,
                size_bytes=b,
            )
            functions[function.label] = function
        return cls(
            url=redact(url),
            # Read at call time: the record follows the tuple, whoever extends it.
            counters=MappingProxyType({name: totals.get(name, 0.0) for name in stats.COUNTERS}),
            entries=entries,
            size_bytes=size,
            frameworks=_frozen(frameworks),
            functions=MappingProxyType(functions),
            levels=_frozen(levels),
            internal=MappingProxyType(internal),
            stored_compile_time_s=stored_time,
            job_lookup_lists=lists,
        )

    # -- the headline numbers -----------------------------------------------------------------

    def count(self, name: str) -> int:
        """An event counter as an integer (0 when never counted)."""
        return int(self.counters.get(name, 0.0))

    @property
    def hits(self) -> int:
        return self.count("hits")

    @property
    def misses(self) -> int:
        return self.count("misses")

    @property
    def writes(self) -> int:
        return self.count("writes")

    @property
    def errors(self) -> int:
        return self.count("errors")

    @property
    def corrupt(self) -> int:
        return self.count("corrupt")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def compile_time_s(self) -> float:
        """Compile time of the compiles that missed and were timed."""
        return float(self.counters.get("compile_time_s", 0.0))

    @property
    def compile_time_saved_s(self) -> float:
        """Compile time the hits did not spend (never negative)."""
        return max(0.0, float(self.counters.get("compile_time_saved_s", 0.0)))

    @property
    def hit_rate(self) -> float:
        """Hits / (hits + misses); 0 before any lookup (:attr:`lookups` says whether any)."""
        lookups = self.lookups
        return self.hits / lookups if lookups else 0.0

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    def to_json(self) -> dict[str, Any]:
        """What ``stats --json`` prints: the totals of ``COUNTERS``, then ``entries``,
        ``size_bytes``, ``url``, ``frameworks``, ``functions``, ``levels`` and ``hit_rate``.
        Every count (events, entries, bytes) is an integer, at every depth; seconds are
        floats (their names end in ``_s``)."""
        data: dict[str, Any] = stats.typed(self.counters)
        data["entries"] = self.entries
        data["size_bytes"] = self.size_bytes
        data["job_lookup_lists"] = self.job_lookup_lists
        data["url"] = self.url
        data["frameworks"] = {fw: stats.typed(values) for fw, values in self.frameworks.items()}
        data["stored_compile_time_s"] = self.stored_compile_time_s
        data["functions"] = {label: fn.to_json() for label, fn in self.functions.items()}
        data["levels"] = {redact(url): stats.typed(values) for url, values in self.levels.items()}
        data["internal"] = {
            fw: {"entries": n, "size_bytes": b} for fw, (n, b) in self.internal.items()
        }
        # None before any lookup: no rate, rather than a rate of 0.
        data["hit_rate"] = self.hit_rate if self.lookups else None
        data["settings"] = list(self.settings)
        data["signers"] = {signer or "unsigned": n for signer, n in self.signers.items()}
        return data

    def signers_line(self) -> str:
        """What the entries looked at say of their signatures, in words: ``the 20 newest of 40
        entries: all signed by ed25519:...``."""
        looked_at = sum(self.signers.values())
        if not looked_at:
            return "no entries"
        head = (
            f"the {looked_at} newest of {self.entries} entries"
            if looked_at < self.entries
            else (f"all {looked_at} entries" if looked_at > 1 else "its one entry")
        )
        parts = []
        for signer, n in sorted(self.signers.items(), key=lambda kv: -kv[1]):
            words = (
                "unsigned"
                if not signer
                else signer
                if signer == "damaged"
                else (f"signed by {signer}")
            )
            parts.append(words if n == looked_at else f"{n} {words}")
        return f"{head} {parts[0]}" if len(parts) == 1 else f"{head}: {', '.join(parts)}"


# How many entries ``stats`` reads to say who signed the store's entries (the newest ones: the
# whole store could be gigabytes on a remote level).
SIGNERS_LOOKED_AT = 20


def signers_of(store: Store, infos: Iterable[EntryInfo]) -> Mapping[str, int]:
    """Who signed the newest entries of ``infos`` (at most :data:`SIGNERS_LOOKED_AT`), read
    with ``peek``: counted by signer (``""``: unsigned; ``damaged``: unreadable)."""
    newest = sorted((i for i in infos if not is_job_list(i.key)), key=lambda i: -i.created)[
        :SIGNERS_LOOKED_AT
    ]
    signers: dict[str, int] = {}
    for info in newest:
        try:
            data = store.peek(info.key)
            if data is None:
                continue  # removed since the scan
            signer = entry.claimed_signer(data)
        except CorruptEntry:
            signer = "damaged"
        signers[signer] = signers.get(signer, 0) + 1
    return MappingProxyType(signers)


# How many distinct program settings ``stats`` lists.
MAX_SETTINGS = 10


def program_settings(store: Store) -> tuple[str, ...]:
    """The distinct settings of programs that changed what compilecache did, newest first, as
    their runs recorded them beside the misses (``framework: reason``)."""
    said: dict[str, None] = {}
    for record in history.read(store, history.MISS):
        summary = record.get("summary")
        if record.get("setting") and isinstance(summary, str):
            said.setdefault(summary)
            if len(said) == MAX_SETTINGS:
                break
    return tuple(said)
