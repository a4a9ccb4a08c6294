"""The store behind torch's remote-cache interface: the backend torch builds for each layer
(``backend_override_cls``), its lookups and writes (FX graphs, AOTAutograd entries, autotune
records), and the graphs torch's own directory served, counted and copied to the store.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from compilecache import entry
from compilecache.entry import EntryHeader
from compilecache.frameworks.torch import words as torch_words
from compilecache.frameworks.torch.modules import AUTOGRAD_CACHE, CODECACHE, REMOTE_CACHE
from compilecache.frameworks.torch.payloads import (
    KNOWN_IDS,
    SAFE_KEY,
    fx_keys_in,
    graph_name,
    parse_debug_lines,
    store_key,
    time_taken_s,
    torch_key_of,
    unwrap,
)
from compilecache.frameworks.torch.switches import AOT, AUTOTUNE, FX, Switches
from compilecache.host import cpu_target, torch_versions
from compilecache.host import framework_module as _private
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache
from compilecache.stats import TORCH_LOCAL_LEVEL, function_counter, level_counter

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK
LAYERS = ("fx", "aot", "autotune", "kernel", "pch", "extension")

# Layers whose lookups are single-flight and whose misses are explained: one compile each.
# (Kernels are built inside an FX compile, which its lease already covers; autotune results are
# small records, not compiles.)
LEAD_LAYERS = ("fx", "aot")

# RemoteCache subclass -> our layer name.
REMOTE_CACHES = {
    "RemoteFxGraphCache": FX,
    "RemoteAOTAutogradCache": AOT,
    "RemoteAutotuneCache": AUTOTUNE,
    "RemoteBundledAutotuneCache": AUTOTUNE,
}

# The class whose backend says whether compilecache is a layer's remote cache.
LAYER_CLASS = {
    FX: "RemoteFxGraphCache",
    AOT: "RemoteAOTAutogradCache",
    AUTOTUNE: "RemoteAutotuneCache",
}

# Bounded: keys computed but not yet written (local hits never write; ~100 KB each).
_MAX_PENDING = 64


@dataclass
class Accounting:
    """Exclusive compile times, so that an AOT entry, its FX graphs and their kernels do not
    count the same seconds three times: torch's FX time includes the kernels built during it,
    and the AOT time includes its FX graphs."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kernel_s: float = 0.0  # kernel builds since the last FX write
    fx_s: float = 0.0  # FX compile times since the last AOT write

    def kernel_built(self, seconds: float) -> None:
        with self.lock:
            self.kernel_s += seconds

    def exclusive(self, layer: str, seconds: float) -> float:
        with self.lock:
            if layer == "fx":
                own = max(0.0, seconds - self.kernel_s)
                self.kernel_s = 0.0
                self.fx_s += seconds
                return own
            if layer == "aot":
                own = max(0.0, seconds - self.fx_s)
                self.fx_s = 0.0
                return own
            return seconds


class Pending:
    """Key -> torch's debug lines, remembered between computing a key and writing its entry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: OrderedDict[str, list[str]] = OrderedDict()

    def remember(self, key: str, lines: list[str]) -> None:
        with self._lock:
            self._lines[key] = lines
            self._lines.move_to_end(key)
            while len(self._lines) > _MAX_PENDING:
                self._lines.popitem(last=False)

    def pop(self, key: str) -> list[str] | None:
        with self._lock:
            return self._lines.pop(key, None)


class StoreLayers:
    """The store as torch's remote cache, for one torch integration."""

    def __init__(
        self,
        cache: Cache,
        switches: Switches,
        accounting: Accounting,
        pending: Pending,
    ) -> None:
        self.cache = cache
        self.switches = switches
        self.accounting = accounting
        self.pending = pending

    def get(self, layer: str, remote_key: str) -> bytes | None:
        key = store_key(layer, remote_key)
        if self.switches.layer_off(layer):
            return None  # torch asked a backend it built earlier: its switches say no now
        if not self.switches.serves(layer, key):
            # Cleared by torch's clear() in this process: a miss until this process writes it.
            self.cache.stats.add("misses", framework=FRAMEWORK)
            self.cache.stats.add(f"{FRAMEWORK}.{layer}.misses")
            return None
        if layer in LEAD_LAYERS:
            # Single-flight: on a miss, wait for another process compiling the same graph, or
            # lead (released in put, or when the outermost compile_fx returns without a put).
            found = self.cache.load_or_lead(FRAMEWORK, key)
        else:
            found = self.cache.load(FRAMEWORK, key)
        if found is not None and layer == AOT and not self._fx_graphs_present(found.payload):
            self.cache.stats.add(f"{FRAMEWORK}.aot.incomplete")
            found = None
        if found is None:
            self.cache.stats.add(f"{FRAMEWORK}.{layer}.misses")
            return None
        self.cache.stats.add(f"{FRAMEWORK}.{layer}.hits")
        self.pending.pop(torch_key_of(remote_key))
        extra = found.header.extra
        if extra.get("encoding") == "pickle":
            wrapped = {
                "data": base64.b64encode(found.payload).decode("ascii"),
                "time_taken_ms": int(extra.get("time_taken_ms", 0)),
            }
            return json.dumps(wrapped).encode("ascii")
        return found.payload

    def _fx_graphs_present(self, payload: bytes) -> bool:
        """Whether every FX graph an AOTAutograd entry names can be loaded: from the store
        (served now) or torch's own directory. Without them torch compiles the graph again,
        or raises under ``strict_autograd_cache``; so the entry is a miss instead. Store
        errors count as present (torch then finds out, as it would)."""
        for fx_key in fx_keys_in(payload):
            key = f"{FRAMEWORK}/{FX}/{fx_key}"
            if self.switches.serves(FX, key) and self._stored(key):
                continue
            if not self._in_torch_directory(fx_key):
                log.debug("compilecache: AOTAutograd entry's FX graph %s is missing", fx_key)
                return False
        return True

    def _stored(self, key: str) -> bool:
        try:
            self.cache.await_write(key)  # an FX graph this process compiled, being written
            return self.cache.store.stat(key) is not None
        except Exception:
            return True

    @staticmethod
    def _in_torch_directory(fx_key: str) -> bool:
        try:
            codecache = sys.modules[CODECACHE]
            directory = codecache.FxGraphCache._get_tmp_dir_for_key(fx_key)
            return os.path.isdir(directory) and bool(os.listdir(directory))
        except Exception:
            return False

    def put(self, layer: str, remote_key: str, data: bytes) -> None:
        key = store_key(layer, remote_key)
        handed = False
        try:
            if not self.switches.layer_off(layer):
                self._put(layer, key, remote_key, data)
                handed = True
        finally:
            if not handed:  # a handed write ends the lease once written
                self.cache.finish_lead(key)

    def _put(self, layer: str, key: str, remote_key: str, data: bytes) -> None:
        """Make the entry of torch's ``data`` here (its key's debug lines and compile time are
        this thread's) and hand its encoding and write to the background thread: torch's
        compile goes on without waiting for the store, as JAX's does."""
        payload, extra, taken_s = unwrap(data, pickled=layer in ("fx", "aot"))
        torch_key = torch_key_of(remote_key)
        lines = self.pending.pop(torch_key) if layer in ("fx", "aot") else None
        components, readable = parse_debug_lines(lines or [])
        extra.update({"layer": layer, "remote_key": remote_key, "time_taken_s": taken_s})
        if layer in LEAD_LAYERS:
            # Inductor generates C++ for this CPU's vector ISA and torch's key does not say
            # which: every read checks it against the reading host (host.HostCheck).
            extra["cpu"] = cpu_target()
        if layer not in LEAD_LAYERS:
            extra[entry.INTERNAL] = True  # an autotune record: part of a graph, not a graph
        if readable:
            extra["readable"] = readable
        header = EntryHeader(
            framework=FRAMEWORK,
            key=key,
            name=graph_name(layer),
            compile_time_s=self.accounting.exclusive(layer, taken_s),
            versions=torch_versions(),
            components=components,
            extra=extra,
        )
        # Marked written now, as torch's own put is: a lookup after a clear() in this process
        # is served (it waits for the write, see Cache.await_write).
        self.switches.wrote(layer, key)
        self.cache.save_later(
            key, functools.partial(self._write, header, payload, readable), awaited=True
        )

    def _write(self, header: EntryHeader, payload: bytes, readable: dict[str, str]) -> None:
        """Store one entry of :meth:`_put` (on the background thread). Never raises."""
        try:
            stored = self.cache.save(header, payload)
            if header.extra.get("layer") in LEAD_LAYERS:
                # torch writes only after its own lookup missed: every put here is a miss of ours.
                self._explain(header, readable, stored)
        except Exception as exc:
            self.cache.stats.add("errors", framework=FRAMEWORK)
            self.cache.warn_once("torch:put", f"write failed: {exc}")

    def _explain(self, header: EntryHeader, readable: dict[str, str], stored: bool) -> None:
        """Record why this graph missed: the nearest stored entry of the same name and layer,
        and which of torch's hash components differ (``torch: thread count 2 -> 1``)."""
        layer = str(header.extra.get("layer", ""))
        explain.record_miss(
            self.cache,
            framework=FRAMEWORK,
            name=header.name,
            key=header.key,
            components=header.components,
            readable=readable,
            prefix=f"{FRAMEWORK}/{layer}/",
            compile_time_s=header.compile_time_s,
            stored=stored,
            reason="" if stored else self.cache.skip_reason(header.compile_time_s, header.key),
            background=True,
        )

    def local_hit(self, layer: str, torch_key: str) -> None:
        """A graph torch's own directory served: a hit of the ``torch-local`` level; the time
        saved is the stored entry's compile time when the store has the graph."""
        self.pending.pop(torch_key)
        stats = self.cache.stats
        stats.add("hits", framework=FRAMEWORK)
        stats.add(f"{FRAMEWORK}.{layer}.local_hits")
        stats.add(level_counter(TORCH_LOCAL_LEVEL, "hits"))
        key = f"{FRAMEWORK}/{layer}/{torch_key}" if SAFE_KEY.match(torch_key) else ""
        try:
            info = self.cache.store.stat(key) if key else None
        except Exception:  # a store that is down: the hit counts, the time saved is unknown
            info = None
        if info is None and key and self.cache.writes(key) and not self.switches.layer_off(layer):
            # torch's own directory had it, the store does not: the store gets it too, so that
            # a new machine is as warm as this one (a program that ran under plain torch before).
            name = graph_name(layer)  # the compiling thread's context: not the queue's
            self.cache.background.add(
                functools.partial(self._backfill, layer, torch_key, key, name)
            )
        if info is not None:
            saved = float(info.meta.compile_time_s)
            stats.add("compile_time_saved_s", saved, framework=FRAMEWORK)
            stats.add(level_counter(TORCH_LOCAL_LEVEL, "compile_time_saved_s"), saved)
            if info.meta.name:
                stats.add(function_counter(FRAMEWORK, info.meta.name, "hits"))
                stats.add(
                    function_counter(FRAMEWORK, info.meta.name, "compile_time_saved_s"), saved
                )

    def _backfill(self, layer: str, torch_key: str, key: str, name: str) -> None:
        """Store the entry torch's own directory served for ``torch_key`` (the newest file
        under its key: torch checks a candidate's guards wherever it comes from). Runs on the
        background thread; never raises."""
        try:
            module = sys.modules[CODECACHE if layer == FX else AUTOGRAD_CACHE]
            cls = module.FxGraphCache if layer == FX else module.AOTAutogradCache
            directory = cls._get_tmp_dir_for_key(torch_key)
            paths = [os.path.join(directory, name) for name in os.listdir(directory)]
            newest = max(paths, key=os.path.getmtime)
            with open(newest, "rb") as f:
                payload = f.read()
            cache_id, version = KNOWN_IDS[layer]
            remote_key = f"pt2:{cache_id}::{torch_key}:c{version}"
            taken_s = time_taken_s(payload)
            extra: dict[str, Any] = {
                "encoding": "pickle",
                "time_taken_ms": int(taken_s * 1000),
                "layer": layer,
                "remote_key": remote_key,
                "time_taken_s": taken_s,
                "source": "torch-local",
                "cpu": cpu_target(),
            }
            header = EntryHeader(
                framework=FRAMEWORK,
                key=key,
                name=name,
                compile_time_s=taken_s,
                versions=torch_versions(),
                extra=extra,
            )
            if self.cache.save(header, payload):
                self.cache.stats.add(f"{FRAMEWORK}.{layer}.local_backfills")
        except Exception as exc:  # a convenience: the program is served either way
            log.debug("compilecache: torch's local %s entry %s not stored: %s", layer, key, exc)


# The store layers of the installed integration: torch's backends look them up at call time.
_active: StoreLayers | None = None


def activate(layers: StoreLayers | None) -> None:
    """Make ``layers`` what every backend torch built serves (None: nothing, uninstalled)."""
    global _active
    _active = layers


class BackendFactory:
    """What a ``RemoteCache`` subclass builds its backend with (``backend_override_cls``):
    compilecache's :class:`StoreBackend`, except where the program itself switched torch's
    remote cache on for that layer: then torch's own Redis backend, as without compilecache."""

    def __init__(self, layer: str, class_name: str) -> None:
        self.layer = layer
        self.class_name = class_name

    def __call__(self) -> Any:
        integration = _active
        if integration is not None and integration.switches.chosen(self.layer) is not True:
            return StoreBackend(self.layer)
        remote = _private(REMOTE_CACHE)
        return remote.RedisRemoteCacheBackend(self.class_name)

    def __repr__(self) -> str:
        return f"compilecache.BackendFactory({self.layer!r})"


class StoreBackend:
    """A ``RemoteCacheBackend[bytes]`` for one layer, on the installed integration.

    Built by torch through ``backend_override_cls`` (for the FX cache on every lookup, so it is
    cheap). It looks the integration up at call time: AOTAutograd keeps its remote cache object
    for the life of the process, and it must follow ``enable``/``disable``. Never raises.
    """

    def __init__(self, layer: str) -> None:
        self.layer = layer
        self._name = f"backend:compilecache:{layer}"

    def get(self, key: str) -> bytes | None:
        integration = _active
        if integration is None:
            return None
        try:
            return integration.get(self.layer, key)
        except Exception as exc:  # never raise into torch
            integration.cache.warn_once(
                f"torch:get:{self.layer}", f"{self.layer} lookup failed: {exc}"
            )
            return None

    def put(self, key: str, data: bytes) -> None:
        integration = _active
        if integration is None:
            return
        try:
            integration.put(self.layer, key, data)
        except Exception as exc:  # never raise into torch: it would fail the user's compile
            integration.cache.stats.add("errors", framework=FRAMEWORK)
            integration.cache.warn_once(
                f"torch:put:{self.layer}", f"{self.layer} write failed: {exc}"
            )

    # torch's RemoteCacheBackend spelling, for callers that use the underscored methods.
    _get = get
    _put = put
