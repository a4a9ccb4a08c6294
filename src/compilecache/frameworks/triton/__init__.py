"""Triton's kernel cache: a cache manager on the store, and the words ``explain`` uses (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once Triton itself is imported. The hooks live in
:mod:`~compilecache.frameworks.triton.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither Triton nor the hooks).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compilecache.config import Config
    from compilecache.runtime.cache import Cache

INTEGRATION = "compilecache.frameworks.triton.integration"


def install(cache: Cache, cfg: Config) -> bool:
    """Hook Triton (already imported) up to ``cache``; whether it is hooked."""
    from compilecache.frameworks.triton import integration

    return integration.install(cache, cfg)


def uninstall() -> None:
    """Undo :func:`install`; nothing when it never ran (the hooks are not imported for it)."""
    integration = sys.modules.get(INTEGRATION)
    if integration is not None:
        integration.uninstall()
