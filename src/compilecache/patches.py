"""Monkey patches, recorded once and undone in reverse.

Every framework hook replaces an attribute of someone else's module or class. :class:`Patches`
keeps, for each replacement, what was there before (the target's *own* attribute: a class that
only inherited it gets it deleted again, not a copy of the parent's), undoes them newest first,
and says which are still in place (``hook_status`` and ``doctor`` read that). An undo never
overwrites a replacement made after ours by somebody else: it leaves that one in place.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("compilecache")

_ABSENT = object()


def own_attribute(target: Any, name: str) -> Any:
    """``target``'s own ``name`` (for a class, its ``__dict__`` entry: a ``staticmethod`` stays
    one), or :data:`_ABSENT` when it has none of its own."""
    try:
        own = vars(target)
    except TypeError:  # no __dict__: read through getattr
        return getattr(target, name, _ABSENT)
    if name in own:
        return own[name]
    if not isinstance(target, type) and hasattr(type(target), "__getattr__"):
        # A module that keeps its values elsewhere (torch's config modules): read as its users do.
        return getattr(target, name, _ABSENT)
    return _ABSENT


@dataclass
class Patch:
    """One replaced attribute."""

    target: Any
    name: str
    label: str
    previous: Any  # the target's own attribute before, or _ABSENT
    replacement: Any

    @property
    def live(self) -> bool:
        return own_attribute(self.target, self.name) is self.replacement


class Patches:
    """The patches one integration applied, in order."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._applied: list[Patch] = []

    def replace(self, target: Any, name: str, replacement: Any, *, label: str = "") -> Any:
        """Set ``target.name = replacement``; return what ``target.name`` was (as read)."""
        with self._lock:
            before = getattr(target, name, None)
            patch = Patch(
                target,
                name,
                label or _label(target, name),
                own_attribute(target, name),
                replacement,
            )
            setattr(target, name, replacement)
            self._applied.append(patch)
            return before

    def wrap(
        self, target: Any, name: str, make: Callable[[Any], Any], *, label: str = ""
    ) -> Callable[..., Any]:
        """Replace the function ``target.name`` with ``make(original)`` (which gets
        ``__wrapped__ = original``); AttributeError when there is no such callable."""
        original = getattr(target, name, None)
        if original is None or not callable(original):
            raise AttributeError(f"{_label(target, name)} is missing")
        wrapper = make(original)
        # A builtin or a slotted object takes no attribute: nothing to record then.
        with contextlib.suppress(AttributeError, TypeError):
            wrapper.__wrapped__ = original
        self.replace(target, name, wrapper, label=label)
        return wrapper  # type: ignore[no-any-return]

    def rebind(self, targets: list[Any], name: str, original: Any, replacement: Any) -> int:
        """Replace ``name`` in each target whose own ``name`` *is* ``original`` (modules that
        imported a function by name hold their own reference to it); how many were replaced."""
        done = 0
        for target in targets:
            if target is not None and own_attribute(target, name) is original:
                self.replace(target, name, replacement)
                done += 1
        return done

    def patched(self, target: Any, name: str) -> bool:
        """Whether ``target.name`` is one of these patches and still in place."""
        with self._lock:
            return any(p.target is target and p.name == name and p.live for p in self._applied)

    def undo(self) -> None:
        """Restore every patch, newest first. A patch somebody replaced after us is left as it
        is. Never raises."""
        with self._lock:
            applied, self._applied = self._applied, []
        for patch in reversed(applied):
            if not patch.live:
                continue
            try:
                if patch.previous is _ABSENT:
                    delattr(patch.target, patch.name)
                else:
                    setattr(patch.target, patch.name, patch.previous)
            except Exception as exc:
                log.debug("compilecache: could not restore %s: %s", patch.label, exc)

    def live(self) -> dict[str, bool]:
        """Each patch by label, and whether it is still in place."""
        with self._lock:
            return {p.label: p.live for p in self._applied}

    def __len__(self) -> int:
        return len(self._applied)


def _label(target: Any, name: str) -> str:
    owner = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None) if not hasattr(target, "__file__") else None
    if owner is None:
        owner = type(target).__qualname__
    return f"{module}.{owner}.{name}" if module and module != owner else f"{owner}.{name}"
