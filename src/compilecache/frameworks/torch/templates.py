"""Inductor's kernel templates, compiled once, answered from the store like the probes of
:mod:`compilecache.frameworks.torch.probes`.

``KernelTemplate._template_from_string`` compiles a Jinja source into a template (Jinja's lexer,
parser and code generator, then Python's ``compile``) for every kernel template torch defines at
import: 21-22 of them at the first compile of every process on torch 2.13 CPU (about 0.16 s
here), from the same sources every time. The compiled templates, Jinja's generated Python as
marshalled code objects, are kept together in one store entry (a bundle: one read, where one
entry per template cost a remote level 22 round trips on a cold start), keyed by Jinja's,
torch's (whose Jinja environment it is) and Python's versions (marshal's format and the bytecode
are Python's); inside it each template is found by a SHA-256 of its source. A template found
there is built from its code with ``Template.from_code``, which is what Jinja's ``from_string``
does after compiling and what Jinja's own bytecode cache does; one that is not is compiled, added,
and the bundle is stored again a moment after the last addition (and when the hooks are
removed). Counted as ``torch.template_hits`` / ``torch.template_misses``. A source Jinja cannot
compile is left to torch (which raises its detailed error); nothing about it is stored.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import marshal
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.torch.probes import (
    FRAMEWORK,
    ProbeCache,
    ProbeKey,
    make_key,
    torch_identity,
)
from compilecache.patches import Patches

log = logging.getLogger("compilecache")

# Templates are compiled in a burst while torch imports its kernel modules: store the bundle
# once that burst is over.
SAVE_AFTER_S = 1.0


def bundle_key(jinja_version: str) -> ProbeKey:
    parts = {"jinja2": jinja_version, "torch": torch_identity(), "python": sys.version}
    return make_key("template", "kernel templates", parts)


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()


def _code_out(code: Any) -> str:
    return base64.b64encode(marshal.dumps(code)).decode("ascii")


def _code_in(value: Any) -> types.CodeType:
    code = marshal.loads(base64.b64decode(str(value).encode("ascii"), validate=True))
    if not isinstance(code, types.CodeType):
        raise ValueError("not a code object")
    return code


class TemplateBundle:
    """The compiled templates of this torch, Jinja and Python: read once, stored when grown."""

    def __init__(self, probes: ProbeCache, key: ProbeKey) -> None:
        self.probes = probes
        self.key = key
        self._lock = threading.Lock()
        self._codes: dict[str, str] | None = None
        self._added = 0.0  # compile seconds added since the last save
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._missed = False  # no usable bundle was stored: its first store is a miss explained

    def _load(self) -> dict[str, str]:
        """The stored bundle (read once; a bundle that does not decode is an empty one)."""
        if self._codes is None:
            hit, stored = self.probes.lookup(self.key, "template_bundle")
            valid = hit and isinstance(stored, dict)
            self._codes = {str(k): str(v) for k, v in stored.items()} if valid else {}
            self._missed = not valid
        return self._codes

    def code(self, source: str, compile_source: Callable[[], Any]) -> types.CodeType:
        """The compiled code of ``source``: from the bundle, else ``compile_source()`` (which
        may raise) and added to it."""
        digest = source_digest(source)
        stats = self.probes.cache.stats
        with self._lock:
            stored = self._load().get(digest)
        if stored is not None:
            try:
                found = _code_in(stored)
                stats.add(f"{FRAMEWORK}.template_hits")
                return found
            except Exception as exc:
                log.debug("compilecache: stored kernel template unusable: %s", exc)
        stats.add(f"{FRAMEWORK}.template_misses")
        start = time.perf_counter()
        code: types.CodeType = compile_source()
        seconds = time.perf_counter() - start
        with self._lock:
            self._load()[digest] = _code_out(code)
            self._added += seconds
            self._dirty = True
            self._save_later()
        return code

    def _save_later(self) -> None:
        """(Re)start the timer that stores the bundle after the burst (lock held)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(SAVE_AFTER_S, self.save)
        self._timer.daemon = True
        self._timer.start()

    def save(self) -> None:
        """Store the bundle if it grew. Never raises."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._dirty or self._codes is None:
                return
            codes, seconds, explain = dict(self._codes), self._added, self._missed
            self._dirty, self._added, self._missed = False, 0.0, False
        try:
            # A bundle that was missing is a miss worth explaining; one that only grew is not.
            self.probes.save(self.key, codes, seconds, explain=explain)
        except Exception as exc:
            log.debug("compilecache: kernel templates not stored: %s", exc)


class TemplateHooks:
    """Puts ``KernelTemplate._template_from_string`` through a :class:`TemplateBundle`, and
    restores it."""

    def __init__(self, probes: ProbeCache) -> None:
        self.probes = probes
        self.patches = Patches()
        self.bundle: TemplateBundle | None = None

    def install(self, module: Any) -> None:
        cls: Any = getattr(module, "KernelTemplate", None)
        original = getattr(cls, "__dict__", {}).get("_template_from_string")
        jinja2_env = getattr(module, "jinja2_env", None)
        if not isinstance(original, staticmethod) or not callable(jinja2_env):
            log.debug("compilecache: no KernelTemplate._template_from_string; left alone")
            return
        try:
            import jinja2

            self.bundle = TemplateBundle(self.probes, bundle_key(jinja2.__version__))
        except Exception as exc:  # no Jinja, or no key: torch's own function stays
            log.debug("compilecache: kernel templates not keyed: %s", exc)
            return
        function = original.__func__
        bundle = self.bundle

        probes = self.probes

        def template_from_string(source: str) -> Any:
            if probes.off():  # torch's switches turn caching off: torch compiles it
                return function(source)
            try:
                env = jinja2_env()
            except Exception as exc:
                log.debug("compilecache: no Jinja environment: %s", exc)
                env = None
            if env is None:
                return function(source)
            # What torch's function does before compiling (it adds the filter it renders with).
            env.filters["indent_except_first"] = cls.indent_except_first
            try:
                code = bundle.code(source, lambda: env.compile(source))
            except jinja2.TemplateSyntaxError:
                return function(source)  # torch raises its detailed error
            return env.template_class.from_code(env, code, env.make_globals(None), None)

        template_from_string.__wrapped__ = function  # type: ignore[attr-defined]
        self.patches.replace(
            cls,
            "_template_from_string",
            staticmethod(template_from_string),
            label="templates.KernelTemplate._template_from_string",
        )

    def uninstall(self) -> None:
        if self.bundle is not None:
            self.bundle.save()
        self.patches.undo()

    def live(self) -> dict[str, bool]:
        return self.patches.live()
