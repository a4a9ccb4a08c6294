"""``enable()`` / ``disable()``: one active session per process.

A session owns the configured store, the integrity-checking :class:`Cache`, this process's
counters and the installed framework hooks. The hooks themselves are process-global (JAX and torch
keep module-level caches), so the active session is too; ``enable`` is idempotent and a call with
a different configuration replaces the old session cleanly.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from compilecache import config as config_mod
from compilecache import frameworks
from compilecache import signing as signing_mod
from compilecache.config import Config, WritePlan
from compilecache.errors import CompileCacheError, StoreUnavailable
from compilecache.redaction import redact
from compilecache.run_summary import PROGRESS_SUFFIX
from compilecache.runtime.cache import Cache
from compilecache.runtime.manifest import JobManifest
from compilecache.stats import COUNTERS, Stats, Summary, level_counter, split_counters, typed
from compilecache.stores import registry
from compilecache.stores.base import EntryInfo, EntryMeta, Store
from compilecache.stores.tiers import Tiered

log = logging.getLogger("compilecache")

# Under ``compilecache run``, a process's counters so far are rewritten at most this often
# (and at each entry written), for a summary that counts processes killed before their exit.
PROGRESS_INTERVAL_S = 1.0

_lock = threading.RLock()
_active: Session | None = None


def open_store(
    url: str | None = None,
    *,
    max_size: int | str | None = None,
    create: bool = True,
    cfg: Config | None = None,
    plan: WritePlan | None = None,
    command: bool = False,
) -> Tiered:
    """Open the storage layer on its own: one URL, or several comma-separated (tiers, fastest
    first). Defaults come from ``COMPILECACHE_URL`` and ``COMPILECACHE_MAX_SIZE``.
    ``create=False``: only open a store that exists (a missing directory is an error).

    Within compilecache, the one opener of a configured store (a session's, a command's): with
    ``cfg`` (``url`` and ``max_size`` are then taken from it) and the ``plan`` of who writes;
    ``command``: opened for one command (stats, ls), not a running program."""
    if cfg is None:
        cfg = config_mod.load(url=url, max_size=max_size)
    if plan is None:
        # The levels a session would write; not plan_writes, which also makes a reader's host
        # key.
        plan = WritePlan.of_session(cfg, registry.has_private_level(cfg.url))
    return registry.open_store(
        cfg.url,
        cfg.max_size,
        plan=plan,
        tier_writes=cfg.tier_writes,
        create=create,
        cold_streak=cfg.cold_streak,
        command=command,
    )


def plan_writes(cfg: Config) -> WritePlan:
    """This session's :class:`~compilecache.config.WritePlan`, decided once.

    A process that trusts writers' keys but holds none writes only its host's own level, its
    entries signed with a key of this host and user (trusted here, nowhere else); with no such
    level, or no way to keep that key, it writes nothing."""
    plan = WritePlan.of_session(cfg, registry.has_private_level(cfg.url))
    if not plan.saves or not plan.shared_read_only or plan.signing is None:
        return plan
    path = config_mod.host_key_path()
    try:
        signing = plan.signing.with_host_key(signing_mod.load_or_create_host_key(path))
    except (OSError, CompileCacheError) as exc:
        log.warning(
            "compilecache: cannot keep this host's key for local entries at %s (%s); this "
            "process writes nothing",
            path,
            exc,
        )
        return dataclasses.replace(plan, reason=config_mod.READER_REASON)
    return dataclasses.replace(plan, signing=signing)


class UnavailableStore(Store):
    """Stands in for a store that could not be opened (the session then hooks no framework):
    every call fails, so whatever still asks it is counted as a failure."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason

    def _fail(self) -> NoReturn:
        raise StoreUnavailable(self.reason)

    def get(self, key: str) -> bytes | None:
        self._fail()

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self._fail()

    def delete(self, key: str) -> bool:
        self._fail()

    def stat(self, key: str) -> EntryInfo | None:
        self._fail()

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        self._fail()

    def close(self) -> None:
        pass


def _import_what_the_exit_needs(cfg: Config) -> None:
    """Import now the modules the exit hooks use. A module imported while the interpreter exits
    may build a dataclass or a namedtuple, which runs ``exec`` on a string, and in CPython that
    forgets that the program is dying of an unhandled KeyboardInterrupt: it then exits with
    status 1 instead of being killed by SIGINT (130 in a shell), as the same program exits
    without compilecache."""
    from compilecache.runtime import history  # noqa: F401  (record_run)

    if cfg.run_spool:
        from compilecache.frameworks import facts  # noqa: F401  (the run spool)


class Session:
    """compilecache enabled in this process."""

    def __init__(
        self, cfg: Config, store: Store, plan: WritePlan, *, prefetch: bool = True
    ) -> None:
        self.config = cfg
        self.plan = plan
        self.read_only = not plan.saves
        self.cache = Cache(
            store,
            stats=Stats(),
            read_only=self.read_only,
            read_only_reason=plan.reason,
            min_compile_time=cfg.min_compile_time,
            signing=plan.signing,
            lease_ttl=cfg.lease_ttl,
            wait_timeout=cfg.wait_timeout,
        )
        # A reader of a fleet's cache writes only its own levels: there it keeps its own compile
        # of a key whose shared entry it does not trust (so its next run is warm).
        self.cache.own_levels_only = plan.shared_read_only
        self.installed: set[str] = set()
        # The job's manifest: read at start (tiers with a remote level prefetch it; a framework
        # may prepare its entries ahead), recorded at exit.
        self.manifest: JobManifest | None = None
        if cfg.prefetch and prefetch:
            self.manifest = JobManifest(self.store, cfg, self.cache.reader)
            self.cache.prefetcher = self.manifest.prefetcher
        self._flushed: dict[str, float] = {}
        self._closed = False
        self._run_recorded = False
        self._exit_finished = False
        if cfg.run_spool:
            # Under ``compilecache run`` (and ``doctor``): one run id for all its processes, and
            # per-compile events for the spool.
            self.cache.run_id = Path(cfg.run_spool).name
            self.cache.events = []
            self._progress_at = 0.0
            self._progress_lock = threading.Lock()
            self.cache.stats.listener = self._report_progress
        _import_what_the_exit_needs(cfg)

    @property
    def store(self) -> Tiered:
        return self.cache.store

    def stats(self) -> dict[str, float]:
        """This process's counters (hits, misses, writes, errors, bytes: integers; seconds saved,
        compile times: floats, named ``..._s``), once the entry writes handed to the background thread so far are done. ``errors``
        holds one per outage of a guarded level (a remote level that went down), whichever
        level it was: a level behind a local one is counted as a store of its own is."""
        self.cache.wait_writes()
        values = self.cache.stats.snapshot()
        outages = sum(
            level.health.stats().get("outages", 0.0)
            for level in self.store.levels
            if level.health is not None
        )
        if outages:
            values["errors"] = values.get("errors", 0.0) + outages
        return typed(values)

    def summary(self) -> Summary:
        return Summary.of(self.stats())

    def finish_writes(self) -> None:
        """Finish the background bookkeeping (miss explanations), record the job's manifest,
        then finish the background writes to remote levels (their counts belong in the counters
        flushed after). Never raises."""
        for finish in list(self.cache.finishers):
            try:
                finish()
            except Exception as exc:
                log.debug("compilecache: an integration's exit step failed: %s", exc)
        try:
            self.cache.settle()
            if self.manifest is not None and not self.read_only:
                self.manifest.record()
            self.store.flush(EXIT_DRAIN_S)
        except Exception as exc:
            log.debug("compilecache: finishing background writes failed: %s", exc)

    def finish_at_exit(self) -> None:
        """At exit, once whichever exit hook comes first: finish the background work and the
        writes (:meth:`finish_writes`), then give up the leases still held (a release the
        background queue did not reach before its deadline). Without it a session on a local
        disk left its last misses unexplained and their leases held until they expired."""
        if self._exit_finished:
            return
        self._exit_finished = True
        self.finish_writes()
        self.cache.release_leases()

    def flush_stats(self) -> None:
        """Add what was counted since the last flush to the store's persistent counters, and to
        the ``compilecache run`` spool when running under it. Never raises."""
        current = self.stats()
        current.update(self._level_counters())
        delta = {k: v - self._flushed.get(k, 0.0) for k, v in current.items()}
        delta = {k: v for k, v in delta.items() if v}
        self._flushed = current
        spool = self.config.run_spool
        if spool:
            self._write_spool(Path(spool), current)
        counters = self.store.counters
        if not delta or counters is None:
            return
        try:
            counters.add(delta)
        except Exception as exc:
            log.debug("compilecache: could not save stats: %s", exc)

    def _report_progress(self, name: str) -> None:
        """Under ``compilecache run``: keep ``<pid>.progress`` (this process's counters so far)
        in the spool, so that a process killed before its exit report (SIGKILL, the OOM killer)
        is still counted in the run's summary. Rewritten at each entry written (each is a
        write of its own already) and at most once a second otherwise. Never raises."""
        now = time.monotonic()
        if name != "writes" and now - self._progress_at < PROGRESS_INTERVAL_S:
            return
        if not self._progress_lock.acquire(blocking=False):
            return  # another thread is writing it now
        try:
            self._progress_at = now
            spool = self.config.run_spool
            if spool:
                path = os.path.join(spool, f"{os.getpid()}{PROGRESS_SUFFIX}")
                with open(path + ".tmp", "w") as f:
                    f.write(json.dumps(self.cache.stats.snapshot()))
                os.replace(path + ".tmp", path)
        except Exception as exc:  # a report: never fail a compile for it
            log.debug("compilecache: could not report progress: %s", exc)
        finally:
            self._progress_lock.release()

    def _write_spool(self, spool: Path, current: dict[str, float]) -> None:
        """``<pid>.json``: this process's counters (summed by ``run``); ``<pid>.events.jsonl``:
        facts about the process, then one line per compile event (read by ``doctor``)."""
        try:
            # Imported here: only runs under ``compilecache run`` need the facts (3 ms of every
            # enable() otherwise).
            from compilecache.frameworks import facts

            (spool / f"{os.getpid()}.json").write_text(json.dumps(current))
            # The final report replaces the progress kept in case the process was killed.
            (spool / f"{os.getpid()}{PROGRESS_SUFFIX}").unlink(missing_ok=True)
            lines = [json.dumps({"facts": facts.collect().to_json()}, default=str)]
            lines += [json.dumps(e, default=str) for e in list(self.cache.events or ())]
            (spool / f"{os.getpid()}.events.jsonl").write_text("\n".join(lines) + "\n")
        except Exception as exc:  # the spool is a report: never fail the program's exit
            log.debug("compilecache: could not write the run summary: %s", exc)

    def _level_counters(self) -> dict[str, float]:
        """Per-level counters of tiers of several levels, as ``level.<url>.<counter>``."""
        if len(self.store.levels) < 2:
            return {}  # one level: its counters are the totals
        return {
            level_counter(url, name): value
            for url, counts in self.store.level_stats().items()
            for name, value in counts.items()
            if name not in ("writable", "down")  # states, not counts
        }

    def record_run(self) -> None:
        """Append this process's totals to the store's run history, once. Never raises."""
        if self._run_recorded:
            return
        self._run_recorded = True
        counters = self.stats()
        if not counters.get("hits") and not counters.get("misses"):
            return
        from compilecache.runtime import history

        totals, frameworks_, _, _ = split_counters(counters)
        record = {
            **history.origin(self.cache.run_id),
            **{name: totals.get(name, 0.0) for name in COUNTERS},
            "frameworks": frameworks_,
        }
        history.append(self.store, history.RUN, record)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for framework in list(self.config.frameworks):
            frameworks.uninstall(framework)
        self.finish_writes()
        self.flush_stats()
        self.record_run()
        self.cache.close()


def enable(
    url: str | None = None,
    *,
    max_size: int | str | None = None,
    read_only: bool | None = None,
    min_compile_time: float | None = None,
    frameworks: tuple[str, ...] | str | None = None,
) -> Session | None:
    """Route JAX and torch.compile through compilecache in this process.

    Arguments override the ``COMPILECACHE_*`` variables. Idempotent: the same configuration returns
    the active session. Returns ``None`` when ``COMPILECACHE_DISABLE=1``.
    """
    global _active
    cfg = config_mod.load(
        url=url,
        max_size=max_size,
        read_only=read_only,
        min_compile_time=min_compile_time,
        frameworks=frameworks,
    )
    _configure_logging(cfg.log_level)
    with _lock:
        if cfg.disabled:
            return None
        if _active is not None:
            if _active.config == cfg:
                return _active
            _deactivate()
        plan = plan_writes(cfg)
        try:
            store = open_store(cfg=cfg, plan=plan)
        except StoreUnavailable as exc:
            # Never break the program: it runs uncached. One problem, said once and counted
            # once; no framework is hooked (a lookup per compile would each fail the same way).
            log.warning("compilecache: not enabled: %s", exc)
            unavailable = UnavailableStore(redact(cfg.url), str(exc))
            session = Session(cfg, unavailable, plan, prefetch=False)
            session.cache.stats.add("errors")
            _active = session
            return session
        session = Session(cfg, store, plan)
        if any(level.health is not None for level in store.levels):  # remote: flush it early
            _register_early_flush()
        for name in cfg.frameworks:
            _install(name, session)
        if session.manifest is not None:
            session.manifest.start()
        if len(store.levels) > 1 and not session.read_only and store.counters is not None:
            store.counters.prepare()  # the shared levels' exit counters, read ahead
        _active = session
        return session


def _install(name: str, session: Session) -> None:
    frameworks.install(name, session.cache, session.installed, session.config)


def disable() -> None:
    """Undo :func:`enable`: restore the frameworks, save counters, close the store."""
    with _lock:
        _deactivate()


def _deactivate() -> None:
    global _active
    if _active is not None:
        session, _active = _active, None
        session.close()


def active() -> Session | None:
    """The enabled session, if any. Under ``compilecache run``, a process that has not imported
    a framework yet is enabled now (the bootstrap waits for that import otherwise)."""
    if _active is None:
        for finder in list(sys.meta_path):
            if getattr(finder, "compilecache_bootstrap", False):
                finder.enable_now()  # type: ignore[attr-defined]
    return _active


class _Redacting(logging.Filter):
    """Redacts every record of compilecache's logger (its message formatted once): no handler,
    whatever its format, prints a credential a store URL carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's to report
            return True
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("compilecache")
    logger.setLevel(level.upper())
    if not any(isinstance(f, _Redacting) for f in logger.filters):
        logger.addFilter(_Redacting())
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


# How long the exit waits for writes still queued for remote levels (then drops them, counted).
EXIT_DRAIN_S = 10.0


def _flush_while_threads_run() -> None:
    """Flush the counters at interpreter exit *before* thread pools shut down.

    Remote levels may need a thread pool to talk (the object stores' concurrent reads and
    writes, fsspec filesystems' name resolution), and ``concurrent.futures`` refuses new work once its own exit hook ran,
    which is before ``atexit`` callbacks. Threading's exit hooks run in reverse order of
    registration, so this one is registered after importing ``concurrent.futures.thread``
    (which registers that module's hook): it then runs first. The ``atexit`` hook below still
    flushes whatever was counted after this one (nothing, normally) and records the run.
    """
    _at_exit_do(Session.finish_at_exit, Session.flush_stats)


def _at_exit_do(*steps: Callable[[Session], None]) -> None:
    try:
        for step in steps:
            if _active is not None:
                step(_active)
    except Exception:  # never turn a clean exit into a traceback
        pass


_early_flush_registered = False


def _register_early_flush() -> None:
    """Register :func:`_flush_while_threads_run` once (for sessions with a remote level)."""
    global _early_flush_registered
    if _early_flush_registered:
        return
    _early_flush_registered = True
    import concurrent.futures.thread  # noqa: F401  (its exit hook must be registered before ours)

    # CPython's hook that runs before the interpreter joins its non-daemon threads (no public
    # name; present on every supported Python).
    register: Callable[[Callable[[], None]], None] = threading._register_atexit  # type: ignore[attr-defined]
    with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
        register(_flush_while_threads_run)


@atexit.register
def _at_exit() -> None:
    # Sessions without a remote level have no early hook: their exit work is finished here.
    _at_exit_do(Session.finish_at_exit, Session.flush_stats, Session.record_run)
