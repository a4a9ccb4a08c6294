"""The adapter JAX's persistent cache talks to: JAX's ``CacheInterface`` (``get``, ``put``,
``_path``) on compilecache's :class:`~compilecache.runtime.cache.Cache`. A lookup is single-flight
across processes, a write goes to the cache's background thread with the key's components (for
``explain``), and ``jax_compilation_cache_check_contents`` compares a fresh compile with the
stored entry as JAX's own ``VerificationCache`` does."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import zstandard

from compilecache.entry import EntryHeader
from compilecache.errors import CorruptEntry, ForeignEntry
from compilecache.frameworks.jax import preload as jax_preload
from compilecache.frameworks.jax import words as jax_words
from compilecache.frameworks.jax.key import key_components, readable_components
from compilecache.host import cpu_target, jax_versions
from compilecache.host import framework_module as _private
from compilecache.runtime.cache import Cache, own_key
from compilecache.stats import function_counter

log = logging.getLogger("compilecache")

# What ``jax_compilation_cache_dir`` is set to: our ``get_file_cache`` recognises it and answers
# with compilecache, so no directory of this name is ever made. A plain absolute path and not a
# URL: JAX builds a path from it on every compile (``jax._src.path.Path``), which is
# ``etils.epath`` where etils is installed, and epath raises on a scheme it does not know
# (``compilecache://`` failed every compile there: seen on a GPU machine with JAX 0.11.2).
MARKER_DIR = "/compilecache/jax-cache-routed-through-compilecache"
FRAMEWORK = jax_words.FRAMEWORK  # importing it registers the vocabulary
# Keys computed but not yet looked up or written; bounded so a long run cannot leak modules.
_MAX_PENDING = 256


def store_key(jax_key: str) -> str:
    return f"jax/{jax_key}"


def module_name(jax_key: str) -> str:
    """``jit_train_step-<sha256>`` -> ``jit_train_step``."""
    return jax_key.rsplit("-", 1)[0]


@dataclass
class _Pending:
    args: tuple[Any, ...] | None = None
    # Each key component's hash, taken from JAX's own key computation as it ran (KeyTap): the
    # key was their stream's digest. None when the tap saw nothing (the components are then
    # computed again from ``args``).
    hashes: dict[str, str] | None = None
    miss_time: float | None = None
    # get() answered a miss for this key (JAX will compile it).
    looked_up: bool = False
    # A lookup that jax_compilation_cache_check_contents turned into a compile: put() compares.
    verify: bool = False
    # How JAX compiles it (jax_preload.how_compiled): recorded in the entry, for read-ahead.
    how: dict[str, Any] | None = None


def _clock() -> float | None:
    """A monotonic reading, or ``None``: a clock that fails (a test mocking it with a few values)
    must neither raise into JAX nor lose the write (the entry then records JAX's own whole-second
    compile time). Not ``time.monotonic``, which JAX's own tests mock."""
    try:
        return float(time.perf_counter())
    except Exception:
        return None


def as_seconds(value: Any) -> float:
    """A duration as a plain float (a numpy scalar would not encode into an entry's header);
    0.0 for anything that is not a finite, non-negative number."""
    try:
        seconds = float(value)
    except Exception:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0


class JaxCacheAdapter:
    """Implements JAX's ``CacheInterface`` (``get``/``put``/``_path``) on a :class:`Cache`."""

    def __init__(self, cache: Cache, writes_here: Callable[[], bool] = lambda: True) -> None:
        self.cache = cache
        # Whether this process's compiles reach put() (a process that never writes must never
        # hold a lease others wait on): the integration knows, from the job's settings.
        self.writes_here = writes_here
        self._path = MARKER_DIR
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._lock = threading.Lock()
        # put() hands the entry's encoding and write to the cache's background thread (the
        # compile returns to JAX without waiting for the disk): the values handed and not
        # written yet, which a lookup of the same key in this process is served from.
        self._writing: dict[str, bytes] = {}
        # jax_compilation_cache_check_contents, read when JAX builds its cache (as JAX does), and
        # the keys already compared in this process.
        self.check_contents = False
        self._verified: set[str] = set()
        # Probes of a stored trace's executable on this thread (probing()).
        self._probe = threading.local()

    def configure(self, check_contents: bool) -> None:
        """JAX is building its cache: apply ``jax_compilation_cache_check_contents``."""
        with self._lock:
            self.check_contents = check_contents
            self._verified.clear()

    def _slot(self, key: str) -> _Pending:
        with self._lock:
            slot = self._pending.get(key)
            if slot is None:
                slot = self._pending[key] = _Pending()
                while len(self._pending) > _MAX_PENDING:
                    self._pending.popitem(last=False)
            return slot

    def remember_key_args(
        self, key: str, args: tuple[Any, ...], hashes: dict[str, str] | None = None
    ) -> None:
        slot = self._slot(key)
        slot.args, slot.hashes = args, hashes

    def served(self, key: str) -> None:
        """JAX's lookup of ``key`` was served without :meth:`get` (read ahead): forget its key."""
        with self._lock:
            self._pending.pop(key, None)

    def remember_how_compiled(self, key: str, how: dict[str, Any]) -> None:
        """JAX missed ``key`` and compiles it with what ``how`` says (its entry records it)."""
        self._slot(key).how = how

    def get(self, key: str) -> bytes | None:
        if self.check_contents and key not in self._verified:
            # The first lookup of a key in this process compiles afresh; put() compares.
            slot = self._slot(key)
            slot.miss_time, slot.looked_up, slot.verify = _clock(), True, True
            self.cache.stats.add("misses", framework=FRAMEWORK)
            return None
        with self._lock:
            written = self._writing.get(key)
        if written is not None:
            # This process compiled it and its write has not finished: JAX's own value.
            self.cache.stats.add("hits", framework=FRAMEWORK)
            self.cache.stats.add(function_counter(FRAMEWORK, module_name(key), "hits"))
            return written
        if getattr(self._probe, "active", False):
            return self._probed(key)
        try:
            # Single-flight: on a miss, wait for another process compiling the same key, or
            # lead (released in put, or when compile_or_get_cached returns without a put).
            found = self.cache.load_or_lead(FRAMEWORK, store_key(key), lead=self.writes_here())
        except Exception as exc:  # never raise into JAX
            self.cache.warn_once("jax:get", f"lookup failed: {exc}")
            return None
        if found is not None:
            with self._lock:
                self._pending.pop(key, None)
            return found.payload
        slot = self._slot(key)
        slot.miss_time, slot.looked_up = _clock(), True
        return None

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Lookups on this thread meanwhile are probes of a stored trace's executable: a hit is
        counted as a hit; a miss, or an entry it cannot use (damaged, foreign), is not counted
        and takes no lease (the trace that follows looks the key up again, and that lookup
        counts it, once)."""
        self._probe.active = True
        try:
            yield
        finally:
            self._probe.active = False

    def _probed(self, key: str) -> bytes | None:
        start = time.perf_counter()
        found = self.cache.probe(FRAMEWORK, store_key(key))
        if found is None:
            return None
        self.cache.count_read_ahead(
            FRAMEWORK, store_key(key), found, len(found.payload), time.perf_counter() - start
        )
        return found.payload

    def put(self, key: str, value: bytes) -> None:
        mismatch: Exception | None = None
        handed = False
        try:
            mismatch, handed = self._put(key, value)
        except Exception as exc:  # never raise into JAX
            self.cache.warn_once("jax:put", f"write failed: {exc}")
        finally:
            if not handed:
                self.cache.finish_lead(store_key(key))
        if mismatch is not None:
            # What the user asked for with jax_compilation_cache_check_contents: JAX's own
            # error, raised from the write as JAX's VerificationCache raises it.
            raise mismatch

    def _put(self, key: str, value: bytes) -> tuple[Exception | None, bool]:
        """Store a compile; with ``check_contents``, first compare it with the stored entry
        (returns the error to raise when they differ; nothing is written then). Also returns
        whether the write was handed to the background thread (which then ends the lease)."""
        with self._lock:
            slot = self._pending.pop(key, _Pending())
        if slot.verify:
            verdict = self._verify(key, value)
            if isinstance(verdict, Exception):
                return verdict, False  # the key stays unverified: its next lookup compiles again
            with self._lock:
                self._verified.add(key)
            if verdict is not None:
                return None, False
        now = _clock()
        if slot.miss_time is not None and now is not None:
            compile_time = as_seconds(now - slot.miss_time)
        else:
            compile_time = _stored_compile_time(value)
        with self._lock:
            self._writing[key] = value
        self.cache.save_later(
            store_key(key), functools.partial(self._write_handed, key, value, slot, compile_time)
        )
        return None, True

    def _write_handed(self, key: str, value: bytes, slot: _Pending, compile_time: float) -> None:
        """:meth:`_write` on the background thread. Never raises."""
        try:
            self._write(key, value, slot, compile_time)
        except Exception as exc:
            self.cache.warn_once("jax:put", f"write failed: {exc}")
        finally:
            with self._lock:
                self._writing.pop(key, None)

    def _write(self, key: str, value: bytes, slot: _Pending, compile_time: float) -> None:
        """Encode and store the compile of ``key`` with its key's components, and explain the
        miss that compiled it."""
        components: dict[str, str] = {}
        readable: dict[str, str] = {}
        extra: dict[str, Any] = {}
        found = _components(key, slot)
        if found is not None:
            components, readable, verified = found
            extra = {"readable": readable, "components_verified": verified}
        # XLA compiles CPU code for this CPU and its key does not say which: every read checks
        # this against the reading host (host.HostCheck).
        extra["cpu"] = cpu_target()
        if slot.how:
            extra[jax_preload.EXTRA] = slot.how
        header = EntryHeader(
            framework=FRAMEWORK,
            key=store_key(key),
            name=module_name(key),
            compile_time_s=compile_time,
            versions=jax_versions(),
            components=components,
            extra=extra,
        )
        # JAX already zstd-compressed the executable: do not compress it twice.
        stored = self.cache.save(header, value, compress=False)
        reason = "" if stored else self.cache.skip_reason(compile_time, store_key(key))
        self._explain(key, components, readable, compile_time, stored, reason)

    def _verify(self, key: str, value: bytes) -> Exception | bool | None:
        """Compare a fresh compile with the stored entry, read without counting a hit: ``True``
        when they match (nothing to write), JAX's error when they differ, ``None`` when there is
        nothing to compare with (a true miss: stored as usual). An entry signed with another key
        is neither compared nor replaced (``False``)."""
        try:
            stored = self.cache.reader.peek(self.cache.store, store_key(key))
            if stored is not None and self.cache.refuses(store_key(key), stored.header):
                # Another kind of host's compile: compared with this host's own, if any.
                stored = self.cache.reader.peek(self.cache.store, own_key(store_key(key)))
            if stored is None:
                return None
        except CorruptEntry:
            return None  # a damaged entry is replaced by the fresh compile
        except ForeignEntry:
            return False
        compilation_cache = _private("jax._src.compilation_cache")
        try:
            same = _executable(compilation_cache, stored.payload) == _executable(
                compilation_cache, value
            )
        except Exception as exc:  # a payload that does not decompress: replaced, as corrupt
            log.debug("compilecache: stored executable of %s not compared: %s", key, exc)
            return None
        if same:
            return True
        return compilation_cache.CacheVerificationError(  # type: ignore[no-any-return]
            f"Persistent compilation cache inconsistency for key {key}. Executable found in "
            f"the compilecache store {self.cache.store.url} does not match the freshly "
            "compiled executable.",
            key,
            stored.payload,
            value,
        )

    def _explain(
        self,
        key: str,
        components: dict[str, str],
        readable: dict[str, str],
        compile_time: float,
        stored: bool,
        reason: str,
    ) -> None:
        # Only misses get here, after their compile: a hit never pays for an explanation.
        from compilecache.runtime import explain

        explain.record_miss(
            self.cache,
            framework=FRAMEWORK,
            name=module_name(key),
            key=store_key(key),
            components=components,
            readable=readable,
            prefix=store_key(module_name(key) + "-"),
            compile_time_s=compile_time,
            stored=stored,
            reason=reason,
            background=True,
        )

    def awaiting_write(self, key: str) -> bool:
        """Whether a lookup of ``key`` missed here and its compile was not handed to ``put``."""
        with self._lock:
            slot = self._pending.get(key)
            return slot is not None and slot.looked_up

    def not_written(self, key: str, reason: str, compile_time: float) -> None:
        """JAX compiled ``key`` after our miss but will not hand it to ``put`` (host callbacks,
        its own minimum compile time, not process 0): record the miss and why. Never raises."""
        try:
            compile_time = as_seconds(compile_time)
            with self._lock:
                slot = self._pending.get(key)
                if slot is None or not slot.looked_up:
                    return  # not a lookup of ours (another cache directory)
                del self._pending[key]
            components, readable, _ = _components(key, slot) or ({}, {}, False)
            self.cache.stats.add("skipped", framework=FRAMEWORK)
            self._explain(key, components, readable, compile_time, False, reason)
        except Exception as exc:
            log.debug("compilecache: could not record an unwritten compile: %s", exc)


def _stored_compile_time(value: bytes) -> float:
    """JAX's own whole-second compile time, from the 4-byte prefix of the decompressed value."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(value)
        return float(int.from_bytes(reader.read(4), "big"))
    except Exception:  # not zstd (zlib, or damage): the write goes on without a time
        return 0.0


def _components(key: str, slot: _Pending) -> tuple[dict[str, str], dict[str, str], bool] | None:
    """The key components of a remembered lookup: their hashes as JAX's own computation fed
    them (else :func:`key_components` computes them again) and their readable values; ``None``
    when there is nothing remembered or it fails (an explanation is a convenience: the entry is
    written without one)."""
    if slot.args is None:
        return None
    try:
        if slot.hashes is not None:
            _, devices, compile_options, backend, _, compression = slot.args
            readable = readable_components(devices, compile_options, backend, compression)
            return slot.hashes, readable, True
        return key_components(key, *slot.args)
    except Exception as exc:
        log.debug("compilecache: key components of %s not recorded: %s", key, exc)
        return None


def _executable(compilation_cache: Any, value: bytes) -> bytes:
    """The serialized executable in a value JAX stores, without its compile-time prefix."""
    executable, _ = compilation_cache.extract_executable_and_time(
        compilation_cache.decompress_executable(value)
    )
    return bytes(executable)


def adapter_class() -> type[JaxCacheAdapter]:
    """:class:`JaxCacheAdapter` as a subclass of JAX's ``CacheInterface`` where JAX has one, so
    that whatever checks what ``get_file_cache`` returned (JAX's own tests do) finds one."""
    try:
        interface = _private("jax._src.compilation_cache_interface").CacheInterface
    except Exception:
        return JaxCacheAdapter
    if not isinstance(interface, type) or issubclass(JaxCacheAdapter, interface):
        return JaxCacheAdapter
    made: type[JaxCacheAdapter] = types.new_class("JaxCacheAdapter", (JaxCacheAdapter, interface))
    made.__doc__, made.__module__ = JaxCacheAdapter.__doc__, JaxCacheAdapter.__module__
    return made


def verifying_view(adapter: JaxCacheAdapter) -> Any:
    """``adapter`` as an instance of JAX's own ``VerificationCache`` (what JAX's
    ``get_file_cache`` returns under ``jax_compilation_cache_check_contents``, and what JAX's
    tests and tools look for), its lookups and writes the adapter's, which compares as JAX's
    does; ``clear()`` forgets which keys were compared, as JAX's. ``None`` where this JAX has
    no such class (the adapter then answers alone). Never raises."""
    try:
        verification = _private("jax._src.compilation_cache").VerificationCache

        class VerifyingAdapter(verification):  # type: ignore[misc, valid-type]
            def get(self, key: str) -> bytes | None:
                return adapter.get(key)

            def put(self, key: str, value: bytes) -> None:
                adapter.put(key, value)

            def clear(self) -> None:
                adapter.configure(adapter.check_contents)

        view: Any = VerifyingAdapter(adapter)
        return view
    except Exception as exc:
        log.debug("compilecache: no VerificationCache view of the adapter: %s", exc)
        return None
