"""Why did this miss? Compare a new key's components with the nearest stored entry's.

Every entry keeps the components its framework hashed into the key (``EntryHeader.components``:
one hash per component) and readable values for the small ones (``extra["readable"]``: flags,
versions, platform, device kinds, config values). After a miss, once the compile is done, the
integration calls :func:`record_miss`: it looks for stored entries of the same function name,
picks the one with the fewest differing components, and turns the differences into plain words
(``XLA flags changed: --xla_cpu_enable_fast_math=true added``), with before and after values
where they are known. The explanation is appended to the store's history (``compilecache
explain`` lists it) and, under ``compilecache run``/``doctor``, to the run's events.

The diffing is framework-agnostic: a :class:`Vocabulary` per framework names its components and
words their changes. Only misses pay for this, after the compile: a prefix scan of the store
index and a few header reads (without counting hits or touching LRU order where the store can).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from compilecache import entry
from compilecache.entry import EntryHeader
from compilecache.errors import CorruptEntry
from compilecache.host import NO_CPU_TARGET
from compilecache.runtime import history
from compilecache.stats import function_counter
from compilecache.stores.base import EntryInfo, EntryMeta, Store

if TYPE_CHECKING:
    from compilecache.runtime.cache import Cache
    from compilecache.stores.tiers import Tiered

log = logging.getLogger("compilecache")

# Same-name entries whose headers are read to find the nearest (the newest first).
MAX_CANDIDATES = 16
# A remote level whose prefix scan takes longer than this is not scanned again in this process:
# a miss must not cost seconds because a shared store is large and cannot list by prefix cheaply.
SCAN_BUDGET_S = 0.5
# Nor one whose scans took this long in all: a remote level lists in a round trip or two, which
# a cold run of many small compiles would otherwise pay on every miss (25 ms away, a few misses'
# worth). Levels on this machine are not timed: a local listing is indexed.
TOTAL_SCAN_BUDGET_S = 0.25
NEW_FUNCTION = "new function: no earlier entry of that name"
# The same for an entry compilecache keeps for a framework (a probe's answer, a header): not a
# function of the program.
NEW_INTERNAL = "first time asked: no earlier entry of that name"

# (before, after, names of every component that changed) -> words, or "" for the default.
Describe = Callable[[str | None, str | None, frozenset[str]], str]


@dataclass(frozen=True)
class Vocabulary:
    """How one framework's key components are named and their changes worded."""

    labels: Mapping[str, str]
    describe: Mapping[str, Describe] = field(default_factory=dict)
    # Components named by a prefix (torch's ``inductor_config[cpp.simdlen]``): prefix -> describe
    # with the part after the prefix as the label.
    prefixed: Sequence[tuple[str, Callable[[str, str | None, str | None], str]]] = ()
    # Put in front of every difference's words ("torch: ").
    prefix: str = ""
    # Components listed first (the likeliest causes), the rest in name order.
    order: Sequence[str] = ()
    # Components that say "the same function" (JAX: the computation). The nearest entry is the
    # one with the fewest differing components, preferring those where these agree: an entry of
    # the same program under other flags explains more than another shape's entry.
    identity: Sequence[str] = ()
    # The key prefix that all entries of a stored key's function share (JAX: ``jax/<name>-``),
    # which narrows the scan for its nearest neighbour; None: every entry of the framework.
    function_prefix: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Difference:
    """One component that differs from the nearest entry."""

    component: str
    text: str
    before: str | None = None
    after: str | None = None


@dataclass(frozen=True)
class Explanation:
    """Why ``key`` was not found: what differs from ``nearest``, the closest same-name entry."""

    framework: str
    name: str
    key: str
    nearest: str | None
    differences: tuple[Difference, ...]
    summary: str
    candidates: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Explanation:
        diffs = tuple(
            Difference(
                component=str(d.get("component", "")),
                text=str(d.get("text", "")),
                before=None if d.get("before") is None else str(d.get("before")),
                after=None if d.get("after") is None else str(d.get("after")),
            )
            for d in data.get("differences", ()) or ()
            if isinstance(d, Mapping)
        )
        nearest = data.get("nearest")
        return cls(
            framework=str(data.get("framework", "")),
            name=str(data.get("name", "")),
            key=str(data.get("key", "")),
            nearest=None if nearest is None else str(nearest),
            differences=diffs,
            summary=str(data.get("summary", "")),
            candidates=int(data.get("candidates", 0) or 0),
        )


# -- wording helpers ---------------------------------------------------------------------------


def short(value: str | None, limit: int = 120) -> str:
    if value is None:
        return "?"
    text = value if value else "''"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def flag_changes(before: str | None, after: str | None) -> str:
    """``--a=1 --b`` vs ``--a=2 --c`` -> ``--a=1 -> --a=2, --c added, --b removed``."""

    def parse(text: str | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for flag in (text or "").split():
            out[flag.split("=", 1)[0]] = flag
        return out

    old, new = parse(before), parse(after)
    parts = [f"{old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]]
    parts += [f"{new[n]} added" for n in sorted(new.keys() - old.keys())]
    parts += [f"{old[n]} removed" for n in sorted(old.keys() - new.keys())]
    return ", ".join(parts)


def option_flags(what: str) -> Describe:
    def describe(before: str | None, after: str | None, _changed: frozenset[str]) -> str:
        changes = flag_changes(before, after) if before is not None and after is not None else ""
        return f"{what} changed: {changes}" if changes else f"{what} changed"

    return describe


def versions(label: str) -> Describe:
    def describe(before: str | None, after: str | None, _changed: frozenset[str]) -> str:
        if before is None or after is None:
            return f"{label} changed"
        return f"{label} {short(before)} -> {short(after)}"

    return describe


def changed(label: str) -> Describe:
    def describe(before: str | None, after: str | None, _changed: frozenset[str]) -> str:
        if before is None or after is None or before == after:
            return f"{label} changed"
        return f"{label} changed: {short(before)} -> {short(after)}"

    return describe


# framework -> its vocabulary, registered by the framework's own module (frameworks/<name>/words.py)
# when it is imported: the integrations import theirs, and the commands that explain stored
# entries load them all (frameworks.load_vocabularies).
_VOCABULARIES: dict[str, Vocabulary] = {}
_GENERIC = Vocabulary(labels={})


def register_vocabulary(framework: str, vocab: Vocabulary) -> Vocabulary:
    """Make ``vocab`` the words of ``framework``'s key components; returns it."""
    _VOCABULARIES[framework] = vocab
    return vocab


def vocabulary(framework: str) -> Vocabulary:
    """``framework``'s vocabulary, or one that names components as they are stored."""
    return _VOCABULARIES.get(framework, _GENERIC)


# -- diffing -----------------------------------------------------------------------------------


def count_differences(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    """How many components differ (one side missing counts as a difference)."""
    return sum(1 for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def distance(
    theirs: Mapping[str, str], ours: Mapping[str, str], identity: Sequence[str] = ()
) -> tuple[int, int]:
    """How far apart two keys' components are: (differing identity components, differing
    components). Smaller is nearer."""
    return (
        sum(1 for c in identity if theirs.get(c) != ours.get(c)),
        count_differences(theirs, ours),
    )


def diff(
    before: Mapping[str, str],
    after: Mapping[str, str],
    before_readable: Mapping[str, Any] | None = None,
    after_readable: Mapping[str, Any] | None = None,
    vocab: Vocabulary = _GENERIC,
) -> list[Difference]:
    """The components whose hashes differ, worded by ``vocab``, likeliest causes first."""
    old_values = {str(k): str(v) for k, v in (before_readable or {}).items()}
    new_values = {str(k): str(v) for k, v in (after_readable or {}).items()}
    differing = frozenset(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    rank = {name: i for i, name in enumerate(vocab.order)}
    out: list[Difference] = []
    for name in sorted(differing, key=lambda n: (rank.get(n, len(rank)), n)):
        old, new = old_values.get(name), new_values.get(name)
        text = ""
        if name not in before:
            text = f"{vocab.labels.get(name, name)} is new in the key"
        elif name not in after:
            text = f"{vocab.labels.get(name, name)} is no longer in the key"
        elif name in vocab.describe:
            text = vocab.describe[name](old, new, differing)
        else:
            for prefix, describe in vocab.prefixed:
                if name.startswith(prefix) and name.endswith("]"):
                    text = describe(name[len(prefix) : -1], old, new)
                    break
        if not text:
            text = changed(vocab.labels.get(name, name))(old, new, differing)
        out.append(Difference(name, vocab.prefix + text, old, new))
    return out


def summarize(
    name: str, differences: Sequence[Difference], nearest: str | None, *, internal: bool = False
) -> str:
    """One line: ``jit_step: XLA flags changed: --x added; compile options changed (...)``.
    ``internal``: the miss of an entry kept for a framework (a probe, a header), never called a
    new function."""
    label = name or "(unnamed)"
    if nearest is None:
        return f"{label}: {NEW_INTERNAL if internal else NEW_FUNCTION}"
    if not differences:
        return (
            f"{label}: the key differs from {nearest}, but their recorded components agree "
            "(a component the framework does not expose changed)"
        )
    return f"{label}: " + "; ".join(d.text for d in differences)


# -- finding the nearest entry -----------------------------------------------------------------

_slow_levels: set[str] = set()
_scan_time: dict[str, float] = {}  # seconds spent listing each level for explanations
_slow_lock = threading.Lock()

# Headers already read for explanations, per level object and key: a key names its
# components, so a header read once serves every later miss of that name in the process.
# Without it a run of many same-name compiles read each neighbour's file again at every miss
# (16 reads per miss). Per object, not per URL: two stores may share a URL in one process.
HEADERS_KEPT = 4096
_headers_read: weakref.WeakKeyDictionary[Store, OrderedDict[str, EntryHeader]] = (
    weakref.WeakKeyDictionary()
)
_headers_lock = threading.Lock()


def _kept_headers(level: Store) -> OrderedDict[str, EntryHeader]:
    with _headers_lock:
        try:
            kept = _headers_read.get(level)
            if kept is None:
                kept = _headers_read[level] = OrderedDict()
        except TypeError:  # a store that cannot be weakly referenced or hashed: read each time
            kept = OrderedDict()
        return kept


# Listings kept for the misses a run records (per level object, then prefix): when listed, and
# what. A listing is read from the level at most every LISTING_KEPT_S seconds; the entries this
# process stores in between are added to it as their misses are recorded, so a cold run's
# misses are compared with its own earlier compiles without listing the index again at each
# one (the listing grew with every entry and was most of a miss's background work). Entries
# other processes write meanwhile are seen at the next listing.
LISTING_KEPT_S = 30.0
# A longer listing is not kept (its memory, for a process that may miss rarely): listed again.
LISTING_KEPT_MAX = 20_000
_listings: weakref.WeakKeyDictionary[Store, dict[str, tuple[float, list[EntryInfo]]]] = (
    weakref.WeakKeyDictionary()
)
_listings_lock = threading.Lock()


def _kept_listing(level: Store, prefix: str) -> list[EntryInfo] | None:
    """A copy of the listing of ``prefix`` kept for ``level``, if it is recent enough."""
    with _listings_lock:
        try:
            kept = _listings.get(level, {}).get(prefix)
        except TypeError:  # a store that cannot be weakly referenced or hashed
            return None
        if kept is None or time.monotonic() - kept[0] > LISTING_KEPT_S:
            return None
        return list(kept[1])


def _keep_listing(level: Store, prefix: str, infos: list[EntryInfo]) -> None:
    with _listings_lock, contextlib.suppress(TypeError):
        _listings.setdefault(level, {})[prefix] = (time.monotonic(), list(infos))


def _listed_now(store: Tiered, prefix: str, stored: EntryInfo, header: EntryHeader) -> None:
    """``stored``, an entry this process just wrote, joins the kept listings of ``prefix``,
    and what explanations read of its header (``header``: its name, components and readable
    values) joins the kept headers, so that no later miss reads the file this process wrote
    (a read of a whole entry per miss of a cold run of same-name functions). A level whose
    write failed is compared with it until the level is listed again."""
    added: list[Store] = []
    with _listings_lock:
        for level in store.levels:
            with contextlib.suppress(TypeError):
                kept = _listings.get(level, {}).get(prefix)
                if kept is not None and all(i.key != stored.key for i in kept[1]):
                    kept[1].append(stored)
                    added.append(level)
    for level in added:
        headers = _kept_headers(level)
        with _headers_lock:
            headers[stored.key] = header
            while len(headers) > HEADERS_KEPT:
                headers.popitem(last=False)


def _unlisted(level: Store, key: str) -> None:
    """``key`` is not on ``level`` after all: out of its kept listings."""
    with _listings_lock, contextlib.suppress(TypeError):
        kept = _listings.get(level, {})
        for prefix, (when, infos) in list(kept.items()):
            kept[prefix] = (when, [i for i in infos if i.key != key])


def _same_name(
    level: Store, prefix: str, name: str, key: str, *, keep: bool = False
) -> list[EntryInfo]:
    """The entries of ``level`` under ``prefix`` named ``name``, but ``key``. ``keep``: a
    listing kept from an earlier call may answer (see :data:`LISTING_KEPT_S`)."""
    if level.url in _slow_levels:
        return []
    listing = _kept_listing(level, prefix) if keep else None
    if listing is not None:
        return [i for i in listing if i.key != key and (not name or i.name == name)]
    start = time.monotonic()
    try:
        listing = list(level.scan(prefix))
    except Exception as exc:
        log.debug("compilecache: cannot list %s for an explanation: %s", level.url, exc)
        return []
    if keep and len(listing) <= LISTING_KEPT_MAX:
        _keep_listing(level, prefix, listing)
    infos = [i for i in listing if i.key != key and (not name or i.name == name)]
    elapsed = time.monotonic() - start
    if level.health is None:
        # This machine's own disk or memory: an indexed listing, slow only while the machine is
        # busy; only a level across the network is given up on.
        return infos
    with _slow_lock:
        spent = _scan_time[level.url] = _scan_time.get(level.url, 0.0) + elapsed
        slow = elapsed > SCAN_BUDGET_S or spent > TOTAL_SCAN_BUDGET_S
        if slow:
            _slow_levels.add(level.url)
    if slow:
        log.debug("compilecache: %s lists slowly; misses there are no longer explained", level.url)
    return infos


def _headers(level: Store, infos: Sequence[EntryInfo]) -> Iterator[EntryHeader]:
    kept = _kept_headers(level)
    for info in sorted(infos, key=lambda i: -i.created)[:MAX_CANDIDATES]:
        with _headers_lock:
            header = kept.get(info.key)
        if header is not None:
            yield header
            continue
        try:
            # peek: reading a neighbour to explain a miss counts no hit and touches nothing.
            data = level.peek(info.key)
            if data is None:
                _unlisted(level, info.key)
                continue
            header = entry.read_header(data)
        except Exception as exc:  # a damaged or vanished candidate is skipped
            log.debug("compilecache: cannot read %s for an explanation: %s", info.key, exc)
            continue
        with _headers_lock:
            kept[info.key] = header
            while len(kept) > HEADERS_KEPT:
                kept.popitem(last=False)
        yield header


def nearest_entry(
    store: Tiered,
    *,
    prefix: str,
    name: str,
    key: str,
    components: Mapping[str, str],
    identity: Sequence[str] = (),
    keep: bool = False,
) -> tuple[EntryHeader | None, int]:
    """The stored same-name entry (other than ``key``) with the fewest differing components
    (those agreeing on the ``identity`` components first), the newest on ties; and how many
    same-name entries were seen. The first level holding any same-name entry is searched
    (normally the local disk). A level that can only list by reading every object (an object
    store) is never listed: one explanation would cost a request per stored entry. ``keep``:
    listings are kept between calls (:data:`LISTING_KEPT_S`)."""
    for level in store.levels:
        if not level.scans_cheaply:
            continue
        infos = _same_name(level, prefix, name, key, keep=keep)
        if not infos:
            continue
        best: EntryHeader | None = None
        best_score = (0, 0, 0)
        for header in _headers(level, infos):
            if header.key == key or (name and header.name != name):
                continue
            score = (
                0 if header.components else 1,
                *distance(header.components, components, identity),
            )
            if best is None or score < best_score:
                best, best_score = header, score
        return best, len(infos)
    return None, 0


def explain(
    store: Tiered,
    *,
    framework: str,
    name: str,
    key: str,
    components: Mapping[str, str],
    readable: Mapping[str, Any] | None = None,
    prefix: str | None = None,
    keep: bool = False,
    internal: bool = False,
) -> Explanation:
    """Explain why ``key`` missed, against the entries ``store`` holds now (``keep``: or held
    at its last listing, with this process's own writes since; see :data:`LISTING_KEPT_S`).
    ``internal``: ``key`` is an entry kept for a framework (a probe's answer), not a function.

    ``prefix`` narrows the scan (JAX keys start with ``jax/<name>-``); by default every key of
    ``framework`` is scanned and filtered by name.
    """
    nearest, seen = nearest_entry(
        store,
        prefix=_scan_prefix(framework, prefix),
        name=name,
        key=key,
        components=components,
        identity=vocabulary(framework).identity,
        keep=keep,
    )
    if nearest is None:
        summary = summarize(name, (), None, internal=internal)
        return Explanation(framework, name, key, None, (), summary, seen)
    if not nearest.components or not components:
        summary = (
            f"{name or '(unnamed)'}: an earlier entry of that name ({nearest.key}) differs, "
            "but the key components were not recorded for both"
        )
        return Explanation(framework, name, key, nearest.key, (), summary, seen)
    differences = diff(
        nearest.components,
        components,
        _readable(nearest),
        readable,
        vocabulary(framework),
    )
    return Explanation(
        framework,
        name,
        key,
        nearest.key,
        tuple(differences),
        summarize(name, differences, nearest.key),
        seen,
    )


def _scan_prefix(framework: str, prefix: str | None) -> str:
    return prefix if prefix is not None else f"{framework}/"


def _readable(header: EntryHeader) -> dict[str, Any]:
    readable = header.extra.get("readable")
    return dict(readable) if isinstance(readable, Mapping) else {}


def explain_stored(store: Tiered, key: str) -> Explanation | None:
    """How the stored entry ``key`` differs from its nearest same-name neighbour (for
    ``compilecache explain KEY`` when no miss of it was recorded)."""
    try:
        data = store.peek(key)
    except CorruptEntry:
        return None
    if data is None:
        return None
    header = entry.read_header(data)
    function_prefix = vocabulary(header.framework).function_prefix
    prefix = function_prefix(key) if function_prefix is not None else None
    return explain(
        store,
        framework=header.framework,
        name=header.name,
        key=key,
        components=header.components,
        readable=_readable(header),
        prefix=prefix,
        internal=bool(header.extra.get(entry.INTERNAL)),
    )


# -- recording ---------------------------------------------------------------------------------


def record_miss(
    cache: Cache,
    *,
    framework: str,
    name: str,
    key: str,
    components: Mapping[str, str],
    readable: Mapping[str, Any] | None = None,
    prefix: str | None = None,
    compile_time_s: float = 0.0,
    stored: bool = True,
    reason: str = "",
    background: bool = False,
    internal: bool = False,
    why: str = "",
    counted: bool = True,
) -> Explanation | None:
    """After a miss's compile: count it for its function, explain it, and remember it in the
    store's history and the run's events. ``background``: explain and remember it on the cache's
    background thread (the integrations do, so that listing a remote level never holds up the
    program) and return ``None``. ``internal``: an entry compilecache keeps for a framework
    (a kernel binary, a probe's answer), not a function of the program: not counted per
    function, and grouped apart by ``explain``. ``why``: the integration knows the cause (its
    own entry was there and could not be used here), said instead of a nearest entry's
    differences. ``counted=False``: not a compile (a JAX trace traced again), so not counted among
    the function's misses. Never raises."""
    try:
        if not internal and counted:
            cache.stats.add(function_counter(framework, name, "misses"))
            cache.stats.add(function_counter(framework, name, "compile_time_s"), compile_time_s)
    except Exception as exc:
        log.debug("compilecache: could not count a miss: %s", exc)

    def remember() -> Explanation | None:
        try:
            damaged = cache.damaged.get(key)
            unrunnable = cache.unrunnable.get(key)
            if why:
                explanation = Explanation(framework, name, key, None, (), f"{name}: {why}")
            elif cache.is_foreign(key):
                kept = (
                    "compiled and kept in this host's own level"
                    if stored
                    else "compiled; the entry is left in place"
                )
                summary = (
                    f"{name or '(unnamed)'}: the stored entry is signed with a key this process "
                    f"does not trust (COMPILECACHE_TRUSTED_KEYS); {kept}"
                )
                explanation = Explanation(framework, name, key, None, (), summary)
            elif unrunnable == NO_CPU_TARGET:
                summary = f"{name or '(unnamed)'}: the stored entry {unrunnable}; replaced"
                explanation = Explanation(framework, name, key, None, (), summary)
            elif unrunnable is not None:
                # The key's entry is there, built for another kind of host: that is why.
                summary = (
                    f"{name or '(unnamed)'}: the stored entry cannot run on this host "
                    f"({unrunnable}); left in the store for the hosts that can, and compiled "
                    "for this one"
                )
                explanation = Explanation(framework, name, key, None, (), summary)
            elif damaged is not None:
                # Its own entry was there but unusable: that is why, not another entry's flags.
                summary = (
                    f"{name or '(unnamed)'}: the stored entry was damaged ({damaged}) and "
                    "removed; compiled again"
                )
                explanation = Explanation(framework, name, key, None, (), summary)
            else:
                explanation = explain(
                    cache.store,
                    framework=framework,
                    name=name,
                    key=key,
                    components=components,
                    readable=readable,
                    prefix=prefix,
                    keep=True,
                    internal=internal,
                )
            if stored:
                now = time.time()
                written = EntryInfo(key, 0, now, now, meta=EntryMeta(framework, name))
                header = EntryHeader(
                    framework,
                    key,
                    name,
                    created=now,
                    components=dict(components),
                    extra={"readable": dict(readable or {})},
                )
                _listed_now(cache.store, _scan_prefix(framework, prefix), written, header)
            record: dict[str, Any] = {
                **history.origin(cache.run_id),
                **explanation.to_json(),
                "compile_time_s": compile_time_s,
                "stored": stored,
                "reason": reason,
            }
            if internal:
                record[entry.INTERNAL] = True
            if unrunnable is not None:
                record["unrunnable"] = unrunnable
            history.append(cache.store, history.MISS, record)
            if cache.events is not None:
                cache.add_event(
                    {
                        "event": "miss",
                        **record,
                        "components": dict(components),
                        "readable": {str(k): str(v) for k, v in (readable or {}).items()},
                    }
                )
            log.debug("compilecache: miss explained: %s", explanation.summary)
            return explanation
        except Exception as exc:  # explanations are a convenience: never fail a compile
            with contextlib.suppress(Exception):
                cache.warn_once("explain", f"could not explain a miss: {exc}")
            return None

    if background:
        cache.background.add(remember)
        return None
    return remember()


def record_setting(cache: Cache, *, framework: str, reason: str) -> None:
    """A framework setting of the program's changed what compilecache does in this process
    (``reason`` says which setting and what it changed: a cache switched off, a directory served
    from the store): remembered beside the misses, so that ``explain`` says why nothing hit, and
    in the run's events (``run``'s summary and ``doctor`` report it). Never raises."""
    record: dict[str, Any] = {
        **history.origin(cache.run_id),
        "framework": framework,
        "name": "",
        "key": "",
        "nearest": None,
        "differences": [],
        "summary": f"{framework}: {reason}",
        "setting": reason,
        "stored": True,
    }
    with contextlib.suppress(Exception):
        cache.stats.add(f"{framework}.settings")
        cache.add_event({"event": "setting", **record})

    def remember() -> None:
        history.append(cache.store, history.MISS, record)

    cache.background.add(remember)


class SettingNotes:
    """:func:`record_setting` once per process and reason (a reason is read at every compile)."""

    def __init__(self, cache: Cache, framework: str) -> None:
        self.cache = cache
        self.framework = framework
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def note(self, reason: str) -> None:
        if not reason or reason in self._said:
            return
        with self._lock:
            if reason in self._said:
                return
            self._said.add(reason)
        record_setting(self.cache, framework=self.framework, reason=reason)


# One line per miss: longer explanations are cut.
MAX_LINE = 300


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line (runs of whitespace, newlines included, become one space), cut to
    ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe_record(record: Mapping[str, Any]) -> str:
    """One line for a history record: the explanation, and why it was not stored."""
    summary = one_line(str(record.get("summary") or f"{record.get('name', '?')}: (no explanation)"))
    if record.get("stored") is False:
        summary += f" [not stored: {one_line(str(record.get('reason') or 'unknown reason'), 120)}]"
    return summary
