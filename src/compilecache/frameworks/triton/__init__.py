"""Triton's kernel cache: a cache manager on the store, and the words ``explain`` uses (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once Triton itself is imported. The hooks live in
:mod:`~compilecache.frameworks.triton.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither Triton nor the hooks).
"""

from typing import TYPE_CHECKING

from compilecache.frameworks import face

install, uninstall = face(__name__)

if TYPE_CHECKING:  # mypy holds the hooks to the contract every framework keeps
    from compilecache.frameworks import FrameworkHooks
    from compilecache.frameworks.triton import integration

    _hooks: FrameworkHooks = integration
