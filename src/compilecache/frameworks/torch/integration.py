"""torch.compile integration: Inductor's FX graph cache, the AOTAutograd cache, the autotune
caches and the CPU kernel binaries, all through compilecache.

Hooks (each checked on the installed torch, with a warning and no change if missing):

- **Remote caches.** Inductor's ``RemoteCache`` subclasses (``torch._inductor.remote_cache``)
  build their backend from the class attribute ``backend_override_cls`` when it is set (torch's
  own tests patch it). Where the program has not set one, it is set on ``RemoteFxGraphCache``
  (layer ``fx``), ``RemoteAOTAutogradCache`` (``aot``), ``RemoteAutotuneCache`` and
  ``RemoteBundledAutotuneCache`` (``autotune``) to a factory of :class:`StoreBackend`.
  compilecache sets none of torch's flags: torch's own questions "use the remote cache?" are
  answered "yes" for the store exactly where torch would cache on its own and the program said
  nothing of remote caches (:mod:`compilecache.frameworks.torch.switches` has the rules). So
  every switch of torch's means what it means without compilecache, and keys are the ones a
  plain torch process computes.
- **Kernels.** ``CppBuilder.build`` is wrapped (:mod:`compilecache.frameworks.torch.kernels`) so
  that CPU kernel binaries and the ISA probe builds travel as ``kernel`` entries: a new machine
  loads them instead of running the C++ compiler.
- **Key components.** ``codecache.compiled_fx_graph_hash`` and
  ``autograd_cache._get_debug_lines_for_cache_key`` are wrapped to remember the
  ``[hash] attr: value`` lines torch computes with each key (AOTAutograd computes them only with
  debug logging on; we ask for them anyway); they are stored with the entry (``components`` and
  ``extra["readable"]``) for miss explanations.
- **Single-flight.** FX and AOTAutograd lookups go through ``Cache.load_or_lead``: of several
  processes missing the same graph, one compiles it and the others wait for its entry. A lease
  ends with the graph's write, or when ``_compile_fx_inner`` / ``compile_fx`` returns without
  one (a bypass, an error); AOTAutograd writes its entry at the first backward, so its lease is
  kept up to ``AOT_WRITE_GRACE_S`` longer.
- **Miss explanations.** torch writes to a remote cache only after its lookup missed, so each FX
  or AOTAutograd ``put`` is a miss of ours: it is explained against the nearest stored entry of
  the same graph name (``explain.record_miss``) from the components above.
- **ISA probes.** ``VecISA._build_probe_env`` (optional): the child Pythons that dlopen the ISA
  probe libraries get ``COMPILECACHE_DISABLE=1``, so that ``compilecache run``'s bootstrap does
  not start compilecache in each of them (~0.15 s apiece, six per process on x86).

An AOTAutograd entry is only useful with its FX graphs: torch raises under
``strict_autograd_cache`` (and compiles the graph again otherwise) when they are missing. An
AOTAutograd hit is therefore served only when the FX graphs it names are in the store or in
torch's own directory (an FX entry evicted from a bounded store makes it a miss).

**torch's local hits are counted**. torch looks in its own directory first; a graph found there
never reaches compilecache. ``FxGraphCache._record_result`` and
``AOTAutogradCache._record_result`` (torch's own hit/miss bookkeeping, told whether a hit was
local) are wrapped: a local hit is a compilecache hit of the level ``torch-local``
(``torch.fx.local_hits``, ``torch.aot.local_hits``, ``level.torch-local.hits``), and the compile
time it saved is the stored entry's when the store holds that graph. torch's local caches stay
on: the kernel binaries and generated modules must be in its directory for torch to load them.

**Probe answers**: the vector-ISA probes and the compiler identity checks that torch
repeats on every start are answered from the store (:mod:`compilecache.frameworks.torch.probes`).

torch imports ``torch._inductor`` (and Dynamo, ~2.5 s) lazily, so nothing here is imported at
``install``: each hook is applied when its module is first imported (``_importhook``), which
always happens before the first compile looks anything up.

The backend never raises into torch: an exception from a remote ``put`` fails the user's compile
(torch's AOTAutograd write is outside any ``try``). Store errors are counted misses or failed writes (:class:`compilecache.runtime.cache.Cache`).

Stored payloads are torch's own bytes: for ``fx`` and ``aot`` the pickled entry (torch's JSON
wrapper and its base64 are removed, the Cache compresses it), for ``autotune`` torch's JSON.
Store keys: ``torch/fx/<key>``, ``torch/aot/<key>``, ``torch/autotune/<sha256>``,
``torch/kernel/<sha256>``, ``torch/pch/<sha256>``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import pickle
import pickletools
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compilecache import _importhook, entry
from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.frameworks.torch import dynamo as torch_dynamo
from compilecache.frameworks.torch import extensions as torch_extensions
from compilecache.frameworks.torch import switches as torch_switches
from compilecache.frameworks.torch import words as torch_words
from compilecache.frameworks.torch.dynamo import DynamoPackages
from compilecache.frameworks.torch.dynamo import key as torch_dynamo_key
from compilecache.frameworks.torch.extensions import ExtensionCache
from compilecache.frameworks.torch.headers import HeaderCache, HeaderHook
from compilecache.frameworks.torch.kernels import BuildHook, KernelCache
from compilecache.frameworks.torch.probes import ProbeCache, ProbeHooks
from compilecache.frameworks.torch.sources import SourceKeyHooks
from compilecache.frameworks.torch.switches import AOT, AUTOTUNE, FX, Switches
from compilecache.frameworks.torch.templates import TemplateHooks
from compilecache.host import cpu_target, torch_versions
from compilecache.host import framework_module as _private
from compilecache.patches import Patches
from compilecache.runtime import explain
from compilecache.runtime.cache import Cache
from compilecache.stats import TORCH_LOCAL_LEVEL, function_counter, level_counter

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK  # importing it registers the vocabulary
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
_LAYER_CLASS = {
    FX: "RemoteFxGraphCache",
    AOT: "RemoteAOTAutogradCache",
    AUTOTUNE: "RemoteAutotuneCache",
}
# The cache ids torch 2.6-2.13 uses in its remote keys ("pt2:<id>::<key>:c<version>"); with these
# the store key is readable, anything else is hashed whole (a new id never meets an old entry).
_KNOWN_IDS = {"fx": ("fx-graph-v1", "1"), "aot": ("autograd-experimental", "1")}
_REMOTE_KEY = re.compile(r"^pt2:(?P<id>.*)::(?P<key>.+):c(?P<version>[0-9]+)$")
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
# An FX graph's key as torch prints it ("f" and 51 base32 characters), found in an AOTAutograd
# entry's pickle.
_FX_KEY = re.compile(r"^f[a-z0-9]{40,60}$")

# How long an AOTAutograd lease outlives its compile, waiting for the first backward call.
AOT_WRITE_GRACE_S = 60.0
# Bounded: keys computed but not yet written (local hits never write; ~100 KB each).
_MAX_PENDING = 64
_MAX_READABLE = 300

REMOTE_CACHE = "torch._inductor.remote_cache"
CPP_BUILDER = "torch._inductor.cpp_builder"
CODECACHE = "torch._inductor.codecache"
INDUCTOR_UTILS = "torch._inductor.utils"
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"
AOT_RESULT = "torch._functorch._aot_autograd.aot_autograd_result"
GRAPH_COMPILE = "torch._functorch._aot_autograd.graph_compile"
AOT_AUTOGRAD = "torch._functorch.aot_autograd"
AUTOTUNE_CACHE = "torch._inductor.runtime.autotune_cache"
TEST_CASE = "torch._inductor.test_case"
CPU_VEC_ISA = "torch._inductor.cpu_vec_isa"
COMPILE_FX = "torch._inductor.compile_fx"
CODEGEN_COMMON = "torch._inductor.codegen.common"
CPP_EXTENSION = torch_extensions.MODULE

# torch's own decisions, wrapped where they are defined and rebound in the modules that imported
# them by name: (names, the defining module, the importing modules). The first name is the
# function; others are aliases of it.
_DECISIONS: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    (
        ("should_use_remote_fx_graph_cache",),
        INDUCTOR_UTILS,
        (COMPILE_FX, AUTOGRAD_CACHE, AOT_RESULT),
    ),
    (("should_use_remote_autograd_cache",), AUTOGRAD_CACHE, (GRAPH_COMPILE, AOT_AUTOGRAD)),
    # Dynamo packages keep AOTAutograd's entries in plain torch's form (AotBackends.bundling).
    (("should_bundle_autograd_cache",), AUTOGRAD_CACHE, (GRAPH_COMPILE,)),
    (("fresh_cache", "fresh_inductor_cache"), INDUCTOR_UTILS, (COMPILE_FX, TEST_CASE)),
    (("_should_use_remote_autotune_cache",), AUTOTUNE_CACHE, ()),
)
# Without these, compilecache would not know when torch consults a remote cache: FX graphs and
# AOTAutograd entries are then not carried (a warning says so). The others are optional.
_REQUIRED_DECISIONS = ("should_use_remote_fx_graph_cache", "should_use_remote_autograd_cache")

HOOKED_MODULES = (
    REMOTE_CACHE,
    INDUCTOR_UTILS,
    CPP_BUILDER,
    CODECACHE,
    AUTOGRAD_CACHE,
    AOT_RESULT,
    GRAPH_COMPILE,
    AOT_AUTOGRAD,
    AUTOTUNE_CACHE,
    TEST_CASE,
    CPU_VEC_ISA,
    COMPILE_FX,
    CODEGEN_COMMON,
    CPP_EXTENSION,
    *torch_dynamo.MODULES,
)


def store_key(layer: str, remote_key: str) -> str:
    """``pt2:fx-graph-v1::<key>:c1`` -> ``torch/fx/<key>``; other shapes hash the whole key."""
    match = _REMOTE_KEY.match(remote_key)
    if match is not None and _KNOWN_IDS.get(layer) == (match["id"], match["version"]):
        key = match["key"]
        if _SAFE_KEY.match(key):
            return f"torch/{layer}/{key}"
    return f"torch/{layer}/{hashlib.sha256(remote_key.encode()).hexdigest()}"


def torch_key_of(remote_key: str) -> str:
    """The key torch computed (``fxyz...``) inside a remote key."""
    match = _REMOTE_KEY.match(remote_key)
    return match["key"] if match is not None else remote_key


def parse_debug_lines(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``[hash] attr: value`` lines -> ({attr: hash}, {attr: value, truncated})."""
    components: dict[str, str] = {}
    readable: dict[str, str] = {}
    for line in lines:
        if not line.startswith("["):
            continue
        digest, sep, rest = line[1:].partition("] ")
        if not sep:
            continue
        attr, _, value = rest.partition(": ")
        components[attr] = digest
        readable[attr] = value if len(value) <= _MAX_READABLE else value[:_MAX_READABLE] + "..."
    return components, readable


def fx_keys_in(payload: bytes) -> list[str]:
    """The FX graph keys an AOTAutograd entry's pickle names (its forward and backward), read
    with :mod:`pickletools` without running the pickle; ``[]`` when none is found."""
    keys: list[str] = []
    with contextlib.suppress(Exception):
        for _op, arg, _pos in pickletools.genops(payload):
            if isinstance(arg, str) and _FX_KEY.match(arg) and arg not in keys:
                keys.append(arg)
    return keys


@dataclass
class _Accounting:
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


class _Pending:
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


class BackendFactory:
    """What a ``RemoteCache`` subclass builds its backend with (``backend_override_cls``):
    compilecache's :class:`StoreBackend`, except where the program itself switched torch's
    remote cache on for that layer: then torch's own Redis backend, as without compilecache."""

    def __init__(self, layer: str, class_name: str) -> None:
        self.layer = layer
        self.class_name = class_name

    def __call__(self) -> Any:
        integration = _installed
        if integration is not None and integration.switches.chosen(self.layer) is not True:
            return StoreBackend(self.layer)
        remote = _private(REMOTE_CACHE)
        return remote.RedisRemoteCacheBackend(self.class_name)

    def __repr__(self) -> str:
        return f"compilecache.BackendFactory({self.layer!r})"


class Integration:
    """Everything one ``install`` put in place, and how to take it out again."""

    def __init__(self, cache: Cache, *, precompile: bool | None = None) -> None:
        self.cache = cache
        self.accounting = _Accounting()
        self.pending = _Pending()
        self.patches = Patches()
        self.switches = Switches()
        self.switches.owns = self.owns
        # Dynamo's packages from the store (COMPILECACHE_TORCH_PRECOMPILE: None is the default,
        # on where torch is a tested release), or None when switched off.
        self.dynamo = (
            DynamoPackages(
                cache,
                self.patches,
                self._dynamo_off,
                asked=precompile is True,
                switches=self.switches,
            )
            if precompile is not False
            else None
        )
        self.kernels = KernelCache(cache, on_built=self._kernel_built)
        self.kernels.off = self.off
        self.build_hook = BuildHook(self.kernels)
        probes = ProbeCache(cache)
        probes.off = self.off
        self.probe_hooks = ProbeHooks(probes)
        self.source_hooks = SourceKeyHooks(probes)
        self.template_hooks = TemplateHooks(probes)
        headers = HeaderCache(probes)
        self.header_hook = HeaderHook(headers)
        self.kernels.preprocess = headers.preprocess
        self.kernels.before_compile = headers.ensure_for
        self.extensions = ExtensionCache(cache)
        self.extensions.off = self.off
        # torch's decision functions: name -> (torch's original, our wrapper).
        self.decisions: dict[str, tuple[Any, Any]] = {}
        self.applied: set[str] = set()
        self.lock = threading.RLock()
        self.notes = explain.SettingNotes(cache, FRAMEWORK)

    # --- torch's switches ---------------------------------------------------------------------

    def off(self) -> str:
        """Why torch's switches turn every torch layer of compilecache off now (noted once per
        reason for explain and doctor), or ``""``."""
        reason = self.switches.off()
        if reason:
            self.note_off(reason)
        return reason

    def note_off(self, reason: str) -> None:
        """Say once per process and reason that a torch switch turned layers off (a record
        ``explain`` lists, an event ``doctor`` and ``run`` report)."""
        self.notes.note(reason)

    def owns(self, layer: str) -> bool:
        """Whether torch builds compilecache's backend for ``layer``'s remote cache now (the
        program may have set a ``backend_override_cls`` of its own, before or after enable)."""
        remote = sys.modules.get(REMOTE_CACHE)
        cls = getattr(remote, _LAYER_CLASS[layer], None)
        return isinstance(getattr(cls, "backend_override_cls", None), BackendFactory)

    def _decide(self, layer: str) -> bool:
        """Whether the store is torch's remote cache for ``layer`` now (see switches.py)."""
        reason = self.switches.layer_off(layer)
        if reason:
            self.note_off(reason)
            return False
        return True

    # --- the remote-cache backend -------------------------------------------------------------

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
        try:
            if not self.switches.layer_off(layer):
                self._put(layer, key, remote_key, data)
        finally:
            self.cache.finish_lead(key)

    def _put(self, layer: str, key: str, remote_key: str, data: bytes) -> None:
        payload, extra, taken_s = _unwrap(data, pickled=layer in ("fx", "aot"))
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
            name=_graph_name(layer),
            compile_time_s=self.accounting.exclusive(layer, taken_s),
            versions=torch_versions(),
            components=components,
            extra=extra,
        )
        stored = self.cache.save(header, payload)
        self.switches.wrote(layer, key)
        if layer in LEAD_LAYERS:
            # torch writes only after its own lookup missed: every put here is a miss of ours.
            self._explain(header, readable, stored)

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

    # --- hooks, applied as their modules are imported -----------------------------------------

    def apply(self, module_name: str) -> None:
        """Apply the hooks that live in ``module_name`` (already imported). Never raises."""
        with self.lock:
            if module_name in self.applied:
                return
            try:
                hook = _APPLY.get(module_name)
                if hook is not None:
                    hook(self, _private(module_name))
                self._rebind_decisions()
                self.applied.add(module_name)
            except Exception as exc:
                torch = sys.modules.get("torch")
                version = getattr(torch, "__version__", "?")
                self.cache.warn_once(
                    f"torch:hook:{module_name}",
                    f"torch {version}: could not hook {module_name} ({exc}); that part of "
                    "torch.compile is not cached",
                )

    # torch's decision functions, wrapped once and rebound wherever they were imported by name.

    def _decision_wrapper(self, name: str, original: Any) -> Any:
        if name == "should_use_remote_fx_graph_cache":
            return self._remote_decision(FX, original)
        if name == "should_use_remote_autograd_cache":
            return self._remote_decision(AOT, original)
        if name == "_should_use_remote_autotune_cache":
            return self._autotune_decision(original)
        if name == "should_bundle_autograd_cache":
            return self.dynamo.backends.bundling(original) if self.dynamo is not None else original
        return self.switches.fresh_cache(original)

    def _remote_decision(self, layer: str, original: Callable[[], bool]) -> Callable[[], bool]:
        decide = self._decide

        @functools.wraps(original)
        def should_use_remote() -> bool:
            # The store where torch would cache on its own and the program chose no remote
            # cache; anything else is torch's own answer.
            return decide(layer) or bool(original())

        return should_use_remote

    def _autotune_decision(self, original: Callable[[Any], bool]) -> Callable[[Any], bool]:
        decide = self._decide

        @functools.wraps(original)
        def should_use_remote_autotune_cache(inductor_meta: Any) -> bool:
            # The kernel's own record of the flags when it was generated, then the switches now.
            meta = inductor_meta if isinstance(inductor_meta, dict) else {}
            if (
                meta.get("autotune_remote_cache") is None
                and not meta.get("force_disable_caches")
                and meta.get("autotune_local_cache", True)
                and decide(AUTOTUNE)
            ):
                return True
            return bool(original(inductor_meta))

        return should_use_remote_autotune_cache

    def _rebind_decisions(self) -> None:
        """Wrap each decision in its defining module once, and put the wrapper in every loaded
        module that imported the function by name (idempotent: run after each hooked import)."""
        for names, definer, importers in _DECISIONS:
            module = sys.modules.get(definer)
            if module is None or _initializing(module):
                continue  # not imported yet, or still executing (an import cycle): later
            name = names[0]
            if name not in self.decisions:
                original = getattr(module, name, None)
                if not callable(original):
                    if name in _REQUIRED_DECISIONS:
                        raise AttributeError(f"{definer}.{name} is missing")
                    log.debug("compilecache: no %s.%s in this torch; left alone", definer, name)
                    self.decisions[name] = (None, None)
                    continue
                wrapper = self._decision_wrapper(name, original)
                wrapper.__wrapped__ = original
                self.decisions[name] = (original, wrapper)
            original, wrapper = self.decisions[name]
            if original is None or self._marked_in_place(name, original):
                continue
            targets = [module, *(sys.modules.get(m) for m in importers)]
            for alias in names:
                self.patches.rebind(targets, alias, original, wrapper)

    def _marked_in_place(self, name: str, original: Any) -> bool:
        """``fresh_cache`` is a ``contextlib.contextmanager``: its generator is swapped inside
        the function object itself, so that references taken before compilecache was enabled
        (``from torch._inductor.utils import fresh_cache`` at the top of a program or a test)
        mark the scope too. ``False`` (then it is rebound by name) for any other shape."""
        if name != "fresh_cache":
            return False
        for cell in getattr(original, "__closure__", None) or ():
            if self.patches.patched(cell, "cell_contents"):
                return True  # done at an earlier import
            generator = cell.cell_contents
            if inspect.isgeneratorfunction(generator):
                marked = self.switches.fresh_generator(generator)
                self.patches.replace(cell, "cell_contents", marked, label="fresh_cache")
                return True
        return False

    def _hook_cpp_builder(self, module: Any) -> None:
        # Warns by itself when this torch lacks what it needs (FX and AOT entries still work).
        self.build_hook.install()
        self.probe_hooks.install_compiler(module)

    def _hook_cpp_extension(self, module: Any) -> None:
        # load / load_inline: the extension's build directory through the store.
        self.patches.wrap(module, torch_extensions.FUNCTION, self.extensions.wrap)

    def _hook_remote_cache(self, module: Any) -> None:
        missing = [
            name
            for name in REMOTE_CACHES
            if not hasattr(getattr(module, name, None), "backend_override_cls")
        ]
        if missing:
            raise AttributeError(f"no backend_override_cls on {', '.join(missing)}")
        for name, layer in REMOTE_CACHES.items():
            cls = getattr(module, name)
            if cls.backend_override_cls is not None:
                # The program's own backend (torch's tests patch it so): kept, and compilecache
                # steps aside for that layer (Switches.layer_off says so).
                log.info("compilecache: %s keeps the program's backend", name)
                continue
            self.patches.replace(cls, "backend_override_cls", BackendFactory(layer, name))

    def _remembering(self, original: Any) -> Any:
        pending = self.pending

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                key, lines = result
                pending.remember(str(key), list(lines))
            except Exception as exc:  # a changed signature must not break the compile
                log.debug("compilecache: torch key components not recorded: %s", exc)
            return result

        return wrapper

    def _debug_lines(self, original: Any) -> Any:
        pending = self.pending

        def wrapper(pickler: Any, details: Any, key: str) -> Any:
            lines = original(pickler, details, key)
            try:
                computed = lines or pickler.debug_lines(details)
                pending.remember(str(key), list(computed))
            except Exception as exc:
                log.debug("compilecache: AOTAutograd key components not recorded: %s", exc)
            return lines

        return wrapper

    def _hook_dynamo(self, module: Any) -> None:
        if self.dynamo is not None:
            self.dynamo.apply(module.__name__, module)

    def _dynamo_off(self) -> str:
        """Why Dynamo's packages are neither served nor written now, or ``""``: torch's
        switches that turn every layer off, and AOTAutograd's (a package's backend is its
        AOTAutograd entry)."""
        return self.off() or self.switches.layer_off(AOT)

    def _hook_codecache(self, module: Any) -> None:
        self.patches.wrap(module, "compiled_fx_graph_hash", self._remembering)
        self._count_local_hits(getattr(module, "FxGraphCache", None), FX)
        self._hook_clear(getattr(module, "FxGraphCache", None), FX)
        # torch_key() and triton_key() from the store (sources.py).
        self.source_hooks.install(module)
        # The precompiled header's preprocessing answered, its .gch from the store
        # (headers.py).
        self.header_hook.install(module)
        if hasattr(module, "_worker_compile_cpp"):
            self.patches.wrap(module, "_worker_compile_cpp", self._compiling_cpp)

    def _compiling_cpp(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """torch builds a kernel's binaries only where its own directory lacks them: those it
        found there also go to the store (on the background thread), so that a new machine
        is as warm as this one."""
        kernels = self.kernels
        background = self.cache.background

        @functools.wraps(original)
        def _worker_compile_cpp(lock_path: Any, cpp_builders: Any, *args: Any, **kw: Any) -> Any:
            result = original(lock_path, cpp_builders, *args, **kw)
            with contextlib.suppress(Exception):  # a convenience: never in torch's way
                background.add(functools.partial(kernels.built_before, list(cpp_builders)))
            return result

        return _worker_compile_cpp

    def _hook_clear(self, cls: Any, layer: str) -> None:
        """torch's ``clear()`` empties its directory for a cold compile: after it, this process
        is served only the ``layer`` entries it writes again (the store keeps them for others).
        """
        original = getattr(cls, "__dict__", {}).get("clear")
        if not isinstance(original, staticmethod):
            log.debug("compilecache: no %s.clear; a clear() keeps serving the store", layer)
            return
        clear = original.__func__
        switches = self.switches

        @functools.wraps(clear)
        def cleared() -> Any:
            result = clear()
            switches.cleared(layer)
            return result

        self.patches.replace(cls, "clear", staticmethod(cleared), label=f"clear.{layer}")

    def _count_local_hits(self, cls: Any, layer: str) -> None:
        """Wrap ``cls._record_result`` (torch's hit/miss bookkeeping of a lookup, told whether
        a hit came from its local directory) to count local hits as compilecache hits of the
        ``torch-local`` level (see the module docstring). An optimisation of the counts only:
        a torch without it is left alone."""
        original = getattr(cls, "__dict__", {}).get("_record_result")
        if not isinstance(original, classmethod):
            log.debug("compilecache: no %s._record_result; torch's local hits not counted", layer)
            return
        func = original.__func__
        integration = self

        def record(klass: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                if kwargs.get("local_hit", args[0] if args else False):
                    integration.local_hit(layer, str(key))
            except Exception as exc:  # counting must never break a lookup
                log.debug("compilecache: torch local hit not counted: %s", exc)
            return func(klass, key, *args, **kwargs)

        record.__wrapped__ = func  # type: ignore[attr-defined]
        self.patches.replace(
            cls, "_record_result", classmethod(record), label=f"local_hits.{cls.__name__}"
        )

    def local_hit(self, layer: str, torch_key: str) -> None:
        """A graph torch's own directory served: a hit of the ``torch-local`` level; the time
        saved is the stored entry's compile time when the store has the graph."""
        self.pending.pop(torch_key)
        stats = self.cache.stats
        stats.add("hits", framework=FRAMEWORK)
        stats.add(f"{FRAMEWORK}.{layer}.local_hits")
        stats.add(level_counter(TORCH_LOCAL_LEVEL, "hits"))
        key = f"{FRAMEWORK}/{layer}/{torch_key}" if _SAFE_KEY.match(torch_key) else ""
        try:
            info = self.cache.store.stat(key) if key else None
        except Exception:  # a store that is down: the hit counts, the time saved is unknown
            info = None
        if info is None and key and self.cache.writes(key) and not self.switches.layer_off(layer):
            # torch's own directory had it, the store does not: the store gets it too, so that
            # a new machine is as warm as this one (a program that ran under plain torch before).
            name = _graph_name(layer)  # the compiling thread's context: not the queue's
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
            cache_id, version = _KNOWN_IDS[layer]
            remote_key = f"pt2:{cache_id}::{torch_key}:c{version}"
            taken_s = _time_taken_s(payload)
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

    def _hook_autograd_cache(self, module: Any) -> None:
        if hasattr(module, "_get_debug_lines_for_cache_key"):
            # torch computes the AOT debug lines only with debug logging on; compute them anyway
            # (~30 ms per graph) while the graph is still sanitised for hashing.
            self.patches.wrap(module, "_get_debug_lines_for_cache_key", self._debug_lines)
        else:
            self.patches.wrap(module, "autograd_cache_key", self._remembering)
        cls = getattr(module, "AOTAutogradCache", None)
        self._count_local_hits(cls, AOT)
        self._hook_clear(cls, AOT)
        self._hook_aot_remote_cache(cls)
        self._hook_dynamo(module)

    def _hook_aot_remote_cache(self, cls: Any) -> None:
        """``AOTAutogradCache.get_remote_cache`` is ``functools.cache``'d: the first backend
        built would serve for the life of the process. Rebuilt instead whenever the backend
        class or the program's choice of a remote cache changed (a backend set after enable)."""
        original = getattr(cls, "__dict__", {}).get("get_remote_cache")
        if not isinstance(original, staticmethod):
            log.debug("compilecache: no AOTAutogradCache.get_remote_cache; left alone")
            return
        cached = original.__func__
        build = getattr(cached, "__wrapped__", cached)
        switches = self.switches
        lock = threading.Lock()
        memo: dict[Any, Any] = {}

        def get_remote_cache() -> Any:
            remote = sys.modules.get(REMOTE_CACHE)
            backend = getattr(
                getattr(remote, _LAYER_CLASS[AOT], None), "backend_override_cls", None
            )
            state = (id(backend), switches.chosen(AOT))
            with lock:
                if state in memo:
                    return memo[state]
            made = build()
            with lock:
                memo.clear()
                memo[state] = made
            return made

        def cache_clear() -> None:
            with lock:
                memo.clear()
            getattr(cached, "cache_clear", lambda: None)()

        get_remote_cache.__wrapped__ = cached  # type: ignore[attr-defined]
        get_remote_cache.cache_clear = cache_clear  # type: ignore[attr-defined]
        cache_clear()  # a None (or a Redis cache) made before compilecache was installed
        self.patches.replace(
            cls, "get_remote_cache", staticmethod(get_remote_cache), label="aot.get_remote_cache"
        )

    def _hook_codegen_common(self, module: Any) -> None:
        # Compiled kernel templates from the store (templates.py).
        self.template_hooks.install(module)

    def _hook_cpu_vec_isa(self, module: Any) -> None:
        # The probe verdicts come from the store (probes.py); on a miss the probe runs.
        self.probe_hooks.install_isa(module)
        self._hook_probe_env(module)

    def _hook_probe_env(self, module: Any) -> None:
        """Inductor checks each vector ISA by loading a probe library in a child Python (six
        of them per process on x86). Under ``compilecache run`` every Python child enables
        compilecache at start-up, which costs more than the probe itself; the probe has nothing
        to cache, so its environment says ``COMPILECACHE_DISABLE=1``. An optimisation only: a
        torch without this hook is left alone, silently."""
        cls = getattr(module, "VecISA", None)
        original = getattr(cls, "__dict__", {}).get("_build_probe_env")
        if cls is None or not isinstance(original, staticmethod):
            log.debug("compilecache: no VecISA._build_probe_env in this torch; probes left alone")
            return
        build_env = original.__func__

        def probe_env() -> Any:
            env = build_env()
            if isinstance(env, dict):
                env["COMPILECACHE_DISABLE"] = "1"
            return env

        probe_env.__wrapped__ = build_env  # type: ignore[attr-defined]
        self.patches.replace(cls, "_build_probe_env", staticmethod(probe_env), label="probes.env")

    def _hook_compile_fx(self, module: Any) -> None:
        """End this thread's leases when an Inductor compile returns, written or not.

        A lookup that missed leads its key until the entry is written (``put``). torch skips the
        write for graphs it cannot cache (a bypass), and a compile can fail: without this, such
        a lease would be renewed until the process ends and other processes would wait on it.
        ``_compile_fx_inner`` is one FX graph's compile (forward, or a lazily compiled backward);
        ``compile_fx``, Inductor's entry point for one Dynamo graph, also encloses the
        AOTAutograd lookup. An AOTAutograd entry is written at the first backward call, after
        both return: its lease is kept for AOT_WRITE_GRACE_S more (single-flight then marks it
        unwritten, and the others trace it themselves and find the FX graphs stored).
        An optimisation only: without these functions leases end with their writes.
        """
        wrapped = False
        for name in ("compile_fx", "_compile_fx_inner"):
            if callable(getattr(module, name, None)):
                self.patches.wrap(module, name, self._ending_leases, label=f"leases.{name}")
                wrapped = True
        if not wrapped:
            log.debug("compilecache: no compile_fx in this torch; leases end with their writes")

    def _ending_leases(self, original: Any) -> Any:
        cache = self.cache
        local = threading.local()

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:  # compile_fx calls itself for some graphs
                    try:
                        cache.finish_thread_leads(_written_later, AOT_WRITE_GRACE_S)
                    except Exception as exc:  # never raise into torch; leases expire anyway
                        log.debug("compilecache: could not end torch leases: %s", exc)

        return wrapper

    def _kernel_built(self, seconds: float) -> None:
        """A kernel binary took ``seconds`` to build: its own entry's time, not also its FX
        graph's or its Dynamo package's."""
        self.accounting.kernel_built(seconds)
        if self.dynamo is not None:
            self.dynamo.kernel_built(seconds)

    def uninstall(self) -> None:
        with self.lock:
            for name in HOOKED_MODULES:
                _importhook.cancel(name)
            self.build_hook.uninstall()
            self.header_hook.uninstall()
            self.probe_hooks.uninstall()
            self.source_hooks.uninstall()
            self.template_hooks.uninstall()
            self.patches.undo()
            self.decisions.clear()
            autograd = sys.modules.get(AUTOGRAD_CACHE)
            get_remote = getattr(
                getattr(autograd, "AOTAutogradCache", None), "get_remote_cache", None
            )
            if get_remote is not None and hasattr(get_remote, "cache_clear"):
                get_remote.cache_clear()  # a remote cache built with compilecache's backend
            self.applied.clear()

    def hook_status(self) -> dict[str, bool]:
        """Which hooks are in place now (imports the hooked modules, which is slow)."""
        for name in HOOKED_MODULES:
            with contextlib.suppress(ImportError):
                _private(name)
        status: dict[str, bool] = {}
        remote = _private(REMOTE_CACHE)
        for name in REMOTE_CACHES:
            override = getattr(getattr(remote, name, None), "backend_override_cls", None)
            status[f"remote.{name}"] = isinstance(override, BackendFactory)
        for names, definer, _ in _DECISIONS:
            if names[0] == "fresh_cache" and "fresh_cache" in self.patches.live():
                continue  # marked inside the function itself: its own label below
            if self.decisions.get(names[0], (None, None))[0] is not None:
                module = sys.modules.get(definer)
                status[f"decision.{names[0]}"] = self.patches.patched(module, names[0])
        status["kernel.CppBuilder.build"] = self.build_hook.live
        status["headers._precompile_header"] = self.header_hook.live
        status.update(self.patches.live())
        status.update(self.probe_hooks.live())
        status.update(self.source_hooks.live())
        status.update(self.template_hooks.live())
        return status


_APPLY: dict[str, Callable[[Integration, Any], None]] = {
    REMOTE_CACHE: Integration._hook_remote_cache,
    CPP_BUILDER: Integration._hook_cpp_builder,
    CODECACHE: Integration._hook_codecache,
    AUTOGRAD_CACHE: Integration._hook_autograd_cache,
    CPU_VEC_ISA: Integration._hook_cpu_vec_isa,
    COMPILE_FX: Integration._hook_compile_fx,
    CODEGEN_COMMON: Integration._hook_codegen_common,
    CPP_EXTENSION: Integration._hook_cpp_extension,
    **{name: Integration._hook_dynamo for name in torch_dynamo.MODULES},
}


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
        integration = _installed
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
        integration = _installed
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


def _initializing(module: Any) -> bool:
    """Whether ``module`` is still being executed (imported by a module it imports)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _written_later(key: str) -> bool:
    """AOTAutograd entries are written at the first backward, after their compile returned, and
    Dynamo's packages once their AOTAutograd entries are."""
    return key.startswith((f"{FRAMEWORK}/aot/", torch_dynamo_key.PREFIX))


def _time_taken_s(payload: bytes) -> float:
    """What an FX graph or AOTAutograd entry took to compile, as torch recorded it in the entry
    (``_time_taken_ns``, or the forward and backward times); 0 where it does not say."""
    try:
        entry = pickle.loads(payload)
        nanoseconds = getattr(entry, "_time_taken_ns", None)
        if nanoseconds is None:
            nanoseconds = getattr(entry, "forward_time_taken_ns", 0) + getattr(
                entry, "backward_time_taken_ns", 0
            )
        return max(0.0, float(nanoseconds or 0) / 1e9)
    except Exception:
        return 0.0


def _unwrap(data: bytes, *, pickled: bool) -> tuple[bytes, dict[str, Any], float]:
    """torch's ``{"data": base64(pickle), "time_taken_ms": N}`` -> (pickle, extra, seconds).

    Anything else (autotune's JSON, a format a later torch may use) is stored as it came.
    """
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return bytes(data), {"encoding": "raw"}, 0.0
    if pickled and isinstance(value, dict) and isinstance(value.get("data"), str):
        taken_ms = value.get("time_taken_ms", 0)
        taken_ms = int(taken_ms) if isinstance(taken_ms, (int, float)) else 0
        try:
            payload = base64.b64decode(value["data"], validate=True)
        except ValueError:
            return bytes(data), {"encoding": "raw"}, taken_ms / 1000
        return payload, {"encoding": "pickle", "time_taken_ms": taken_ms}, taken_ms / 1000
    taken = value.get("time_taken_ms", 0) if isinstance(value, dict) else 0
    seconds = float(taken) / 1000 if isinstance(taken, (int, float)) else 0.0
    return bytes(data), {"encoding": "raw"}, seconds


def _graph_name(layer: str) -> str:
    """What torch knows of the graph being compiled: the traced function's qualified name, and
    for ``fx`` the AOT graph (``MLP.forward:0_forward``). Empty outside a Dynamo compile."""
    if layer not in ("fx", "aot"):
        return ""
    try:
        guards = _private("torch._guards")
        context = guards.TracingContext.try_get()
        if context is None:
            return ""
        code = getattr(context, "traced_code", None) or []
        name = ""
        if code:
            name = str(getattr(code[0], "co_qualname", "") or getattr(code[0], "co_name", ""))
            name = name.replace(".<locals>.", ".").rsplit("<locals>.", 1)[-1]
        graph = getattr(context, "aot_graph_name", None)
        if layer == "fx" and graph:
            graph_name = str(graph[0] if isinstance(graph, (list, tuple)) else graph)
            name = f"{name}:{graph_name}" if name else graph_name
        if not name:
            compile_id = guards.CompileContext.current_compile_id()
            name = f"compile {compile_id}" if compile_id is not None else ""
        return name[:200]
    except Exception:
        return ""


_installed: Integration | None = None


def install(cache: Cache, cfg: Config | None = None) -> bool:
    """Route torch.compile's caches through ``cache``; hooks apply as torch's modules load.
    ``cfg``, the session's configuration, says whether Dynamo's packages are kept too."""
    global _installed
    torch = _private("torch")
    if not hasattr(torch, "compile"):
        cache.warn_once("torch:hook", f"torch {torch.__version__} has no torch.compile; left alone")
        return False
    if _installed is not None:
        uninstall()
    integration = Integration(cache, precompile=None if cfg is None else cfg.torch_precompile)
    _installed = integration
    torch_switches.activate(integration.switches)
    for name in HOOKED_MODULES:
        _importhook.when_imported(name, _applier(integration, name))
    log.info("compilecache: torch %s routed through %s", torch.__version__, cache.store.url)
    return True


def _applier(integration: Integration, name: str) -> Callable[[Any], None]:
    def apply(_module: Any) -> None:
        if _installed is integration:
            integration.apply(name)

    return apply


def uninstall() -> None:
    """Restore torch's classes and functions."""
    global _installed
    if _installed is None:
        return
    integration, _installed = _installed, None
    torch_switches.activate(None)
    integration.uninstall()


def active() -> Integration | None:
    return _installed


def hook_status() -> dict[str, bool]:
    """Which hooks are live now; imports torch's compiler modules. Empty when not installed."""
    integration = _installed
    return integration.hook_status() if integration is not None else {}
