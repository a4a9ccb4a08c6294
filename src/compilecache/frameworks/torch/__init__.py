"""torch.compile's caches: the FX graph, AOTAutograd and autotune caches behind torch's remote-
cache interface, Dynamo's packages (``dynamo``), C++ kernel binaries (``kernels``), precompiled
headers (``headers``), probe answers (``probes``), source hashes (``sources``), kernel templates
(``templates``), JIT-built extensions (``extensions``), torch's own switches (``switches``) and
the words ``explain`` uses (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once torch itself is imported. The hooks live in
:mod:`~compilecache.frameworks.torch.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither torch nor the hooks).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compilecache.config import Config
    from compilecache.runtime.cache import Cache

INTEGRATION = "compilecache.frameworks.torch.integration"


def install(cache: Cache, cfg: Config) -> bool:
    """Hook torch (already imported) up to ``cache``; whether it is hooked."""
    from compilecache.frameworks.torch import integration

    return integration.install(cache, cfg)


def uninstall() -> None:
    """Undo :func:`install`; nothing when it never ran (the hooks are not imported for it)."""
    integration = sys.modules.get(INTEGRATION)
    if integration is not None:
        integration.uninstall()
