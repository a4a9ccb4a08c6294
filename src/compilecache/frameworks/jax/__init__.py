"""JAX's persistent compilation cache: compilecache's adapter behind
``jax._src.compilation_cache`` (``adapter``), JAX's key step by step (``key``), the program's own
cache settings (``settings``), the executables it reads ahead (``preload``), XLA's own cache
directories (``xla``), and the words ``explain`` uses for JAX's key components (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once JAX itself is imported. The hooks live in
:mod:`~compilecache.frameworks.jax.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither JAX nor the hooks).
"""

from typing import TYPE_CHECKING

from compilecache.frameworks import face

install, uninstall = face(__name__)

if TYPE_CHECKING:  # mypy holds the hooks to the contract every framework keeps
    from compilecache.frameworks import FrameworkHooks
    from compilecache.frameworks.jax import integration

    _hooks: FrameworkHooks = integration
