"""The digests the integrations build their keys from.

A key is made of named components, each hashed on its own (so that a miss can name the one that
changed), then chained into one digest under a version string that changes when the recipe
does. Inputs named by a command line are hashed with their contents and their paths, each path
with the directories that differ per process replaced by placeholders.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping


def text_digest(text: str) -> str:
    """SHA-256 (hex) of ``text`` (undecodable bytes of a file name kept as they were)."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def chain(version: str, components: Mapping[str, str]) -> str:
    """One digest of named component hashes (the order of ``components`` does not matter)."""
    h = hashlib.sha256(version.encode())
    for name in sorted(components):
        h.update(f"{name}={components[name]}\n".encode())
    return h.hexdigest()


def inputs_digest(
    paths: Iterable[str], name: Callable[[str], str], contents: Callable[[str], str]
) -> str:
    """One digest of files: each one's ``name(path)`` (a path made the same on every host) and
    ``contents(path)`` (a hash of its bytes), in the order given."""
    h = hashlib.sha256()
    for path in paths:
        h.update(name(path).encode())
        h.update(contents(path).encode())
    return h.hexdigest()
