"""Which values take the same place in a set's order in every process.

A set iterates in the order of its items' hashes (and of their insertions, where hashes
collide). Python hashes ``str`` and ``bytes`` with a seed drawn per process unless
``PYTHONHASHSEED`` fixes it, and a NaN by its address; numbers and ``None`` hash by value. A
trace that iterates a set of values that hash alike in every process sees the same order
wherever the set is built by the same insertions; any other set's order follows the process.
"""

from __future__ import annotations

import sys

# Strings and bytes are hashed with a per-process seed (PYTHONHASHSEED unset or not 0).
SEEDED = bool(sys.flags.hash_randomization)

_ALIKE: tuple[type, ...] = (int, bool, float, type(None))
if not SEEDED:
    _ALIKE += (str, bytes)


def hashes_alike(value: object) -> bool:
    """Whether ``value`` hashes the same in every process of this kind (numbers, ``None``,
    tuples and frozensets of them, and strings where unseeded); unsure is ``False``."""
    if isinstance(value, (tuple, frozenset)):
        return all(hashes_alike(item) for item in value)
    if type(value) is float and value != value:
        return False  # a NaN hashes by its address
    return type(value) in _ALIKE
