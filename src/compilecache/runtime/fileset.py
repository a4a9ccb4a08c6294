"""A set of named files as one entry payload, and back.

Triton's kernels are groups of files (the cubin, its metadata, the IRs), and a JIT cache that
only knows a directory (torch's C++ extensions) is a tree of them: each travels as one entry.
The payload is a small JSON index followed by the files' bytes::

    b"CCFS1\\n" | u32 index length | index JSON | bytes of file 0 | bytes of file 1 | ...

The index lists ``[name, size, mode]`` per file, ``name`` a relative POSIX path. The entry
around it already carries a checksum (and a signature when configured); :func:`unpack` still
refuses any name that could leave the directory it is unpacked into (absolute, ``..``, empty
parts) and any size that does not add up, so a damaged or hostile payload is a miss.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

MAGIC = b"CCFS1\n"
_LENGTH = struct.Struct(">I")


class BadFileSet(ValueError):
    """The payload is not a file set this module wrote, or names a path outside its root."""


@dataclass(frozen=True)
class File:
    """One member: its bytes and permission bits (0o644 or 0o755: executables stay runnable)."""

    data: bytes
    mode: int = 0o644


def safe_name(name: str) -> bool:
    """Whether ``name`` is a relative path that stays inside the directory it is joined to."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def pack(files: Mapping[str, File]) -> bytes:
    """The payload holding ``files`` (name -> :class:`File`), in name order."""
    names = sorted(files)
    for name in names:
        if not safe_name(name):
            raise BadFileSet(f"not a relative path inside the set: {name!r}")
    index = json.dumps(
        [[n, len(files[n].data), _mode(files[n].mode)] for n in names], separators=(",", ":")
    ).encode()
    return b"".join([MAGIC, _LENGTH.pack(len(index)), index, *(files[n].data for n in names)])


def unpack(payload: bytes) -> dict[str, File]:
    """The files of a payload from :func:`pack`; :class:`BadFileSet` when it is not one."""
    view = memoryview(payload)
    head = len(MAGIC) + _LENGTH.size
    if len(payload) < head or bytes(view[: len(MAGIC)]) != MAGIC:
        raise BadFileSet("not a file set")
    (length,) = _LENGTH.unpack_from(payload, len(MAGIC))
    try:
        index = json.loads(bytes(view[head : head + length]))
    except ValueError as exc:
        raise BadFileSet(f"file set index unreadable: {exc}") from None
    offset = head + length
    files: dict[str, File] = {}
    for record in index if isinstance(index, list) else [None]:
        if not (isinstance(record, list) and len(record) == 3):
            raise BadFileSet("file set index malformed")
        name, size, mode = record
        if not (isinstance(name, str) and safe_name(name)) or name in files:
            raise BadFileSet(f"file set names a bad path: {name!r}")
        if not (isinstance(size, int) and size >= 0 and offset + size <= len(payload)):
            raise BadFileSet(f"file set member {name!r} is cut short")
        files[name] = File(bytes(view[offset : offset + size]), _mode(mode))
        offset += size
    if offset != len(payload):
        raise BadFileSet("file set has trailing bytes")
    return files


def read_file(path: str) -> File:
    """The file at ``path``: its bytes and whether it is executable."""
    with open(path, "rb") as f:
        return File(f.read(), os.fstat(f.fileno()).st_mode)


def read_tree(root: str) -> dict[str, File]:
    """Every regular file under ``root`` (symbolic links are not followed), by relative path."""
    files: dict[str, File] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            files[os.path.relpath(path, root).replace(os.sep, "/")] = read_file(path)
    return files


def _mode(mode: object) -> int:
    """0o755 for anything executable by its owner, else 0o644: no other bits travel."""
    return 0o755 if isinstance(mode, int) and mode & 0o100 else 0o644
