"""JAX's persistent compilation cache: compilecache's adapter behind
``jax._src.compilation_cache``, the executables it reads ahead (``preload``), XLA's own cache
directories (``xla``), and the words ``explain`` uses for JAX's key components (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once JAX itself is imported. The hooks live in
:mod:`~compilecache.frameworks.jax.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither JAX nor the hooks).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compilecache.config import Config
    from compilecache.runtime.cache import Cache

INTEGRATION = "compilecache.frameworks.jax.integration"


def install(cache: Cache, cfg: Config) -> bool:
    """Hook JAX (already imported) up to ``cache``; whether it is hooked."""
    from compilecache.frameworks.jax import integration

    return integration.install(cache, cfg)


def uninstall() -> None:
    """Undo :func:`install`; nothing when it never ran (the hooks are not imported for it)."""
    integration = sys.modules.get(INTEGRATION)
    if integration is not None:
        integration.uninstall()
