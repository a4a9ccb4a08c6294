"""Enables compilecache in every Python process started under ``compilecache run``.

``compilecache run`` prepends this directory to PYTHONPATH, so Python imports this module at
start-up (as ``ddtrace-run`` and ``opentelemetry-instrument`` do). It first chains to any other
``sitecustomize`` on the path, then enables compilecache. Nothing here may raise: a broken cache
must never stop the user's program from starting.
"""

import importlib.util
import os
import sys


def _chain_to_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
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


def _enable() -> None:
    if os.environ.get("COMPILECACHE_DISABLE", "").strip() in ("1", "true", "yes", "on"):
        return
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
        print(f"compilecache: not enabled: {exc}", file=sys.stderr)


_chain_to_next_sitecustomize()
_enable()
