"""Fail-open as a wrapper: a store that is down, slow or failing costs its timeout once.

:class:`Guarded` sits around a remote level (Redis, an object store, a shared mount). The first
failure of a call is re-raised as :class:`~compilecache.errors.StoreUnavailable` (the cache layer
counts it as an error and a miss, and warns once); the level is then *skipped* for a back-off
period, without touching the network: a read (``get``, ``stat``) is a plain miss, a write or a
listing fails at once with :class:`LevelSkipped` (a write that did not happen is not hidden).
When the period is over, the next call is a probe: success brings the level back, another failure
doubles the period (up to ``max_backoff``). So an outage costs one error and one warning per
probe, not one per lookup; the guard counts the skipped calls.

Timeouts themselves come from the backend's client (Redis socket timeouts, botocore's connect and
read timeouts), which bound a single network operation without bounding a large transfer. For
backends without reliable timeouts (a hard NFS mount that hangs, an fsspec protocol without
timeouts) ``deadline`` runs each call on a daemon thread and gives up waiting after that many
seconds; the stuck call is abandoned, never joined, so it cannot hold up the program's exit.

Policy errors are not outages: :class:`~compilecache.errors.ReadOnlyStore`,
:class:`~compilecache.errors.CorruptEntry` and :class:`~compilecache.errors.ConfigError` pass
through without starting a back-off.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from compilecache.errors import (
    ConfigError,
    CorruptEntry,
    LevelSkipped,
    ReadOnlyStore,
    StoreUnavailable,
    failure_text,
)
from compilecache.stores.base import (
    EntryInfo,
    EntryMeta,
    Store,
    StoreURL,
    StoreWrapper,
    flag,
    is_local,
)
from compilecache.stores.capabilities import Counters, Found, Health, History, Leases
from compilecache.units import parse_seconds

log = logging.getLogger("compilecache")

T = TypeVar("T")

DEFAULT_BACKOFF = 30.0
DEFAULT_MAX_BACKOFF = 300.0

_PASS_THROUGH = (ReadOnlyStore, CorruptEntry, ConfigError)
_warned: set[str] = set()
_warned_lock = threading.Lock()


class DeadlineExceeded(StoreUnavailable):
    """A call did not finish within the guard's deadline."""


def _warn_once(url: str, message: str) -> None:
    """One warning per store URL and process; later ones go to the debug log."""
    with _warned_lock:
        first = url not in _warned
        _warned.add(url)
    log.log(logging.WARNING if first else logging.DEBUG, "compilecache: %s", message)


class Guard(Health):
    """The back-off state of one level, and :meth:`call`, which runs a call under it."""

    def __init__(
        self,
        url: str,
        *,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        command: bool = False,
        alone: bool = False,
    ) -> None:
        if backoff < 0 or max_backoff < backoff:
            raise ConfigError(f"backoff must be 0 <= backoff <= max_backoff, got {backoff}")
        if deadline is not None and deadline <= 0:
            raise ConfigError(f"deadline must be positive, got {deadline}")
        self.url = url
        # For a one-shot command (stats, ls): no "retrying later" in its warnings.
        self.command = command
        # A command's only level: its failure is the command's error, said once by the command,
        # so the guard does not say it too ("left out of this command" would not be true).
        self.alone = alone
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.deadline = deadline
        self._clock = clock
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._consecutive = 0
        self._last_error = ""
        self._counters: dict[str, float] = {
            "errors": 0,
            "timeouts": 0,
            "skipped": 0,
            "outages": 0,
            "recoveries": 0,
        }

    @property
    def down(self) -> bool:
        """Whether calls are being skipped right now."""
        return self._clock() < self._down_until

    def available(self) -> bool:
        return not self.down

    def stats(self) -> dict[str, float]:
        """Counters of this guard, and ``down`` (1.0 while in back-off)."""
        with self._lock:
            out = dict(self._counters)
        out["down"] = 1.0 if self.down else 0.0
        return out

    def call(
        self, what: str, fn: Callable[..., T], *args: Any, miss: Callable[[], T] | None = None
    ) -> T:
        """``fn(*args)`` under the guard; during a back-off ``miss()`` (reads) or LevelSkipped."""
        now = self._clock()
        if now < self._down_until:
            with self._lock:
                self._counters["skipped"] += 1
            if miss is not None:
                return miss()
            raise LevelSkipped(
                f"{self.url} skipped for {self._down_until - now:.0f}s more after: "
                f"{self._last_error}"
            )
        try:
            result = fn(*args) if self.deadline is None else self._with_deadline(fn, *args)
        except _PASS_THROUGH:
            self._succeeded()
            raise
        except Exception as exc:
            raise self._failed(what, exc) from exc
        self._succeeded()
        return result

    def _with_deadline(self, fn: Callable[..., T], *args: Any) -> T:
        box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

        def run() -> None:
            try:
                box.put((True, fn(*args)))
            except BaseException as exc:
                box.put((False, exc))

        # A daemon thread per call: a hung call is abandoned, and cannot block the exit.
        threading.Thread(target=run, name="compilecache-guard", daemon=True).start()
        try:
            ok, value = box.get(timeout=self.deadline)
        except queue.Empty:
            raise DeadlineExceeded(f"no answer within {self.deadline}s") from None
        if ok:
            result: T = value
            return result
        raise value

    def _succeeded(self) -> None:
        if self._consecutive:
            with self._lock:
                if self._consecutive:
                    self._consecutive = 0
                    self._counters["recoveries"] += 1
                    log.info("compilecache: %s is back", self.url)

    def _failed(self, what: str, exc: Exception) -> StoreUnavailable:
        timed_out = _is_timeout(exc)
        text = failure_text(self.url, what, exc)
        with self._lock:
            self._consecutive += 1
            period = min(self.backoff * 2 ** (self._consecutive - 1), self.max_backoff)
            self._down_until = self._clock() + period
            # The cause in one phrase ("get failed: ConnectionError: ..."), the URL named once by
            # whoever quotes it.
            self._last_error = text.removeprefix(f"{self.url}: ")
            self._counters["errors"] += 1
            self._counters["timeouts"] += 1 if timed_out else 0
            self._counters["outages"] += 1 if self._consecutive == 1 else 0
        if self.command and self.alone:
            return exc if isinstance(exc, StoreUnavailable) else StoreUnavailable(text)
        then = (
            "left out of this command"
            if self.command
            else f"skipping it for {period:.0f}s, then retrying"
        )
        _warn_once(self.url, f"{text}; {then}")
        failure = exc if isinstance(exc, StoreUnavailable) else StoreUnavailable(text)
        failure.reported = True  # warned above (or before, for this URL): not again upstream
        return failure


class Guarded(StoreWrapper):
    """Wrap ``inner`` so that failures turn into a bounded, backed-off cost.

    Every call that may reach the network goes through one :class:`Guard`: the byte operations
    here, and every method of the inner store's capability objects (counters, history, leases),
    each object wrapped once by :func:`guarded`. ``health`` is the guard.
    """

    def __init__(
        self,
        inner: Store,
        *,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        command: bool = False,
        alone: bool = False,
    ) -> None:
        super().__init__(inner)
        self.guard = Guard(
            inner.url,
            backoff=backoff,
            max_backoff=max_backoff,
            deadline=deadline,
            clock=clock,
            command=command,
            alone=alone,
        )
        self.health = self.guard
        self.counters = _under(inner.counters, self.guard)
        # A level in back-off keeps no history: nothing written, nothing read (an explanation
        # per miss would otherwise wait for a timeout).
        self.history = _under(inner.history, self.guard, misses={"add": _none, "read": list})
        # A level in back-off cannot coordinate: a claim fails at once (LevelSkipped), and the
        # single-flight layer compiles without a lease; a folded read is a miss.
        self.leases = _under(inner.leases, self.guard, misses={"get_or_claim": _no_read})

    # -- the Store protocol --------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        return self.guard.call("get", self.inner.get, key, miss=_none)

    def peek(self, key: str) -> bytes | None:
        return self.guard.call("get", self.inner.peek, key, miss=_none)

    def head(self, key: str, size: int) -> bytes | None:
        return self.guard.call("get", self.inner.head, key, size, miss=_none)

    def get_with_meta(self, key: str) -> Found | None:
        return self.guard.call("get", self.inner.get_with_meta, key, miss=_none)

    def get_many(self, keys: Sequence[str]) -> dict[str, Found]:
        return self.guard.call("get", self.inner.get_many, keys, miss=dict)

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self.guard.call("put", self.inner.put, key, value, meta)

    def put_new(self, key: str, value: bytes, meta: EntryMeta | None = None) -> bool:
        return self.guard.call("put", self.inner.put_new, key, value, meta)

    def delete(self, key: str) -> bool:
        return self.guard.call("delete", self.inner.delete, key)

    def stat(self, key: str) -> EntryInfo | None:
        return self.guard.call("stat", self.inner.stat, key, miss=_none)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        # Listing is for the CLI (ls, prune, stats): materialise it under the guard so that a
        # failure surfaces here, once, rather than halfway through the caller's loop.
        return iter(self.guard.call("scan", lambda p: list(self.inner.scan(p)), prefix))

    def close(self) -> None:
        try:
            self.inner.close()
        except Exception as exc:
            log.debug("compilecache: closing %s failed: %s", self.url, exc)


C = TypeVar("C")


class _GuardedCapability:
    """A capability object whose every public method runs under a :class:`Guard`."""

    def __init__(
        self, inner: object, guard: Guard, kind: str, misses: Mapping[str, Callable[[], Any]]
    ) -> None:
        self._inner = inner
        self._guard = guard
        self._kind = kind
        self._misses = misses

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if name.startswith("_") or not callable(method):
            return method
        what = f"{self._kind.lower()}.{name}"  # in errors: "s3://b/k: leases.acquire failed"
        miss = self._misses.get(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._guard.call(what, lambda: method(*args, **kwargs), miss=miss)

        return call


def _under(
    capability: C | None, guard: Guard, *, misses: Mapping[str, Callable[[], Any]] | None = None
) -> C | None:
    """``capability`` with every method run under ``guard`` (``None`` stays ``None``).
    ``misses``: what a method answers during a back-off instead of raising LevelSkipped."""
    if capability is None:
        return None
    kind = next(
        (c.__name__ for c in type(capability).__mro__ if c in (Counters, History, Leases)), ""
    )
    # The proxy answers every method the capability has, so it stands for its type.
    return cast(C, _GuardedCapability(capability, guard, kind, misses or {}))


def _none() -> None:
    return None


def _no_read() -> tuple[None, None]:
    return None, None


def _is_timeout(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from is a timeout (of any library)."""
    depth = 0
    while exc is not None and depth < 8:
        if isinstance(exc, (TimeoutError, DeadlineExceeded)) or "timeout" in (
            type(exc).__name__.lower()
        ):
            return True
        exc, depth = exc.__cause__ or exc.__context__, depth + 1
    return False


def for_level(store: Store, url: StoreURL, *, command: bool = False, alone: bool = False) -> Store:
    """``store`` wrapped in :class:`Guarded` unless it lives on this machine.

    URL options: ``backoff`` (seconds, default 30), ``max_backoff`` (default 300), ``deadline``
    (seconds; a hard limit per call, for backends without their own timeouts), ``guard=0`` to opt
    out. A local directory is guarded too when it is a shared mount (``?shared=1``).
    """
    params = url.params
    if is_local(url) or not flag(params, "guard", default=True):
        return store
    backoff = parse_seconds(params, "backoff", DEFAULT_BACKOFF)
    return Guarded(
        store,
        backoff=backoff,
        max_backoff=max(backoff, parse_seconds(params, "max_backoff", DEFAULT_MAX_BACKOFF)),
        deadline=parse_seconds(params, "deadline", None),
        command=command,
        alone=alone,
    )
