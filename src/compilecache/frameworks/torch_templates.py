"""Inductor's kernel templates, compiled once, answered from the store like the probes of
:mod:`compilecache.frameworks.torch_probes`.

``KernelTemplate._template_from_string`` compiles a Jinja source into a template (Jinja's lexer,
parser and code generator, then Python's ``compile``) for every kernel template torch defines at
import: 21 of them at the first compile of every process on torch 2.13 CPU (about 0.16 s here),
from the same sources every time. The compiled template, Jinja's generated Python as a
marshalled code object, is kept in the store under a key of the template's source, Jinja's
version, torch's (whose Jinja environment it is) and Python's (marshal's format and the bytecode
are Python's). A hit builds the template from that code with ``Template.from_code``, which is
what Jinja's ``from_string`` does after compiling and what Jinja's own bytecode cache does.
Counted as ``torch.template_hits`` / ``torch.template_misses``. A source Jinja cannot compile is
left to torch (which raises its detailed error); nothing about it is stored.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import marshal
import sys
import types
from typing import Any

from compilecache.frameworks.torch_probes import ProbeCache, ProbeKey, make_key, torch_identity

log = logging.getLogger("compilecache")

COUNTER = "template"


def template_key(source: str, jinja_version: str) -> ProbeKey:
    parts = {
        "source": source,
        "jinja2": jinja_version,
        "torch": torch_identity(),
        "python": sys.version,
    }
    digest = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return make_key("template", f"template {digest}", parts)


def _code_out(code: Any) -> str:
    return base64.b64encode(marshal.dumps(code)).decode("ascii")


def _code_in(value: Any) -> types.CodeType:
    code = marshal.loads(base64.b64decode(str(value).encode("ascii"), validate=True))
    if not isinstance(code, types.CodeType):
        raise ValueError("not a code object")
    return code


class TemplateHooks:
    """Puts ``KernelTemplate._template_from_string`` through the store, and restores it."""

    def __init__(self, probes: ProbeCache) -> None:
        self.probes = probes
        self._cls: Any = None
        self._original: Any = None

    def install(self, module: Any) -> None:
        cls: Any = getattr(module, "KernelTemplate", None)
        original = getattr(cls, "__dict__", {}).get("_template_from_string")
        jinja2_env = getattr(module, "jinja2_env", None)
        if not isinstance(original, staticmethod) or not callable(jinja2_env):
            log.debug("compilecache: no KernelTemplate._template_from_string; left alone")
            return
        function = original.__func__
        probes = self.probes

        def template_from_string(source: str) -> Any:
            try:
                env = jinja2_env()
                import jinja2

                key = template_key(source, jinja2.__version__) if env is not None else None
            except Exception as exc:  # computing a key must never stop a compile
                log.debug("compilecache: kernel template not keyed: %s", exc)
                key = None
            if key is None:
                return function(source)
            # What torch's function does before compiling (it adds the filter it renders with).
            env.filters["indent_except_first"] = cls.indent_except_first
            try:
                code = probes.answer(
                    key, COUNTER, lambda: env.compile(source), encode=_code_out, decode=_code_in
                )
            except jinja2.TemplateSyntaxError:
                return function(source)  # torch raises its detailed error
            return env.template_class.from_code(env, code, env.make_globals(None), None)

        template_from_string.__wrapped__ = function  # type: ignore[attr-defined]
        self._cls, self._original = cls, original
        cls._template_from_string = staticmethod(template_from_string)

    def uninstall(self) -> None:
        if self._cls is not None:
            self._cls._template_from_string = self._original
        self._cls = self._original = None

    def live(self) -> dict[str, bool]:
        if self._cls is None:
            return {}
        current = self._cls.__dict__.get("_template_from_string")
        wrapped = getattr(getattr(current, "__func__", None), "__wrapped__", None)
        return {"templates.KernelTemplate._template_from_string": wrapped is not None}
