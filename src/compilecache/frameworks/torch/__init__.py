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

from typing import TYPE_CHECKING

from compilecache.frameworks import face

install, uninstall = face(__name__)

if TYPE_CHECKING:  # mypy holds the hooks to the contract every framework keeps
    from compilecache.frameworks import FrameworkHooks
    from compilecache.frameworks.torch import integration

    _hooks: FrameworkHooks = integration
