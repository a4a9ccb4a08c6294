"""JAX integration: route JAX's persistent compilation cache through compilecache.

The hook: replace
``jax._src.compilation_cache.get_file_cache`` with a factory that returns our adapter, and point
``jax_compilation_cache_dir`` at a constant marker. It survives ``reset_cache()``, works whether we
are installed before or after ``import jax`` (as long as it is before the first compile), and keeps
the cache key independent of where the store lives: the 0.10.x pitfall that writes the cache
directory into every key through XLA's cache options is neutralised twice, by the constant marker
and by computing the key with those paths cleared, while XLA gets real directories on this host
and its autotune results travel through the store (:mod:`compilecache.frameworks.jax.xla`).

We also wrap ``compilation_cache.get_cache_key`` (looked up at call time by ``compiler.py``) to
remember the arguments of each key, so that after a miss the key components can be hashed one by
one and stored with the entry for miss explanations. That costs one extra key computation per
*miss*, after the compile; hits pay nothing. The steps of JAX's key differ between releases
(0.4.30 has seven, 0.10 eight): they are chosen from the helpers' signatures and checked against
the real key (:func:`key_components`).

JAX's own settings keep their meaning (the program's, set in its environment or in code, before
or after ``enable()``): compilecache sets only the cache directory, and only where the program
set none. ``jax_enable_compilation_cache=False`` turns JAX's cache off, and compilecache's with
it; ``jax_persistent_cache_min_compile_time_secs`` and ``..._min_entry_size_bytes`` are applied by
JAX's own write path (where the program left the minimum compile time at JAX's default,
compilecache writes faster compiles too: ``COMPILECACHE_MIN_COMPILE_TIME`` is its threshold, 0 by
default); a directory the program names (``jax_compilation_cache_dir``, ``set_cache_dir()``,
``JAX_COMPILATION_CACHE_DIR``) is served from compilecache's store and left alone, and each of
these is said once (the summary line, ``explain``, ``doctor``).

``jax_compilation_cache_check_contents`` is honoured as JAX's own ``VerificationCache`` does it:
the first lookup of each key in a process compiles afresh, and the result is compared with the
stored executable. A mismatch raises JAX's ``CacheVerificationError`` from the write, the one
exception the adapter lets through: JAX raises it to the program, as with its own cache, because
that is what the flag asks for. The cache JAX builds is then an instance of JAX's own
``VerificationCache`` over the adapter, as ``get_file_cache`` answers without compilecache.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import math
import os
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zstandard

from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.errors import CorruptEntry, ForeignEntry
from compilecache.frameworks.jax import preload as jax_preload
from compilecache.frameworks.jax import words as jax_words
from compilecache.frameworks.jax import xla as jax_xla
from compilecache.host import cpu_target, jax_versions
from compilecache.host import framework_module as _private
from compilecache.patches import Patches
from compilecache.runtime import explain
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
_REQUIRED = ("get_file_cache", "get_cache_key", "reset_cache", "_get_cache")
DIR_OPTION = "jax_compilation_cache_dir"
MIN_TIME_OPTION = "jax_persistent_cache_min_compile_time_secs"
MIN_SIZE_OPTION = "jax_persistent_cache_min_entry_size_bytes"
ENABLE_OPTION = "jax_enable_compilation_cache"
CHECK_OPTION = "jax_compilation_cache_check_contents"
# JAX's own default minimum compile time: a program that leaves it there gets compilecache's
# (COMPILECACHE_MIN_COMPILE_TIME, applied by the Cache with the true float compile time).
JAX_DEFAULT_MIN_TIME = 1.0
# JAX's defaults of the options whose value says that the program set them.
_JAX_DEFAULTS: dict[str, Any] = {
    MIN_TIME_OPTION: JAX_DEFAULT_MIN_TIME,
    MIN_SIZE_OPTION: 0,
    ENABLE_OPTION: True,
    CHECK_OPTION: False,
}


class ProgramSettings:
    """What the program set of JAX's cache options: in its environment (JAX reads ``JAX_*``
    variables as its defaults) or in code (``jax.config.update``, watched from install on; a
    value other than JAX's default, whenever it was set). Read at each compile."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.updated: set[str] = set()

    def watch(self, original: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
        """A ``jax.config.update`` that remembers which options the program set."""
        updated = self.updated

        def update(name: str, val: Any) -> Any:
            updated.add(name)
            return original(name, val)

        return update

    def set_by_program(self, name: str) -> bool:
        """Whether the program set option ``name``: in code since install, in the environment,
        or (whenever) to a value other than JAX's default."""
        if name in self.updated or name.upper() in self.env:
            return True
        default = _JAX_DEFAULTS.get(name, _UNKNOWN)
        return default is not _UNKNOWN and _jax_value(name) != default

    def min_compile_time(self) -> float | None:
        """The program's ``jax_persistent_cache_min_compile_time_secs``; ``None`` when it left
        JAX's default (then compilecache's own minimum applies)."""
        value = _jax_value(MIN_TIME_OPTION)
        if value is None or not self.set_by_program(MIN_TIME_OPTION):
            return None
        return float(value)


_UNKNOWN = object()


def _jax_value(name: str) -> Any:
    """The current value of JAX's option ``name`` (``None`` when it cannot be read)."""
    try:
        return getattr(_private("jax").config, name)
    except Exception:
        return None


def store_key(jax_key: str) -> str:
    return f"jax/{jax_key}"


def module_name(jax_key: str) -> str:
    """``jit_train_step-<sha256>`` -> ``jit_train_step``."""
    return jax_key.rsplit("-", 1)[0]


@dataclass
class _Pending:
    args: tuple[Any, ...] | None = None
    # Each key component's hash, taken from JAX's own key computation as it ran (_KeyTap): the
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


def _seconds(value: Any) -> float:
    """A duration as a plain float (a numpy scalar would not encode into an entry's header);
    0.0 for anything that is not a finite, non-negative number."""
    try:
        seconds = float(value)
    except Exception:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0


class JaxCacheAdapter:
    """Implements JAX's ``CacheInterface`` (``get``/``put``/``_path``) on a :class:`Cache`."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
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
        try:
            # Single-flight: on a miss, wait for another process compiling the same key, or
            # lead (released in put, or when compile_or_get_cached returns without a put).
            found = self.cache.load_or_lead(FRAMEWORK, store_key(key), lead=_writes_here())
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
            compile_time = _seconds(now - slot.miss_time)
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
            compile_time = _seconds(compile_time)
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


# The steps of ``cache_key.get``, in order, as JAX releases have had them. The newest first: 0.10
# hashes the backend's platform version as a step of its own; 0.4.30 hashes it only inside
# accelerator_config, when the topology cannot be serialized. Releases between those two were not
# run here: whichever layout reproduces the key is kept.
_STEPS_NEWEST = jax_words.STEPS  # the names explain words (jax_words.JAX)
_LAYOUTS: tuple[tuple[str, ...], ...] = (
    _STEPS_NEWEST,
    tuple(step for step in _STEPS_NEWEST if step != "backend version"),  # 0.4.30
)


class _Recorder:
    """Stands in for the running sha256 of ``cache_key.get``: keeps what one step feeds it, so
    each step runs once and its bytes can be hashed alone and chained in any layout."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def update(self, data: Any) -> None:
        self.parts.append(bytes(data))

    def data(self) -> bytes:
        return b"".join(self.parts)


class _TappedSha256:
    """The running sha256 of one ``cache_key.get``, which also hashes each step's bytes alone:
    JAX calls ``_log_cache_key_hash`` after every step, and :class:`_KeyTap` closes the step
    there. The key is the whole stream's digest, exactly as JAX's own object computes it."""

    def __init__(self) -> None:
        self._whole = hashlib.sha256()
        self._step = hashlib.sha256()
        self.steps: dict[str, str] = {}

    def update(self, data: Any) -> None:
        self._whole.update(data)
        self._step.update(data)

    def digest(self) -> bytes:
        return self._whole.digest()

    def hexdigest(self) -> str:
        return self._whole.hexdigest()

    def close_step(self, name: str) -> None:
        self.steps[name] = self._step.hexdigest()
        self._step = hashlib.sha256()


class _KeyTap:
    """Takes each key component's hash from JAX's own key computation, in the same pass.

    ``cache_key.get`` makes one ``hashlib.sha256()``, feeds it each step and calls
    ``_log_cache_key_hash(hash_obj, name, hashfn)`` after each. The tap stands in for the
    module's ``hashlib`` (only its first ``sha256()`` inside :meth:`record`, on this thread, is
    the tapped one) and for ``_log_cache_key_hash`` (which closes a step, then calls JAX's).
    Computing the components again after a miss cost a cold compile 0.6 ms: the module was
    serialised a second time."""

    def __init__(self) -> None:
        self._local = threading.local()

    def sha256(self, *args: Any, **kwargs: Any) -> Any:
        tapped = getattr(self._local, "pending", None)
        if tapped is None or args or kwargs:
            return hashlib.sha256(*args, **kwargs)
        self._local.pending = None  # JAX's debug log makes a second one: a plain one
        return tapped

    def wrap_log(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def log_cache_key_hash(hash_obj: Any, last_serialized: str, hashfn: Any) -> Any:
            if isinstance(hash_obj, _TappedSha256):
                hash_obj.close_step(last_serialized)
            return original(hash_obj, last_serialized, hashfn)

        return log_cache_key_hash

    def record(self, compute: Callable[[], str]) -> tuple[str, dict[str, str] | None]:
        """``compute()`` (which calls ``cache_key.get``) and the step hashes it fed; ``None``
        for them when the key is not the tapped stream's digest (JAX computed it otherwise)."""
        tapped = _TappedSha256()
        self._local.pending = tapped
        try:
            key = compute()
        finally:
            self._local.pending = None
        if not tapped.steps or not key.endswith("-" + tapped.hexdigest()):
            return key, None
        return key, tapped.steps


class _HashlibWithTap:
    """``hashlib`` for ``jax._src.cache_key``, whose ``sha256`` is the tap's."""

    def __init__(self, tap: _KeyTap) -> None:
        self.sha256 = tap.sha256

    def __getattr__(self, name: str) -> Any:
        return getattr(hashlib, name)


def _positional(function: Any) -> int:
    """How many positional parameters ``function`` takes (-1 when it cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return -1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds)


def _step(helper: Callable[..., object], arg: Any, newer: Any) -> Callable[[Any], object]:
    """``helper(h, arg, newer)`` where the helper takes a third argument (newer JAX), else
    ``helper(h, arg)`` (0.4.30: ``ignore_callbacks`` did not exist, the backend was not hashed
    with the accelerator config)."""
    if _positional(helper) >= 3:
        return lambda h: helper(h, arg, newer)
    return lambda h: helper(h, arg)


def _key_steps(
    ck: Any,
    module: Any,
    devices: Any,
    compile_options: Any,
    backend: Any,
    ignore_callbacks: Any,
    compression: str,
) -> dict[str, Callable[[Any], object]]:
    """Each step of this JAX's ``cache_key.get``, called as its own ``get`` calls it (the
    helpers' signatures differ between releases: 0.4.30 has no ``ignore_callbacks`` and hashes
    the backend inside ``_hash_accelerator_config``)."""
    return {
        "computation": _step(ck._hash_computation, module, ignore_callbacks),
        "jax_lib version": lambda h: h.update(ck.jaxlib_version_str.encode("utf-8")),
        "backend version": lambda h: ck._hash_platform(h, backend),
        "XLA flags": lambda h: ck._hash_xla_flags(h, ck.get_flag_prefixes()),
        "compile_options": lambda h: ck._hash_serialized_compile_options(
            h, compile_options, strip_device_assignment=(backend.platform == "gpu")
        ),
        "accelerator_config": _step(ck._hash_accelerator_config, devices, backend),
        "compression": lambda h: ck._hash_string(h, compression),
        "custom_hook": lambda h: ck._hash_string(h, ck.custom_hook()),
    }


def _preferred_layout(ck: Any) -> tuple[str, ...]:
    """The layout this JAX's helpers point to: 0.4.30's ``_hash_accelerator_config`` takes the
    backend because its key has no platform step."""
    return _LAYOUTS[1] if _positional(ck._hash_accelerator_config) >= 3 else _LAYOUTS[0]


def key_components(
    key: str,
    module: Any,
    devices: Any,
    compile_options: Any,
    backend: Any,
    ignore_callbacks: Any,
    compression: str,
) -> tuple[dict[str, str], dict[str, str], bool]:
    """Hash each key component separately, as ``cache_key.get`` does in sequence.

    Returns the per-component hashes, readable values for the small components, and whether the
    components, chained, reproduce ``key`` (a self-check that fails loudly if JAX changes). The
    steps are chosen by the helpers' signatures; of the known layouts, the one that reproduces
    the key is kept (else this JAX's preferred one, unverified).
    """
    ck = _private("jax._src.cache_key")
    steps = _key_steps(ck, module, devices, compile_options, backend, ignore_callbacks, compression)
    fed: dict[str, bytes] = {}
    for name, step in steps.items():
        recorder = _Recorder()
        try:
            step(recorder)
        except Exception as exc:  # a helper this JAX calls differently: that component is unknown
            log.debug("compilecache: key component %s not hashed: %s", name, exc)
            continue
        fed[name] = recorder.data()
    preferred = _preferred_layout(ck)
    layout, verified = preferred, False
    for candidate in (preferred, *(c for c in _LAYOUTS if c != preferred)):
        if all(n in fed for n in candidate) and key.endswith(
            "-" + hashlib.sha256(b"".join(fed[n] for n in candidate)).hexdigest()
        ):
            layout, verified = candidate, True
            break
    hashes = {name: hashlib.sha256(fed[name]).hexdigest() for name in layout if name in fed}
    readable = readable_components(devices, compile_options, backend, compression)
    return hashes, readable, verified


def readable_components(
    devices: Any, compile_options: Any, backend: Any, compression: str
) -> dict[str, str]:
    """The readable values of the small key components (what ``explain`` shows beside their
    hashes); a value this JAX cannot say is left out."""
    ck = _private("jax._src.cache_key")
    kinds = [str(d.device_kind) for d in devices.flat]
    said: dict[str, Callable[[], str]] = {
        "jax_lib version": lambda: str(ck.jaxlib_version_str),
        "backend version": lambda: f"{backend.platform} {backend.platform_version}",
        "XLA flags": lambda: " ".join(_xla_flags(ck)),
        # jit(compiler_options=...) land here: the part of compile_options people set.
        "compile_options": lambda: " ".join(
            sorted(f"{k}={v}" for k, v in getattr(compile_options, "env_option_overrides", ()))
        )[:2000],
        # The topology fingerprint covers the client's devices, not only those used here.
        "accelerator_config": lambda: _topology(devices, kinds),
        "compression": lambda: compression,
        "custom_hook": lambda: str(ck.custom_hook())[:500],
    }
    readable: dict[str, str] = {}
    for name, say in said.items():
        try:
            readable[name] = say()
        except Exception as exc:  # one value this JAX cannot say: the others still help
            log.debug("compilecache: readable %s not recorded: %s", name, exc)
    return readable


def _topology(devices: Any, kinds: list[str]) -> str:
    """``4 x cpu`` (``(1 used)`` when the computation uses fewer devices than there are).

    In a multi-process job, prefixed with ``process 1 of 2, local device ids [1]: ``: the
    topology fingerprint follows the process, so each process's keys differ from the others'
    while the device count and kind agree, and only this says what differs.
    """
    try:
        client = devices.flat[0].client
        every = list(client.devices())
    except Exception:  # a backend without the attribute: what the computation uses
        client, every = None, []
    total = len(every) or len(kinds)
    text = f"{total} x {', '.join(sorted(set(kinds)))}"
    text = text if total == len(kinds) else f"{text} ({len(kinds)} used)"
    try:
        processes = len({int(d.process_index) for d in every})
        if client is not None and processes > 1:
            local = _id_ranges(sorted(int(d.id) for d in client.local_devices()))
            where = f"process {client.process_index()} of {processes}"
            text = f"{where}, local device ids [{local}]: {text}"
    except Exception as exc:  # the count and kind are still worth recording
        log.debug("compilecache: no process index for the key components: %s", exc)
    return text


def _id_ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _xla_flags(ck: Any) -> list[str]:
    """The XLA flags that enter the key, as ``cache_key._hash_xla_flags`` selects them."""
    flags: list[str] = []
    for var in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        flags.extend(os.environ.get(var, "").split())
    prefixes = ck.get_flag_prefixes()
    flags.extend(
        a for a in sys.argv if a.startswith("--xla") or any(a.startswith(p) for p in prefixes)
    )
    # A module constant since 0.4.31; 0.4.30 keeps the list inside _hash_xla_flags.
    excluded = set(getattr(ck, "xla_flags_to_exclude_from_cache_key", ()))
    return [f for f in sorted(flags) if f.split("=")[0] not in excluded]


@dataclass
class _Installed:
    adapter: JaxCacheAdapter
    settings: ProgramSettings
    notes: explain.SettingNotes
    patches: Patches
    # The directory option as it was (None: compilecache set it to MARKER_DIR, and unsets it).
    saved_dir: Any = None
    set_dir: bool = False
    # XLA's cache directories (xla.py).
    xla: jax_xla.XlaCaches | None = None
    # COMPILECACHE_WRITERS: "all" processes of a multi-process job write, or only the "first".
    writers: str = "all"
    watches_writes: bool = False
    # The read-ahead of the job's executables (None: no manifest, COMPILECACHE_PREFETCH=0).
    preloader: jax_preload.Preloader | None = None


_installed: _Installed | None = None


def _adapter_class() -> type[JaxCacheAdapter]:
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


def hook_available() -> tuple[bool, str]:
    """Whether this JAX has the private functions the hook needs; the reason when it does not."""
    try:
        cache_key = _private("jax._src.cache_key")
        compilation_cache = _private("jax._src.compilation_cache")
    except ImportError as exc:
        return False, f"cannot import jax._src.compilation_cache: {exc}"
    missing = [name for name in _REQUIRED if not hasattr(compilation_cache, name)]
    missing += [
        f"cache_key.{n}"
        for n in ("_hash_computation", "_hash_platform", "get_flag_prefixes", "custom_hook")
        if not hasattr(cache_key, n)
    ]
    if missing:
        return False, f"this JAX lacks {', '.join(missing)}"
    return True, ""


def directory_note(path: str, url: str) -> str:
    return (
        f"the program set {DIR_OPTION}={path}: compilecache serves JAX's cache from its store "
        f"({url}) and leaves that directory alone"
    )


def install(cache: Cache, cfg: Config) -> bool:
    """Route JAX's persistent cache through ``cache`` (``cfg``: the session's configuration);
    ``False`` (with one warning) if impossible."""
    global _installed
    jax = _private("jax")
    compilation_cache = _private("jax._src.compilation_cache")
    ok, reason = hook_available()
    if not ok:
        cache.warn_once(
            "jax:hook", f"JAX {jax.__version__} is not supported ({reason}); JAX left alone"
        )
        return False
    if _installed is not None:
        uninstall()
    adapter = _adapter_class()(cache)
    installed = _Installed(
        adapter, ProgramSettings(), explain.SettingNotes(cache, FRAMEWORK), Patches()
    )
    notes = installed.notes

    def get_file_cache(_jax_factory: Callable[[str], Any]) -> Callable[[str], Any]:
        def get_file_cache(path: str) -> tuple[JaxCacheAdapter, str] | None:
            # Any directory JAX builds its cache for is served from the store: the marker, or
            # the one the program named (left alone, and said once).
            if path != MARKER_DIR:
                notes.note(directory_note(path, cache.store.url))
            checking = _check_contents(cache)
            adapter.configure(checking)
            # Checking contents, JAX's own answer is a VerificationCache: so is ours.
            view = _verifying_view(adapter) if checking else None
            return (view or adapter), path

        return get_file_cache

    tap = _KeyTap()

    def get_cache_key(original_key: Callable[..., str]) -> Callable[..., str]:
        def get_cache_key(
            module: Any, devices: Any, compile_options: Any, backend: Any, *args: Any, **kwargs: Any
        ) -> str:
            # XLA's cache paths (xla.py) differ per host: the key is computed without them.
            compile_options = jax_xla.key_options(compile_options)
            key, hashes = tap.record(
                lambda: original_key(module, devices, compile_options, backend, *args, **kwargs)
            )
            try:
                # JAX 0.4.30 has no IgnoreCallbacks (nor the argument): then it is never used.
                ignore_type = getattr(_private("jax._src.cache_key"), "IgnoreCallbacks", None)
                no_ignore = getattr(ignore_type, "NO", None)
                ignore = args[0] if args else kwargs.get("ignore_callbacks", no_ignore)
                compression = "zstandard" if compilation_cache.zstandard is not None else "zlib"
                if getattr(compilation_cache, "zstd", None) is not None:
                    compression = "zstandard"
                adapter.remember_key_args(
                    key, (module, devices, compile_options, backend, ignore, compression), hashes
                )
            except Exception as exc:
                log.debug("compilecache: could not record key components: %s", exc)
            return key

        return get_cache_key

    # The directory only where the program set none: JAX then builds its cache for the marker.
    installed.saved_dir = _jax_value(DIR_OPTION)
    if not installed.saved_dir:
        try:
            jax.config.update(DIR_OPTION, MARKER_DIR)
            installed.set_dir = True
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: %s not set: %s", DIR_OPTION, exc)
    patches = installed.patches
    # From here on, what the program sets in code is known to be its own.
    patches.wrap(jax.config, "update", installed.settings.watch, label="jax.config.update")
    patches.wrap(compilation_cache, "get_file_cache", get_file_cache)
    patches.wrap(compilation_cache, "get_cache_key", get_cache_key)
    _tap_key_steps(patches, tap)
    installed.preloader = _read_ahead(cache, installed)
    # Drop any cache JAX initialised earlier so that the next compile builds ours.
    compilation_cache.reset_cache()
    installed.writers = cfg.writers  # COMPILECACHE_WRITERS: all, or first
    _installed = installed
    installed.watches_writes = _watch_cache_writes(installed)
    installed.xla = _route_xla_caches(cache, installed, cfg)
    _release_leases_after_compiles(cache, installed)
    log.info("compilecache: JAX %s routed through %s", jax.__version__, cache.store.url)
    return True


def _read_ahead(cache: Cache, installed: _Installed) -> jax_preload.Preloader | None:
    """Serve JAX's lookups from executables deserialised ahead (preload.py), started once
    the program's backends exist; record how each miss is compiled, for the entry it writes.
    ``None`` where the session reads no manifest or this JAX lacks the functions."""
    compilation_cache = _private("jax._src.compilation_cache")
    xla_bridge = _private("jax._src.xla_bridge")
    needed = ("get_executable_and_time", "decompress_executable", "extract_executable_and_time")
    if cache.prefetcher is None or not all(hasattr(compilation_cache, n) for n in needed):
        return None
    if not callable(getattr(xla_bridge, "backends", None)):
        return None
    if _positional(compilation_cache.get_executable_and_time) != 4:
        return None  # before JAX passed the executable's devices (0.4.x): JAX's own path
    adapter = installed.adapter

    def wanted() -> bool:
        # Only for a cache JAX reads: not turned off, and not checking its contents (the check
        # compares a fresh compile's bytes with the stored ones, and XLA names what it compiles
        # after what the process loaded before: a deserialisation beside it changes them).
        flag = getattr(_private("jax._src.config"), "compilation_cache_check_contents", None)
        return bool(_jax_value(ENABLE_OPTION)) and not (flag is not None and bool(flag.value))

    preloader = jax_preload.Preloader(cache, FRAMEWORK, store_key, wanted)

    def ours(backend: Any) -> bool:
        # JAX's cache for this backend is compilecache's, and reads as a cache: a disabled
        # cache, another one, or jax_compilation_cache_check_contents get nothing read ahead.
        get_cache = getattr(compilation_cache, "_get_cache", None)
        return (
            get_cache is not None and get_cache(backend) is adapter and not adapter.check_contents
        )

    def get_executable_and_time(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_executable_and_time(
            cache_key: str, compile_options: Any, backend: Any, executable_devices: Any
        ) -> Any:
            try:
                preloader.start()  # the backends exist by now, whatever the program did
                if ours(backend):
                    loaded = preloader.claim(
                        cache_key, compile_options, backend, executable_devices
                    )
                    if loaded is not None:
                        adapter.served(cache_key)
                        return loaded
            except Exception as exc:  # never raise into JAX: its own path reads
                log.debug("compilecache: read-ahead of %s not used: %s", cache_key, exc)
            found = original(cache_key, compile_options, backend, executable_devices)
            try:
                if found[0] is None:  # a miss: JAX compiles with these, and its entry says so
                    how = jax_preload.how_compiled(compile_options, executable_devices, backend)
                    if how:
                        adapter.remember_how_compiled(cache_key, how)
            except Exception as exc:
                log.debug("compilecache: how %s is compiled not recorded: %s", cache_key, exc)
            return found

        return get_executable_and_time

    def backends(original: Callable[[], Any]) -> Callable[[], Any]:
        def backends() -> Any:
            found = original()
            preloader.start()  # once: the program's backends exist (never raises)
            return found

        return backends

    patches = installed.patches
    patches.wrap(compilation_cache, "get_executable_and_time", get_executable_and_time)
    patches.wrap(xla_bridge, "backends", backends)
    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if callable(initialized) and initialized():
        preloader.start()
    return preloader


def _tap_key_steps(patches: Patches, tap: _KeyTap) -> None:
    """Let ``tap`` see ``cache_key.get``'s steps; where this JAX's module lacks the two names,
    nothing is tapped and the components are computed again after a miss."""
    ck = _private("jax._src.cache_key")
    if getattr(ck, "hashlib", None) is not hashlib or not callable(
        getattr(ck, "_log_cache_key_hash", None)
    ):
        log.debug("compilecache: JAX's key steps not tapped: cache_key has changed")
        return
    patches.wrap(ck, "_log_cache_key_hash", tap.wrap_log)
    patches.replace(ck, "hashlib", _HashlibWithTap(tap), label="jax._src.cache_key.hashlib")


_VERIFY_HELPERS = ("CacheVerificationError", "decompress_executable", "extract_executable_and_time")


def _check_contents(cache: Cache) -> bool:
    """Whether ``jax_compilation_cache_check_contents`` is set (read, as JAX reads it, when JAX
    builds its cache) and can be honoured; a warning, once, when it cannot. Never raises."""
    try:
        flag = getattr(_private("jax._src.config"), "compilation_cache_check_contents", None)
        if flag is None or not bool(flag.value):
            return False
        compilation_cache = _private("jax._src.compilation_cache")
        if all(hasattr(compilation_cache, name) for name in _VERIFY_HELPERS):
            return True
        cache.warn_once(
            "jax:check-contents",
            "jax_compilation_cache_check_contents is not honoured: this JAX lacks "
            "compilation_cache." + ", ".join(_VERIFY_HELPERS),
        )
    except Exception as exc:
        log.debug("compilecache: jax_compilation_cache_check_contents not read: %s", exc)
    return False


def _verifying_view(adapter: JaxCacheAdapter) -> Any:
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


def _all_write() -> bool:
    """Whether every process of a multi-process job writes (needs the write watcher)."""
    return _installed is not None and _installed.writers == "all" and _installed.watches_writes


def _watch_cache_writes(installed: _Installed) -> bool:
    """Wrap ``compiler._cache_write`` (looked up at call time) to learn why JAX does not hand a
    compile to ``put`` (host callbacks, the program's minimum compile time or entry size, not
    being process 0), to apply compilecache's minimum compile time where the program left JAX's
    at its default, and to let every process of a multi-process job write
    (COMPILECACHE_WRITERS=all). ``False`` when this JAX lacks these functions (explanations of
    never-stored compiles are then missing, JAX's own gates apply, and only process 0 writes)."""
    adapter, settings = installed.adapter, installed.settings
    try:
        compiler = _private("jax._src.compiler")
        original = compiler._cache_write
        jax_config = _private("jax._src.config")
        distributed = _private("jax._src.distributed")
        # What _cache_write calls past its gates, when compilecache's gates differ from JAX's.
        put = _private("jax._src.compilation_cache").put_executable_and_time
    except (ImportError, AttributeError) as exc:
        log.debug("compilecache: JAX cache writes not watched: %s", exc)
        return False
    should_raise = getattr(compiler, "_should_raise_persistent_cache_error", None)

    def skip_reason(compile_time: float, host_callbacks: Any) -> str:
        process = getattr(distributed.global_state, "process_id", 0)
        if process and not _all_write():
            return (
                f"JAX writes only from process 0 (this is process {process}; "
                "COMPILECACHE_WRITERS=first)"
            )
        if host_callbacks:
            return (
                "it uses host callbacks (jax.debug.print, jax.pure_callback, io_callback): "
                "JAX never stores those"
            )
        minimum = settings.min_compile_time()
        if minimum is not None and compile_time < minimum:
            return f"compiled in {compile_time:.2f}s, below {MIN_TIME_OPTION}={minimum:g} (set by the program)"
        return ""

    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def write(given: dict[str, Any], seconds: float) -> None:
        """JAX's write past its gates (compilecache's gates, already applied, differ)."""
        try:
            put(
                given["cache_key"],
                given["module_name"],
                given["executable"],
                given["backend"],
                int(seconds),
            )
        except Exception as exc:
            if should_raise is not None and should_raise(exc):
                raise  # what JAX raises from its own write (a check_contents mismatch)
            adapter.cache.warn_once("jax:put", f"write failed: {exc}")

    def cache_write(*args: Any, **kwargs: Any) -> Any:
        # Read the arguments by name: the signature changes between releases (JAX 0.11 dropped
        # ``host_callbacks``); anything unexpected goes to JAX's own function unexamined.
        try:
            given = _write_arguments(signature, args, kwargs)
            cache_key = given["cache_key"]
            seconds = _seconds(given["compile_time_secs"])  # may be a numpy scalar
            host_callbacks = given.get("host_callbacks", ())
        except Exception as exc:
            log.debug("compilecache: JAX cache write not examined: %s", exc)
            return original(*args, **kwargs)
        try:
            reason = skip_reason(seconds, host_callbacks)
        except Exception as exc:
            log.debug("compilecache: could not check a JAX cache write: %s", exc)
            return original(*args, **kwargs)
        if reason:
            adapter.not_written(cache_key, reason, seconds)
            return original(*args, **kwargs)  # JAX skips it too, logging as it does
        process = getattr(distributed.global_state, "process_id", 0)
        jax_minimum = float(jax_config.persistent_cache_min_compile_time_secs.value)
        # JAX's gate (process_id != 0: return) exists because its file cache was unsafe under
        # concurrent writers; our stores publish atomically and leases keep one compile per
        # key, so another process's entry (its keys differ from process 0's: the topology
        # fingerprint follows the process) is written as process 0's would be. And a program
        # that left JAX's minimum compile time at its default gets compilecache's.
        if process or seconds < jax_minimum:
            write(given, seconds)
            result = None
        else:
            result = original(*args, **kwargs)
        minimum_size = int(jax_config.persistent_cache_min_entry_size_bytes.value)
        if minimum_size > 0 and adapter.awaiting_write(cache_key):
            adapter.not_written(
                cache_key,
                f"its entry is smaller than {MIN_SIZE_OPTION}={minimum_size} (set by the program)",
                seconds,
            )
        return result

    installed.patches.replace(compiler, "_cache_write", cache_write, label="jax._cache_write")
    return True


_WRITE_ARGUMENTS = (
    "cache_key",
    "compile_time_secs",
    "module_name",
    "backend",
    "executable",
    "host_callbacks",  # up to JAX 0.10
)


def _write_arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The arguments of a ``_cache_write`` call by name: bound to its signature, or in JAX's
    order when it takes ``*args``. Raises when they cannot be read."""
    given: dict[str, Any] = {}
    if signature is not None:
        given = dict(signature.bind(*args, **kwargs).arguments)
    if "cache_key" not in given:
        given = {**dict(zip(_WRITE_ARGUMENTS, args, strict=False)), **kwargs}
    return given


def _route_xla_caches(cache: Cache, installed: _Installed, cfg: Config) -> jax_xla.XlaCaches | None:
    """Give XLA's caches this host's directories and carry the autotune results (xla.py).
    ``None`` (XLA then gets no cache directories) when this JAX has no place to do it."""
    try:
        compiler = _private("jax._src.compiler")
        caches = jax_xla.XlaCaches(
            cache, MARKER_DIR, _writes_here, cfg, roots=lambda: str(_jax_value(DIR_OPTION) or "")
        )
        installed.patches.wrap(
            compiler,
            "get_compile_options",
            lambda original: jax_xla.wrap_get_compile_options(original, caches),
        )
    except Exception as exc:
        log.debug("compilecache: XLA's caches not routed: %s", exc)
        return None
    caches.start()
    cache.finishers.append(caches.finish)
    return caches


def settings_notes(settings: ProgramSettings) -> list[str]:
    """What the program set of JAX's cache options that changes what compilecache does, in
    words (each said once per process: the summary line, ``explain``, ``doctor``)."""
    notes: list[str] = []
    if _jax_value(ENABLE_OPTION) is False:
        notes.append(
            f"the program set {ENABLE_OPTION}=False (or JAX_ENABLE_COMPILATION_CACHE=false): "
            "JAX's persistent cache is off, and compilecache's JAX layer with it"
        )
    elif not _jax_value(DIR_OPTION):
        notes.append(
            f"the program set {DIR_OPTION} to nothing: JAX keeps no persistent cache, and "
            "compilecache's JAX layer serves nothing"
        )
    minimum = settings.min_compile_time()
    if minimum is not None:
        notes.append(
            f"the program set {MIN_TIME_OPTION}={minimum:g}: compiles faster than that are not "
            "stored (JAX's rule, kept; COMPILECACHE_MIN_COMPILE_TIME applies on top)"
        )
    size = _jax_value(MIN_SIZE_OPTION)
    if settings.set_by_program(MIN_SIZE_OPTION) and isinstance(size, int) and size > 0:
        notes.append(
            f"the program set {MIN_SIZE_OPTION}={size}: entries smaller than that are not "
            "stored (JAX's rule, kept)"
        )
    if _jax_value(CHECK_OPTION) is True:
        notes.append(
            f"the program set {CHECK_OPTION}=True: the first lookup of "
            "each key in a process compiles again and is compared with the stored entry"
        )
    return notes


def _release_leases_after_compiles(cache: Cache, installed: _Installed) -> None:
    """Wrap ``compiler.compile_or_get_cached`` (looked up at call time by pxla) so that a
    single-flight lease taken by a miss is released when the compile is over, also when JAX
    never calls ``put`` (host callbacks, its own minimum compile time, not process 0) or the
    compile raises: waiting processes then stop waiting at once; and to say once when the
    program's own settings turned JAX's cache off. Without this function (another JAX) leases
    expire after their TTL."""
    xla = installed.xla
    notes = installed.notes

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            try:
                for note in settings_notes(installed.settings):
                    notes.note(note)
                return original(*args, **kwargs)
            finally:
                cache.finish_thread_leads()
                if xla is not None:
                    xla.after_compile()

        return compile_or_get_cached

    try:
        compiler = _private("jax._src.compiler")
        installed.patches.wrap(compiler, "compile_or_get_cached", wrap)
    except (ImportError, AttributeError) as exc:
        log.debug("compilecache: JAX compiles not watched: %s", exc)


def _writes_here() -> bool:
    """Whether this process's compiles reach ``put``: every process's do (COMPILECACHE_WRITERS=all),
    or only process 0's (``first``), and then the others must never hold a lease that others
    would wait on."""
    if _all_write():
        return True
    try:
        state = _private("jax._src.distributed").global_state
        return not getattr(state, "process_id", 0)
    except Exception:
        return True


def uninstall() -> None:
    """Restore JAX's functions and its cache directory option."""
    global _installed
    if _installed is None:
        return
    installed, _installed = _installed, None
    installed.patches.undo()
    if installed.preloader is not None:
        installed.preloader.stop()
    if installed.set_dir and _jax_value(DIR_OPTION) == MARKER_DIR:
        try:
            _private("jax").config.update(DIR_OPTION, installed.saved_dir)
        except (AttributeError, ValueError) as exc:
            log.debug("compilecache: %s not restored: %s", DIR_OPTION, exc)
    _private("jax._src.compilation_cache").reset_cache()


def active_adapter() -> JaxCacheAdapter | None:
    return _installed.adapter if _installed is not None else None


def program_min_compile_time() -> float | None:
    """The program's own ``jax_persistent_cache_min_compile_time_secs`` (``None``: JAX's default
    left, or JAX not hooked)."""
    installed = _installed
    return installed.settings.min_compile_time() if installed is not None else None


def settings_in_effect() -> dict[str, Any]:
    """What the program set of JAX's cache options, for doctor and ``check`` (empty when JAX is
    not hooked)."""
    installed = _installed
    if installed is None:
        return {}
    return {
        name: _jax_value(name)
        for name in (ENABLE_OPTION, DIR_OPTION, MIN_TIME_OPTION, MIN_SIZE_OPTION)
        if installed.settings.set_by_program(name)
        or (name == DIR_OPTION and _jax_value(name) != MARKER_DIR)
    }
