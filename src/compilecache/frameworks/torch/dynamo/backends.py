"""AOTAutograd's entries as the backends of Dynamo's packages, in plain torch's form.

Under ``caching_precompile`` torch would bundle each AOTAutograd entry with its compiled graphs,
under a key that names the graph's random backend id: no other process, and no plain torch,
would find it. While the mode is compilecache's, AOTAutograd's cache keys and writes its entries
as plain torch does, and each entry is recorded as its package's backend (``aot_keys`` says
which entry each backend is, so that a package served later records them for
``save_cache_artifacts()`` as the AOTAutograd hits it stands for).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pickle
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from compilecache.frameworks.torch.dynamo.mode import AOT_RESULT, CONTEXT, FUNCTORCH_CONFIG
from compilecache.patches import Patches


def record_portable(backends: Mapping[str, Any], aot_keys: Mapping[str, str]) -> None:
    """Record a served package's AOTAutograd entries for ``save_cache_artifacts()``, as the
    AOTAutograd hits the package stands for would have been: the artifacts of a process warm
    from a package serve plain torch as those of plain torch's warm process do."""
    with contextlib.suppress(Exception):  # only torch's portable artifacts would lack them
        manager = importlib.import_module("torch.compiler._cache").CacheArtifactManager
        for backend_id, key in aot_keys.items():
            backend = backends.get(backend_id)
            if backend is not None:
                manager.record_artifact("aot_autograd", key, pickle.dumps(backend.content))


class AotBackends:
    """The hooks of AOTAutograd's cache for one torch integration's Dynamo packages."""

    def __init__(self, patches: Patches, enabled: Callable[[], bool]) -> None:
        self.patches = patches
        self._enabled = enabled
        self.lock = threading.Lock()
        # Each backend's AOTAutograd key (a backend is that entry): a package served here
        # records its entries for save_cache_artifacts() as the AOTAutograd hit it replaces.
        self.aot_keys: dict[str, str] = {}

    @property
    def enabled(self) -> bool:
        """Whether caching_precompile is on because of compilecache now."""
        return self._enabled()

    def keys_of(self, backend_ids: Iterable[str]) -> dict[str, str]:
        """The AOTAutograd key of each of ``backend_ids`` recorded here."""
        with self.lock:
            return {b: self.aot_keys[b] for b in backend_ids if b in self.aot_keys}

    def apply(self, module: Any) -> None:
        """Hook ``torch._functorch._aot_autograd.autograd_cache`` (now imported)."""
        self.patches.wrap(
            module.AOTAutogradCachePickler,
            "_reduce_aot_config",
            self._aot_key,
            label="dynamo.aot_key",
        )
        if hasattr(module, "sanitize_gm_for_cache"):
            self.patches.wrap(
                module, "sanitize_gm_for_cache", self._sanitizing, label="dynamo.aot_graph"
            )
        cache = module.AOTAutogradCache
        for method, make in (("save", self._saving), ("_lookup", self._looking_up)):
            function = cache.__dict__[method].__func__  # staticmethods
            self.patches.replace(
                cache, method, staticmethod(make(function)), label=f"dynamo.aot_{method}"
            )

    def _aot_key(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Under caching_precompile torch puts the compiled graph's name, which ends in a
        random uuid (``__compiled_fn_1_<uuid>``), into AOTAutograd's cache key: no entry would
        ever be found again by another process, nor by plain torch. The key leaves it out, so
        that it is the key plain torch computes: the entries written here (to the store, to
        torch's directory, to ``save_cache_artifacts()``) are plain torch's, and plain torch's
        serve here."""

        def _reduce_aot_config(pickler: Any, aot_config: Any) -> Any:
            reduced = original(pickler, aot_config)
            name = getattr(aot_config, "precompile_backend_id", None)
            if not self.enabled or name is None:
                return reduced
            rebuild, fields = reduced
            fields = tuple(None if field == name else field for field in fields)
            return rebuild, fields

        return _reduce_aot_config

    def _sanitizing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """AOTAutograd's key pickles the graph module's attributes in their order. Dynamo sets
        ``_backend_id`` on a package's graph before its other attributes; plain torch never sets
        it, and the key's sanitising adds it last. Moved last here, so that the key is plain
        torch's."""

        def sanitize_gm_for_cache(gm: Any) -> Any:
            if self.enabled:
                with contextlib.suppress(Exception):
                    attributes = gm.__dict__
                    if "_backend_id" in attributes:
                        attributes["_backend_id"] = attributes.pop("_backend_id")
            return original(gm)

        return sanitize_gm_for_cache

    def bundling(self, original: Callable[[], bool]) -> Callable[[], bool]:
        """torch's ``should_bundle_autograd_cache``: caching_precompile makes AOTAutograd bundle
        its compiled graphs into its entries, a form plain torch neither writes nor reads (its
        FX graph cache is not asked on a hit). While the mode is ours, AOTAutograd's cache
        answers as without it: its entries are plain torch's, and each package's backend is
        recorded from them (:meth:`_saving`, :meth:`_looking_up`)."""

        @functools.wraps(original)
        def should_bundle_autograd_cache() -> bool:
            if self.enabled:
                functorch = sys.modules.get(FUNCTORCH_CONFIG)
                return bool(getattr(functorch, "bundled_autograd_cache", False))
            return bool(original())

        return should_bundle_autograd_cache

    def _saving(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``AOTAutogradCache.save``: the entry is saved as plain torch saves it (without the
        package's backend name), then recorded as that backend of the package."""

        def save(key: str, entry: Any, remote: bool) -> Any:
            config: Any = getattr(entry, "sanitized_aot_config", None)
            backend_id = getattr(config, "precompile_backend_id", None) if self.enabled else None
            if backend_id is not None:
                config.precompile_backend_id = None
            result = original(key, entry, remote)
            if backend_id is not None:
                self._record_backend(backend_id, key, entry)
            return result

        return save

    def _looking_up(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``AOTAutogradCache._lookup``: a hit for a package's compile is recorded as that
        backend of the package, as torch does for its bundled entries."""

        def _lookup(*args: Any, **kwargs: Any) -> Any:
            found = original(*args, **kwargs)
            if found is not None and self.enabled:
                aot_config = args[5] if len(args) > 5 else kwargs.get("aot_config")
                backend_id = getattr(aot_config, "precompile_backend_id", None)
                if backend_id is not None:
                    with contextlib.suppress(Exception):  # the hit stands; no package then
                        self._record_backend(backend_id, args[0], pickle.loads(found[1]))
            return found

        return _lookup

    def _record_backend(self, backend_id: str, key: str, entry: Any) -> None:
        """Record ``entry`` (an AOTAutogradResult, plain or bundled; AOTAutograd's ``key``) as
        the package backend ``backend_id``. torch's artifact for it turns the entry into the
        compiled function on load (``deserialize_bundled_cache_entry``): a plain entry loads
        its forward and backward from the FX graph cache then, as a plain AOTAutograd hit
        does."""
        entry.sanitized_aot_config.precompile_backend_id = None
        with self.lock:
            self.aot_keys[backend_id] = key
        artifact = importlib.import_module(AOT_RESULT).BundledAOTAutogradCacheArtifact
        context = importlib.import_module(CONTEXT)
        context.PrecompileContext.record_artifact(artifact(backend_id, entry))
