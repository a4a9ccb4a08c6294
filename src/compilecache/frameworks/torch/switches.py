"""torch's own cache switches, kept: which of compilecache's torch layers may serve and write.

compilecache sets none of torch's cache flags. torch asks three functions whether to consult a
remote cache: Inductor's ``should_use_remote_fx_graph_cache()``, functorch's
``should_use_remote_autograd_cache()`` and the autotuner's ``_should_use_remote_autotune_cache``.
They are wrapped (in every module that imported them by name) so that they answer "yes" for
compilecache's store exactly where torch would cache on its own and the program said nothing
about remote caches; otherwise they answer as torch does. The decision is taken at every
lookup, from the values the program has then (in code, in the environment, inside
``config.patch``), so a switch flipped at any time means what it means without compilecache:

=====================================================  ===========================================
the program's torch setting                            compilecache's torch layers
=====================================================  ===========================================
``force_disable_caches`` (``TORCHINDUCTOR_FORCE_        none serves and none writes: graphs,
DISABLE_CACHES=1`` or in code)                         AOTAutograd, kernels, headers, probes,
                                                       Triton, extensions
inside ``torch._inductor.utils.fresh_cache()``         the same: a cold compile that leaves nothing
                                                       behind (torch deletes that directory too)
``fx_graph_cache`` off                                 no FX graphs, so no AOTAutograd entries
                                                       (they need their FX graphs)
``enable_autograd_cache`` off                          no AOTAutograd entries
``autotune_local_cache`` off                           no autotune results
``fx_graph_remote_cache`` / ``enable_remote_           the program's choice: torch's own remote
autograd_cache`` / ``autotune_remote_cache`` set       cache with its backend (True) or none
(True or False)                                        (False); compilecache steps aside for that
                                                       layer (and AOTAutograd for FX's)
a ``backend_override_cls`` of the program's            the program's backend, for that layer
``FxGraphCache.clear()`` / ``AOTAutogradCache.         entries of that layer are served again only
clear()``                                              once this process wrote them after the clear
=====================================================  ===========================================

Kernels, headers and probe answers have no switch of their own in torch (its kernel directory is
reused whatever the FX cache says), so they follow only the first two rows.

torch's configuration values are per thread (a ``ContextVar`` each): what a compile thread sees
is read in that thread, and a build handed to a pool thread carries the state of the thread that
made it (see ``torch_kernels``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

FX, AOT, AUTOTUNE = "fx", "aot", "autotune"
# Dynamo's packages (torch_dynamo) hold their compiled graphs: they follow FX's and AOT's clear().
DYNAMO = "dynamo"
# What a layer's entries hold besides their own: a clear() of any of these hides them too.
_HOLDS = {AOT: (AOT, FX), DYNAMO: (DYNAMO, AOT, FX)}
REMOTE_LAYERS = (FX, AOT, AUTOTUNE)

INDUCTOR_CONFIG = "torch._inductor.config"
FUNCTORCH_CONFIG = "torch._functorch.config"
COMPILER_CONFIG = "torch.compiler.config"

FORCE_DISABLED = (
    "torch's force_disable_caches is on (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1, or "
    "torch.compiler.config.force_disable_caches): compilecache serves and writes nothing for torch"
)
FRESH = (
    "inside torch's fresh_cache(): compiles are cold, and compilecache serves and writes nothing "
    "for torch there"
)
# (config module, flag) that turns a layer's local cache off -> how the reason names it.
_LOCAL = {
    FX: (INDUCTOR_CONFIG, "fx_graph_cache", "TORCHINDUCTOR_FX_GRAPH_CACHE=0"),
    AOT: (FUNCTORCH_CONFIG, "enable_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_CACHE=0"),
    AUTOTUNE: (INDUCTOR_CONFIG, "autotune_local_cache", ""),
}
# The program's own choice of a remote cache for a layer.
_REMOTE = {
    FX: (INDUCTOR_CONFIG, "fx_graph_remote_cache"),
    AOT: (FUNCTORCH_CONFIG, "enable_remote_autograd_cache"),
    AUTOTUNE: (INDUCTOR_CONFIG, "autotune_remote_cache"),
}
_NAMES = {FX: "FX graphs", AOT: "AOTAutograd entries", AUTOTUNE: "autotune results"}
_CACHES = {FX: "FX graph cache", AOT: "AOTAutograd cache", AUTOTUNE: "autotune cache"}
# What a layer being off also takes with it.
_ALSO = {FX: ", nor the AOTAutograd entries built on them", AOT: "", AUTOTUNE: ""}


def _config(module: str) -> Any:
    return sys.modules.get(module)


def force_disabled() -> bool:
    """``torch.compiler.config.force_disable_caches`` as this thread sees it (torch's
    ``TORCHINDUCTOR_FORCE_DISABLE_CACHES`` sets it for every thread). Never raises."""
    config = _config(COMPILER_CONFIG)
    try:
        return bool(config is not None and config.force_disable_caches)
    except Exception:
        return False


class Switches:
    """What the program's torch switches allow now, and the bookkeeping they need: the depth of
    ``fresh_cache()`` scopes, the layers a ``clear()`` emptied, whose backends are in place."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # fresh_cache() changes os.environ for the whole process: its depth is process-wide too.
        self._fresh = 0
        # layer -> keys this process wrote since the layer's clear() (served again).
        self._cleared: dict[str, set[str]] = {}
        # Whether the RemoteCache class of a layer builds compilecache's backend now (the
        # program may set its own, before or after enable): set by the torch integration.
        self.owns: Callable[[str], bool] = lambda layer: False

    # -- every layer ------------------------------------------------------------------------

    def off(self) -> str:
        """Why no torch layer of compilecache may serve or write now, or ``""``."""
        if force_disabled():
            return FORCE_DISABLED
        if self._fresh:
            return FRESH
        return ""

    @contextlib.contextmanager
    def fresh_scope(self) -> Iterator[None]:
        with self._lock:
            self._fresh += 1
        try:
            yield
        finally:
            with self._lock:
                self._fresh -= 1

    def fresh_generator(self, original: Callable[..., Iterator[Any]]) -> Callable[..., Any]:
        """The generator behind torch's ``fresh_cache`` (``contextlib.contextmanager``'s), with
        its scope marked: put in place of the original inside ``fresh_cache`` itself, so that
        every module that imported ``fresh_cache``, before compilecache or after, marks it."""
        switches = self

        def fresh_cache(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with switches.fresh_scope():
                return (yield from original(*args, **kwargs))

        return fresh_cache

    def fresh_cache(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A wrapper of torch's ``fresh_cache`` that marks its scope (a context manager that
        also decorates, as the original)."""
        switches = self

        @contextlib.contextmanager
        def fresh_cache(*args: Any, **kwargs: Any) -> Iterator[None]:
            with original(*args, **kwargs), switches.fresh_scope():
                yield

        return fresh_cache

    # -- the remote-cache layers ------------------------------------------------------------

    def layer_off(self, layer: str) -> str:
        """Why compilecache's store must not be torch's remote cache for ``layer`` now (its
        lookups and writes), or ``""`` when it is."""
        reason = self.off()
        if reason:
            return reason
        module, flag, variable = _LOCAL[layer]
        config = _config(module)
        if config is None:
            return f"{module} is not loaded"
        try:
            local_on = bool(getattr(config, flag))
        except Exception as exc:  # a torch whose config lacks the flag: stay out of its way
            return f"torch's {flag} could not be read ({exc})"
        if not local_on:
            how = f"{flag}=False" + (f", {variable}" if variable else "")
            return (
                f"torch's {_CACHES[layer]} is off ({how}): compilecache serves no "
                f"{_NAMES[layer]}{_ALSO[layer]}"
            )
        chosen = self.chosen(layer)
        remote_flag = _REMOTE[layer][1]
        if chosen is not None:
            which = "its own remote backend" if chosen else "no remote cache"
            return (
                f"the program set {remote_flag}={chosen}: torch uses {which} for "
                f"{_NAMES[layer]}, and compilecache steps aside{_ALSO[layer]}"
            )
        if not self.owns(layer):
            return (
                f"the program set its own backend_override_cls for {_NAMES[layer]}: torch uses "
                f"it, and compilecache steps aside{_ALSO[layer]}"
            )
        if layer == AOT:
            # An AOTAutograd entry is no use without its FX graphs (the reason is FX's own).
            return self.layer_off(FX)
        return ""

    def chosen(self, layer: str) -> bool | None:
        """The program's own choice of torch's remote cache for ``layer`` (``None``: none)."""
        module, flag = _REMOTE[layer]
        try:
            value = getattr(_config(module), flag, None)
        except Exception:
            return None
        return None if value is None else bool(value)

    def serves(self, layer: str, key: str | None = None) -> bool:
        """Whether a lookup of ``key`` in ``layer`` may be answered from the store now."""
        if self.layer_off(layer):
            return False
        if key is None:
            return True
        with self._lock:
            since = self._cleared.get(layer)
            if since is None and layer == AOT:
                since = self._cleared.get(FX)  # an AOT entry is no use without its FX graphs
            return since is None or key in since

    def cleared(self, layer: str) -> None:
        """torch's ``clear()`` of ``layer``: what is stored stays (other processes use it), but
        this process is served only what it writes from now on."""
        with self._lock:
            self._cleared[layer] = set()

    def serves_package(self, key: str) -> bool:
        """Whether Dynamo's package ``key`` may be served: not one written before a clear() of
        FX graphs, AOTAutograd entries or packages in this process (it holds their graphs)."""
        with self._lock:
            return all(key in self._cleared.get(layer, {key}) for layer in _HOLDS[DYNAMO])

    def wrote(self, layer: str, key: str) -> None:
        with self._lock:
            for cleared in _HOLDS.get(layer, (layer,)):
                since = self._cleared.get(cleared)
                if since is not None:
                    since.add(key)

    def state(self) -> dict[str, str]:
        """Each layer's reason to be off (``""``: on), for doctor and explain."""
        out = {layer: self.layer_off(layer) for layer in REMOTE_LAYERS}
        out["kernels, headers, probes, Triton, extensions"] = self.off()
        with self._lock:
            for layer in self._cleared:
                if not out.get(layer):
                    out[layer] = f"cleared by {layer} cache's clear() in this process"
        return out


# The one instance the torch integration installs, read by the layers outside it (Triton).
_active: Switches | None = None


def activate(switches: Switches | None) -> None:
    global _active
    _active = switches


def torch_off() -> str:
    """Why torch's switches turn compilecache's torch-driven caches off now (Triton's kernels
    compiled for torch included), or ``""``; ``""`` when torch is not in use."""
    switches = _active
    if switches is not None:
        return switches.off()
    return FORCE_DISABLED if force_disabled() else ""
