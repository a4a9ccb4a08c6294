"""Files the command line writes for the user (``report --html``, ``export``): whole or not at all.

A file is written under a unique temporary name in its own directory and renamed over the target
only once every byte is written and flushed, so a failure (a full disk, a missing directory, an
interrupt) never leaves a 0-byte or partial file, and never replaces an existing file with a
worse one. Every failure is an :class:`OutputError`: one line naming the file and the cause, which
the CLI prints without a traceback.

Usage::

    write_text(path, page)                  # a string, as UTF-8
    with replacing(path) as f:              # a stream: f is a binary file
        f.write(chunk)
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from compilecache.errors import CompileCacheError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class OutputError(CompileCacheError):
    """A file the user asked for could not be written (any existing file is left as it was)."""


def target_of(path: str | os.PathLike[str]) -> Path:
    """The file that ``path`` names (through a symbolic link), checked before anything is
    written: its directory exists and it is not itself a directory."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise OutputError(f"cannot write {os.fspath(path)}: it is a directory")
    if not target.parent.is_dir():
        raise OutputError(
            f"cannot write {os.fspath(path)}: the directory {target.parent} does not exist"
        )
    return target


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module's docstring)."""
    with replacing(path) as f:
        f.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` when the ``with`` block ends without an exception.

    Write errors (a full disk, a quota) raise :class:`OutputError`; on any exception the
    temporary file is removed and ``path`` is untouched. ``fsync`` makes the data durable before
    the rename (without it, a crash soon after could leave an empty file under the new name on
    some filesystems). A new file gets the usual permissions (``0o666`` less the umask), a
    replaced one keeps its own.
    """
    target = target_of(path)
    name = os.fspath(path)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(_failed(name, target, exc)) from None
    tmp = Path(tmp_name)
    try:
        with io.BufferedWriter(_Raw(fd, name, target)) as f:
            yield f
            f.flush()  # a write error here is already an OutputError (see _Raw)
            if fsync:
                with _reported(name, target):
                    os.fsync(f.fileno())
        with _reported(name, target):
            os.chmod(tmp, _mode_for(target))
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def _reported(name: str, target: Path) -> Iterator[None]:
    """Turn an OSError of the calls inside into the one-line :class:`OutputError`."""
    try:
        yield
    except OSError as exc:
        raise OutputError(_failed(name, target, exc)) from None


class _Raw(io.FileIO):
    """The temporary file: a write error says which file the user asked for, in one line."""

    def __init__(self, fd: int, name: str, target: Path) -> None:
        super().__init__(fd, "wb", closefd=True)
        self._user_name = name
        self._target = target

    def write(self, data: ReadableBuffer, /) -> int:
        with _reported(self._user_name, self._target):
            return super().write(data)

    def close(self) -> None:
        with _reported(self._user_name, self._target):  # NFS may report a full disk on close
            super().close()


def _failed(name: str, target: Path, exc: OSError) -> str:
    kept = f"{name} was left as it was" if target.exists() else "no file was written"
    return f"cannot write {name}: {exc.strerror or exc} ({kept})"


def _mode_for(target: Path) -> int:
    """The permissions the file gets: an existing file's own, else ``0o666`` less the umask
    (``mkstemp`` creates ``0o600``, which would hide a report from the rest of a team)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Read, not set-and-restore: os.umask(0) would briefly apply to files other threads create.
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
