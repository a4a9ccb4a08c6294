"""Triton's kernel cache: a cache manager on the store, and the words ``explain`` uses (``words``).

This module is the face: :func:`install` and :func:`uninstall`, called by
:mod:`compilecache.frameworks` once Triton itself is imported. The hooks live in
:mod:`~compilecache.frameworks.triton.integration`, imported only then; the other modules of the
package are light (importing ``words`` imports neither Triton nor the hooks).
"""

from compilecache.frameworks import face

install, uninstall = face(__name__)
