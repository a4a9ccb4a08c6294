"""torch's own decisions, wrapped: "use the remote cache?" (FX graphs, AOTAutograd, autotune)
answered "yes, the store" exactly where torch would cache on its own and the program chose no
remote cache of its own (:mod:`~compilecache.frameworks.torch.switches` has the rules),
``should_bundle_autograd_cache`` as plain torch answers it while Dynamo's packages are
compilecache's, and ``fresh_cache`` marked. Each is wrapped once where torch defines it and
rebound in every module that imported it by name.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.torch.modules import (
    AOT_AUTOGRAD,
    AOT_RESULT,
    AUTOGRAD_CACHE,
    AUTOTUNE_CACHE,
    COMPILE_FX,
    GRAPH_COMPILE,
    INDUCTOR_UTILS,
    TEST_CASE,
)
from compilecache.frameworks.torch.switches import AOT, AUTOTUNE, FX, Switches
from compilecache.patches import Patches

log = logging.getLogger("compilecache")

# torch's own decisions, wrapped where they are defined and rebound in the modules that imported
# them by name: (names, the defining module, the importing modules). The first name is the
# function; others are aliases of it.
DECISIONS: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
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


class Decisions:
    """torch's decision functions: name -> (torch's original, our wrapper), rebound as the
    modules that hold them are imported."""

    def __init__(
        self,
        switches: Switches,
        patches: Patches,
        note_off: Callable[[str], None],
        bundling: Callable[[Callable[[], bool]], Callable[[], bool]] | None,
    ) -> None:
        self.switches = switches
        self.patches = patches
        self.note_off = note_off
        # Dynamo's packages' answer to should_bundle_autograd_cache (None: torch's own).
        self.bundling = bundling
        self.wrapped: dict[str, tuple[Any, Any]] = {}

    def _decide(self, layer: str) -> bool:
        """Whether the store is torch's remote cache for ``layer`` now (see switches.py)."""
        reason = self.switches.layer_off(layer)
        if reason:
            self.note_off(reason)
            return False
        return True

    def _decision_wrapper(self, name: str, original: Any) -> Any:
        if name == "should_use_remote_fx_graph_cache":
            return self._remote_decision(FX, original)
        if name == "should_use_remote_autograd_cache":
            return self._remote_decision(AOT, original)
        if name == "_should_use_remote_autotune_cache":
            return self._autotune_decision(original)
        if name == "should_bundle_autograd_cache":
            return self.bundling(original) if self.bundling is not None else original
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

    def rebind(self) -> None:
        """Wrap each decision in its defining module once, and put the wrapper in every loaded
        module that imported the function by name (idempotent: run after each hooked import)."""
        for names, definer, importers in DECISIONS:
            module = sys.modules.get(definer)
            if module is None or _initializing(module):
                continue  # not imported yet, or still executing (an import cycle): later
            name = names[0]
            if name not in self.wrapped:
                original = getattr(module, name, None)
                if not callable(original):
                    if name in _REQUIRED_DECISIONS:
                        raise AttributeError(f"{definer}.{name} is missing")
                    log.debug("compilecache: no %s.%s in this torch; left alone", definer, name)
                    self.wrapped[name] = (None, None)
                    continue
                wrapper = self._decision_wrapper(name, original)
                wrapper.__wrapped__ = original
                self.wrapped[name] = (original, wrapper)
            original, wrapper = self.wrapped[name]
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


def _initializing(module: Any) -> bool:
    """Whether ``module`` is still being executed (imported by a module it imports)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))
