"""Enables compilecache in every Python process started under ``compilecache run``.

``compilecache run`` prepends this directory to PYTHONPATH, so Python imports this module at
start-up (as ``ddtrace-run`` and ``opentelemetry-instrument`` do). It first chains to any other
``sitecustomize`` on the path, then waits for the process to import a framework compilecache
caches (JAX, torch, Triton) and enables compilecache right then, before the framework's first
compile. A Python child that compiles nothing (a data loader, a shell helper, torch's ISA
probes) pays for this module and one import hook, nothing more: compilecache itself is not even
imported. Nothing here may raise: a broken cache must never stop the user's program.
"""

from __future__ import annotations

import os
import sys

# Not typing.TYPE_CHECKING: importing typing would cost every Python child ~10 ms at start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

# The modules whose import enables compilecache (frameworks.INTEGRATIONS' triggers).
TRIGGERS = ("jax", "torch", "triton")


def _next_sitecustomize_exists(here: str) -> bool:
    """Whether another ``sitecustomize`` is on the path (looked for with ``os.path`` alone:
    importing ``importlib.util`` for this would cost every Python child ~5 ms)."""
    for entry in sys.path:
        directory = os.path.abspath(entry or ".")
        if directory == here:
            continue
        for name in ("sitecustomize.py", "sitecustomize.pyc", "sitecustomize"):
            if os.path.exists(os.path.join(directory, name)):
                return True
    return False


def _chain_to_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if not _next_sitecustomize_exists(here):
        return
    import importlib.util

    saved_path, saved_module = list(sys.path), sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as exc:  # the other sitecustomize failing is not ours to fix
        print(f"compilecache: the next sitecustomize failed: {exc}", file=sys.stderr)
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


def _say_once(message: str) -> None:
    """Print ``message`` once per ``compilecache run``, not once per process of it."""
    spool = os.environ.get("COMPILECACHE_RUN_SPOOL")
    if spool:
        import hashlib

        name = "said-" + hashlib.sha256(message.encode()).hexdigest()[:16]
        try:
            os.close(os.open(os.path.join(spool, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another process of this run said it
        except OSError:
            pass
    print(message, file=sys.stderr)


def _enable() -> None:
    try:
        import compilecache
    except ImportError:
        # A child interpreter without compilecache installed: use the parent's copy.
        fallback = os.environ.get("COMPILECACHE_BOOTSTRAP_PATH")
        if not fallback:
            return
        sys.path.append(fallback)
        try:
            import compilecache
        except ImportError:
            return
    try:
        compilecache.enable()
    except Exception as exc:
        _say_once(f"compilecache: not enabled: {exc}")
        _count_error()


def _count_error() -> None:
    """One error in the run's summary for a process that could not be enabled (a bad setting,
    an unknown URL option), as for one whose store could not be opened (``enable`` counts that
    in its session): every "not enabled" is an error of the run, whatever its cause."""
    spool = os.environ.get("COMPILECACHE_RUN_SPOOL")
    if not spool:
        return
    try:
        with open(os.path.join(spool, f"{os.getpid()}.json"), "w") as f:
            f.write('{"errors": 1}')
    except OSError:
        pass  # the summary is a report: never fail the program for it


class _FrameworkFinder:
    """A meta-path finder that finds nothing: on the first import of a trigger module it takes
    itself out and enables compilecache, whose own import hook then follows the framework.
    ``compilecache.active()`` asks it to enable at once (a program that looks at its session
    before importing a framework)."""

    compilecache_bootstrap = True

    def enable_now(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return
        _enable()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in TRIGGERS:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        _enable()
        # Found again, now through the finders compilecache put in place (its import hook wraps
        # the framework's loader): this lookup is past them already.
        import importlib.util

        return importlib.util.find_spec(fullname)


def _enable_on_framework_import() -> None:
    if os.environ.get("COMPILECACHE_DISABLE", "").strip() in ("1", "true", "yes", "on"):
        return
    if any(name in sys.modules for name in TRIGGERS):
        _enable()  # imported already (by another sitecustomize)
        return
    sys.meta_path.insert(0, _FrameworkFinder())


_chain_to_next_sitecustomize()
_enable_on_framework_import()
