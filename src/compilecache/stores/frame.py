"""The frame in front of every stored value on disk and in object stores.

The local store, the shared-filesystem store and the object store write the same layout, so a
directory can change modes and a bucket can be read like a directory::

    magic      4 bytes   b"CCS1"
    length     u32       length of the JSON header (big-endian)
    header     JSON      key, framework, name, compile time, created, size
    value      bytes

The frame lets the stores list metadata without reading values, rebuild an index from the files,
and check that a file holds the key it was asked for (a wrong hit is never acceptable). The value
itself is an entry with its own checksum (:mod:`compilecache.entry`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from compilecache.errors import CorruptEntry, StoreUnavailable
from compilecache.stores.base import EntryInfo, EntryMeta, StoreURL
from compilecache.units import DEFAULT_MAX_SIZE, parse_size

FRAME_MAGIC = b"CCS1"
_FRAME_PREFIX = struct.Struct(">4sI")
_MAX_FRAME_HEADER = 1024 * 1024
# URL options a directory store reads (local and shared-mount alike).
# ``max_size`` bounds a directory: no other backend takes it (a Redis or S3 URL that names it is
# refused, naming what that backend does take).
DIRECTORY_OPTIONS = frozenset({"shared", "touch_interval", "evict_interval", "fsync", "max_size"})


def key_digest(key: str) -> str:
    """The file name stem of ``key``: a hash, so any key is a safe name."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def key_filename(key: str) -> str:
    """``ab/abcdef....cce``: the sharded relative path, as the local store names it."""
    digest = key_digest(key)
    return f"{digest[:2]}/{digest}.cce"


def encode_frame(key: str, meta: EntryMeta, created: float, size: int) -> bytes:
    """The frame written before a value: magic, header length, JSON header."""
    header = json.dumps(
        {
            "key": key,
            "framework": meta.framework,
            "name": meta.name,
            "compile_time_s": meta.compile_time_s,
            "created": created,
            "size": size,
        },
        separators=(",", ":"),
    ).encode()
    return _FRAME_PREFIX.pack(FRAME_MAGIC, len(header)) + header


def frame_length(prefix: bytes) -> int:
    """Total frame length (prefix + header) from its first 8 bytes; CorruptEntry if foreign."""
    if len(prefix) < _FRAME_PREFIX.size:
        raise CorruptEntry("entry truncated before its frame")
    magic, length = _FRAME_PREFIX.unpack_from(prefix)
    if magic != FRAME_MAGIC or length > _MAX_FRAME_HEADER:
        raise CorruptEntry("entry has a bad frame")
    return int(_FRAME_PREFIX.size + length)


def decode_frame(data: bytes | memoryview) -> tuple[dict[str, Any], int]:
    """The header of the frame at the start of ``data`` and the offset of the value."""
    end = frame_length(bytes(data[: _FRAME_PREFIX.size]))
    if len(data) < end:
        raise CorruptEntry("entry truncated inside its frame")
    try:
        header = json.loads(bytes(data[_FRAME_PREFIX.size : end]))
        if not isinstance(header, dict) or not isinstance(header.get("key"), str):
            raise ValueError("no key")
    except ValueError:
        raise CorruptEntry("entry has an unreadable frame header") from None
    return header, end


def read_frame(f: BinaryIO) -> tuple[dict[str, Any], int]:
    """Read the frame at the start of an open file; returns the header and the value offset."""
    prefix = f.read(_FRAME_PREFIX.size)
    end = frame_length(prefix)
    return decode_frame(prefix + f.read(end - len(prefix)))


def meta_of(header: Mapping[str, Any]) -> EntryMeta:
    try:
        return EntryMeta(
            framework=str(header.get("framework", "")),
            name=str(header.get("name", "")),
            compile_time_s=float(header.get("compile_time_s", 0.0)),
        )
    except (TypeError, ValueError):
        return EntryMeta()


def info_of(header: Mapping[str, Any], size: int, accessed: float | None = None) -> EntryInfo:
    created = _float(header.get("created"))
    return EntryInfo(
        key=str(header["key"]),
        size=size,
        created=created,
        accessed=created if accessed is None else accessed,
        hits=0,
        meta=meta_of(header),
    )


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def write_atomic(tmp: Path, path: Path, chunks: tuple[bytes, ...], *, fsync: bool = False) -> None:
    """Write ``chunks`` to the unique temporary file ``tmp``, then rename it over ``path``: a
    reader sees the old file, the new one or none, never a partial one. ``fsync`` flushes the
    data to the server first (shared filesystems, where a rename may outrun the data)."""
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _not_a_directory(path: str) -> str | None:
    """``path``, or the nearest of its parents that exists, when that is not a directory (then
    no store can be made there); ``None`` otherwise."""
    current = os.path.abspath(path)
    while True:
        if os.path.lexists(current):
            return None if os.path.isdir(current) else current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def directory_and_size(url: StoreURL) -> tuple[str, int]:
    """The directory and size bound of a directory URL (``/path``, ``~/path``, ``file:///path``,
    ``?max_size=``), for the local and the shared-filesystem store.

    With ``url.create`` False (a command that only reads), a directory that does not exist is
    an error naming it, instead of a new, empty store.
    """
    path = url.path if url.scheme == "file" and not url.netloc else url.netloc + url.path
    if not path:
        raise StoreUnavailable(f"no directory in store URL {url.raw!r}")
    blocker = _not_a_directory(os.path.expanduser(path))
    if blocker is not None:
        # The same answer for every command: run, check and stats all say it.
        where = "" if blocker == os.path.expanduser(path) else f" ({blocker} is a file)"
        raise StoreUnavailable(f"cannot use {path} as a cache directory: Not a directory{where}")
    if not url.create and not os.path.isdir(os.path.expanduser(path)):
        raise StoreUnavailable(f"no compilecache store at {path} (the directory does not exist)")
    size = url.max_size or DEFAULT_MAX_SIZE
    if "max_size" in url.params:
        size = parse_size(url.params["max_size"], "max_size")
    return path, size


def host_label() -> str:
    """This host's name, safe in a file or object name (per-host counter files and objects)."""
    name = socket.gethostname() or "host"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
