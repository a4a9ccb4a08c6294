"""What a process under compilecache knew about its frameworks, for ``compilecache doctor``.

Each process writes one :class:`ProcessFacts` to its run spool when it exits (``session.py``);
``doctor`` reads them back with :meth:`ProcessFacts.from_json` and looks at fields, never at
dictionary keys, so a fact renamed here is renamed for its reader too. Reading is lenient: a
spool line from another compilecache version, with fields missing or of another type, gives the
field's default rather than an error (doctor then simply finds less).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

_Record = TypeVar("_Record")


def _typed(cls: type[_Record], data: object) -> _Record | None:
    """``cls`` from a JSON object, keeping the fields whose values have the default's type."""
    if not isinstance(data, dict):
        return None
    defaults = cls()
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        default = getattr(defaults, f.name)
        value = data.get(f.name, default)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, dict):
            # The annotation says what the values are: "dict[str, bool]" or "dict[str, str]".
            ok = isinstance(value, dict)
            as_value = bool if str(f.type).endswith("bool]") else str
            value = {str(k): as_value(v) for k, v in value.items()} if ok else value
        else:
            ok = isinstance(value, type(default))
        values[f.name] = value if ok else default
    return cls(**values)


@dataclass(frozen=True)
class JaxFacts:
    """JAX in one process: its version, whether our hook ran, and the settings that decide
    what is cached."""

    version: str = ""
    hooked: bool = False
    marker: str = ""
    cache_dir: str = ""
    # The program's own jax_persistent_cache_min_compile_time_secs (0.0: it left JAX's default).
    min_compile_time_secs: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)
    enable_xla_caches: str = ""


@dataclass(frozen=True)
class TorchFacts:
    """torch in one process: its version and the facts its compile keys depend on."""

    version: str = ""
    num_threads: int = 0
    precompile_headers: bool = False


@dataclass(frozen=True)
class TritonFacts:
    """Triton in one process: its version and which of our hooks are live."""

    version: str = ""
    hooked: bool = False
    hooks: dict[str, bool] = field(default_factory=dict)
    chained: str = ""
    cache_dir: str = ""


@dataclass(frozen=True)
class ProcessFacts:
    """One process's facts: a record per framework it imported (None where it did not), and
    the error met while collecting one (framework -> message)."""

    pid: int = 0
    python: str = ""
    jax: JaxFacts | None = None
    torch: TorchFacts | None = None
    triton: TritonFacts | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> ProcessFacts:
        """Facts from a spool line's ``facts`` object; lenient (see the module's docstring)."""
        if not isinstance(data, dict):
            return cls()
        pid, python, errors = data.get("pid"), data.get("python"), data.get("errors")
        return cls(
            pid=pid if isinstance(pid, int) else 0,
            python=python if isinstance(python, str) else "",
            jax=_typed(JaxFacts, data.get("jax")),
            torch=_typed(TorchFacts, data.get("torch")),
            triton=_typed(TritonFacts, data.get("triton")),
            errors={str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {},
        )


def collect() -> ProcessFacts:
    """This process's facts, for frameworks it has already imported (nothing is imported
    here). Never raises: a framework whose facts cannot be read is named in ``errors``."""
    records: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, read in (("jax", _jax), ("torch", _torch), ("triton", _triton)):
        if name not in sys.modules:
            continue
        try:
            records[name] = read()
        except Exception as exc:
            errors[name] = str(exc)
    return ProcessFacts(pid=os.getpid(), python=sys.version.split()[0], errors=errors, **records)


def _jax() -> JaxFacts:
    from compilecache.frameworks.jax import integration
    from compilecache.frameworks.jax.adapter import MARKER_DIR

    jax: Any = sys.modules["jax"]
    cfg = jax.config
    return JaxFacts(
        version=str(jax.__version__),
        hooked=integration.active_adapter() is not None,
        marker=MARKER_DIR,
        cache_dir=str(cfg.jax_compilation_cache_dir),
        min_compile_time_secs=float(integration.program_min_compile_time() or 0.0),
        settings={k: str(v) for k, v in integration.settings_in_effect().items()},
        enable_xla_caches=str(getattr(cfg, "jax_persistent_cache_enable_xla_caches", "")),
    )


def _torch() -> TorchFacts:
    torch: Any = sys.modules["torch"]
    inductor: Any = sys.modules.get("torch._inductor.config")
    return TorchFacts(
        version=str(torch.__version__),
        num_threads=int(torch.get_num_threads()),
        precompile_headers=bool(getattr(inductor, "cpp_cache_precompile_headers", False)),
    )


def _triton() -> TritonFacts:
    from compilecache.frameworks.triton import integration

    triton: Any = sys.modules["triton"]
    knobs: Any = sys.modules.get("triton.knobs")
    return TritonFacts(
        version=str(triton.__version__),
        hooked=integration.installed(),
        hooks=dict(integration.hook_status()),
        chained=integration.chained(),
        cache_dir=str(knobs.cache.dir) if knobs is not None else "",
    )
