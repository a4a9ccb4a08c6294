"""Reading a JAX job's executables ahead: deserialised on a thread while the program starts.

A warm JAX start spends most of its cache time in XLA deserialising each executable (about 1.5 s
for a 12-layer transformer step on 2 cores), on the program's thread, at the moment the compile
asks for it. That work releases the GIL and needs only the entry and the backend. So once the
program's own backends exist (never earlier: until then the program may still choose platforms,
devices or ``jax.distributed``), a daemon thread reads the entries the job's last runs asked for
(its manifest, :mod:`compilecache.runtime.manifest`, in their order) and deserialises each with
the compile options and devices it was compiled with, which its writer recorded in the entry.

When JAX's lookup of a key comes (``compilation_cache.get_executable_and_time``), the executable
is handed over only if the key, the serialised compile options, the devices and the backend are
the ones of that lookup, and JAX's cache is compilecache's, not checking contents; otherwise, or
when the key was not read ahead, JAX's own path reads and deserialises as before. A key being
read or deserialised when its lookup comes is waited for (the work is half done, and each entry
is read once); never the room for it. At most ``MAX_HELD_BYTES`` of entries are held unclaimed;
what is not claimed ``KEEP_S`` seconds after the last read ahead is dropped. Only CPU executables
of a single-process job are read ahead: a GPU executable holds device memory while it waits, and
that has not been measured.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compilecache.host import framework_module as _private
from compilecache.runtime.cache import OWN_KIND_SEP, Cache
from compilecache.runtime.prefetch import PLAN_WAIT_S

log = logging.getLogger("compilecache")

# The entry's extra field that says how its executable was compiled (what deserialising needs).
EXTRA = "load"
# Stored bytes of entries held unclaimed at once; the thread waits for claims beyond that.
MAX_HELD_BYTES = 256 * 1024 * 1024
# What is not claimed this long after the last read ahead is dropped.
KEEP_S = 60.0
# A lookup waits this long at most for the executable being deserialised for it.
CLAIM_WAIT_S = 120.0
# At exit, how long to wait for a deserialisation under way.
EXIT_WAIT_S = 30.0
# Only these platforms' executables are read ahead.
PLATFORMS = ("cpu",)


def how_compiled(compile_options: Any, executable_devices: Any, backend: Any) -> dict[str, Any]:
    """What a reader needs to deserialise the executable compiled with these arguments of
    ``get_executable_and_time``, as JSON for the entry's header; ``{}`` when it cannot be said."""
    try:
        return {
            "options": base64.b64encode(compile_options.SerializeAsString()).decode("ascii"),
            "devices": [int(device.id) for device in executable_devices],
            "platform": str(backend.platform),
        }
    except Exception as exc:
        log.debug("compilecache: compile options not recorded: %s", exc)
        return {}


@dataclass
class _Loaded:
    """One executable read ahead, with what it was deserialised for."""

    executable: Any
    compile_time: int
    options: bytes
    devices: list[int]
    backend: Any
    entry: Any
    size: int
    read_s: float


@dataclass
class _Slot:
    """A key the thread is deserialising (``size`` stored bytes held for it): done when
    ``ready`` is set (``loaded`` is then the executable, or ``None`` when it could not be)."""

    size: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    loaded: _Loaded | None = None
    # The entry read, until it is deserialised, and how long its read took.
    entry: Any = None
    read_s: float = 0.0


class Preloader:
    """The read-ahead of one session's JAX executables."""

    def __init__(
        self,
        cache: Cache,
        framework: str,
        store_key: Callable[[str], str],
        wanted: Callable[[], bool] = lambda: True,
    ) -> None:
        self.cache = cache
        self.framework = framework
        self._store_key = store_key
        # Whether the program's cache settings still want executables read (asked per key).
        self._wanted = wanted
        self._prefix = store_key("")
        self._slots: dict[str, _Slot] = {}
        # Keys whose lookup came before the thread reached them: it skips them.
        self._passed: set[str] = set()
        # The key the thread is reading now, and lookups waiting for that read.
        self._reading: str | None = None
        self._asked: set[str] = set()
        self._held = 0
        self._lock = threading.Condition()
        self._started = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    # The program's thread.

    def start(self) -> None:
        """The program's backends exist: start reading ahead (once; never raises)."""
        if self._started:  # the common case, on every call of JAX's backends(): no lock
            return
        with self._lock:
            if self._started or self._stopped or self.cache.prefetcher is None:
                return
            self._started = True
        try:
            self._thread = threading.Thread(
                target=self._run, name="compilecache-jax-read-ahead", daemon=True
            )
            self._thread.start()
        except Exception as exc:  # no thread: every lookup reads as before
            log.debug("compilecache: JAX read-ahead not started: %s", exc)

    def claim(
        self, key: str, compile_options: Any, backend: Any, executable_devices: Any
    ) -> tuple[Any, int] | None:
        """The executable read ahead for JAX's lookup of ``key`` and its compile time, when it
        was deserialised for exactly these compile options, devices and backend; ``None``
        otherwise (JAX's own path then reads it). Counts the hit. Never raises."""
        with self._lock:
            slot = self._slots.get(key) or self._wait_for_read(key)
            if slot is None:
                self._passed.add(key)
                return None
        slot.ready.wait(CLAIM_WAIT_S)
        with self._lock:
            if self._slots.get(key) is slot:
                del self._slots[key]
                self._held -= slot.size
                self._lock.notify_all()
        loaded = slot.loaded
        if loaded is None:
            return None
        try:
            if not self._matches(loaded, compile_options, backend, executable_devices):
                log.debug("compilecache: %s was read ahead for other options or devices", key)
                return None
            self.cache.count_read_ahead(
                self.framework, self._store_key(key), loaded.entry, loaded.size, loaded.read_s
            )
            self.cache.stats.add("read_ahead_hits", framework=self.framework)
        except Exception as exc:
            log.debug("compilecache: %s read ahead not used: %s", key, exc)
            return None
        return loaded.executable, loaded.compile_time

    def _wait_for_read(self, key: str) -> _Slot | None:
        """Under the lock: the slot of ``key`` once the thread's read of it ends, when that
        read is under way (its bytes come no later than a read of the lookup's own would, and
        the entry is read once); ``None`` when it is not, or the read found nothing usable."""
        if self._reading != key:
            return None
        self._asked.add(key)
        self._lock.notify_all()  # the thread, should it wait for room: this key needs none
        deadline = time.monotonic() + CLAIM_WAIT_S
        while self._reading == key and key not in self._slots:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._lock.wait(left)
        self._asked.discard(key)
        return self._slots.get(key)

    def stop(self) -> None:
        """Read nothing more and drop what is held."""
        with self._lock:
            self._stopped = True
            self._drop()

    def finish(self) -> None:
        """At exit: stop, and wait for a deserialisation under way (at most ``EXIT_WAIT_S``). A
        daemon thread still inside XLA's C++ code when the interpreter exits aborts the process
        ("FATAL: exception not rethrown"), seen where a warm program ended before reading ahead
        had. Never raises."""
        self.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(EXIT_WAIT_S)

    @staticmethod
    def _matches(loaded: _Loaded, options: Any, backend: Any, devices: Any) -> bool:
        return (
            backend is loaded.backend
            and [int(d.id) for d in devices] == loaded.devices
            and options.SerializeAsString() == loaded.options
        )

    # The read-ahead thread.

    def _run(self) -> None:
        try:
            prefetcher = self.cache.prefetcher
            if prefetcher is None:
                return
            xla_bridge = _private("jax._src.xla_bridge")
            if xla_bridge.process_count() != 1:
                return  # another process's devices are in the key: left to JAX
            keys = [
                k[len(self._prefix) :]
                for k in prefetcher.job_keys(PLAN_WAIT_S)
                if k.startswith(self._prefix) and OWN_KIND_SEP not in k
            ]
            backends = xla_bridge.backends()
            for key in keys:
                if not self._read_ahead(key, backends):
                    break
        except Exception as exc:  # never fail a program for a read-ahead
            log.debug("compilecache: JAX read-ahead stopped: %s", exc)
        finally:
            timer = threading.Timer(KEEP_S, self._expire)
            timer.daemon = True
            timer.start()

    def _read_ahead(self, key: str, backends: dict[str, Any]) -> bool:
        """Read and deserialise ``key`` unless its lookup came first; ``False`` to stop. A
        lookup that comes during the read waits for it; the key's slot (which the lookup then
        waits on) is made once the bytes are read and room is held for them, room the key's
        own lookup never waits for."""
        if not self._wanted():
            return False
        with self._lock:
            if self._stopped:
                return False
            if key in self._passed or key in self._slots:
                return True
            self._reading = key
        try:
            slot, go_on = self._read(key)
        finally:
            with self._lock:
                self._reading = None
                self._lock.notify_all()  # a lookup waiting for this read
        if slot is None:
            return go_on
        try:
            slot.loaded = self._deserialise(slot.entry, slot.size, slot.read_s, backends)
        except Exception as exc:
            log.debug("compilecache: %s not read ahead: %s", key, exc)
        finally:
            slot.entry = None  # held by what was loaded, or not at all
            slot.ready.set()
        return True

    def _read(self, key: str) -> tuple[_Slot | None, bool]:
        """The read of ``key`` (the thread's ``_reading``): its slot, made and held, or
        ``None`` (nothing usable, no room in time, or stopped); and whether to go on."""
        try:
            found = self.cache.read_ahead(self.framework, self._store_key(key))
        except Exception as exc:
            log.debug("compilecache: %s not read ahead: %s", key, exc)
            return None, True
        if found is None:
            return None, True
        entry, size, read_s = found
        if not self._room_for(size, key):
            return None, False
        with self._lock:
            if self._stopped:
                self._held -= size
                return None, False
            slot = self._slots[key] = _Slot(size=size, entry=entry, read_s=read_s)
            return slot, True

    def _room_for(self, size: int, key: str | None = None) -> bool:
        """Hold ``size`` more bytes, once claims leave room or ``key``'s lookup waits for it
        (``False``: neither came in time, or stopped)."""
        deadline = time.monotonic() + KEEP_S
        with self._lock:
            while (
                self._held
                and self._held + size > MAX_HELD_BYTES
                and not self._stopped
                and key not in self._asked
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            if self._stopped:
                return False
            self._held += size
            return True

    def _deserialise(
        self, entry: Any, size: int, read_s: float, backends: dict[str, Any]
    ) -> _Loaded | None:
        how = entry.header.extra.get(EXTRA)
        if not isinstance(how, dict) or how.get("platform") not in PLATFORMS:
            return None
        backend = backends.get(how["platform"])
        if backend is None:
            return None
        wanted = [int(i) for i in how["devices"]]
        by_id = {int(d.id): d for d in backend.devices()}
        if not wanted or any(i not in by_id for i in wanted):
            return None
        xla_client = _private("jax._src.lib").xla_client
        compilation_cache = _private("jax._src.compilation_cache")
        options_bytes = base64.b64decode(how["options"])
        options = xla_client.CompileOptions.ParseFromString(options_bytes)
        devices = xla_client.DeviceList(tuple(by_id[i] for i in wanted))
        # What JAX's get_executable_and_time does with the bytes its cache returns.
        serialized, compile_time = compilation_cache.extract_executable_and_time(
            compilation_cache.decompress_executable(entry.payload)
        )
        executable = backend.deserialize_executable(serialized, devices, options)
        return _Loaded(
            executable,
            compile_time,
            options.SerializeAsString(),
            wanted,
            backend,
            entry,
            size,
            read_s,
        )

    def _expire(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        # Under the lock. A slot still being deserialised is finished by its thread and then
        # only its claim can take it; the others go.
        for key, slot in list(self._slots.items()):
            if slot.ready.is_set():
                del self._slots[key]
                self._held -= slot.size
        self._lock.notify_all()
