"""Single-flight leases as files in one directory, for the local store and ``?shared=1``.

``<directory>/<digest>.lease`` (the digest of the key, as entry files are named) holds
``{"token", "expires", "pid", "host"}``:

- **Acquire**: create the file with ``O_CREAT | O_EXCL``, which exactly one creator wins, on a
  local disk and on NFSv3 or later (an exclusive create is one operation on the server, with a
  verifier for retransmissions) and Lustre (the MDS serialises creates). Neither ``flock`` nor
  ``fcntl`` locks are used: network filesystems often do not honour them.
- **Break an expired lease**: rename it aside to a unique name first (of several breakers, one
  rename succeeds), then read what was moved: when it turns out to be fresh (created or renewed
  between our read and our rename), link it back.
- **Release**: the same rename-then-check, so a holder never removes a lease it no longer holds.
- **Renew**: write a new body to a temporary file and rename it over the lease (atomic).
- **Claim** (:meth:`LeaseFiles.claim`, after a miss): acquire, then in the same step
  look for the key's unwritten mark (a read of its lease file: it is not taken and given back)
  and for the entry's file (a ``stat``), so the caller looks for neither again. Measured on
  60 small cold JAX functions: the claim cost 1.1 ms per miss unchecked, and it is the
  single-flight cost every cold compile on a local disk pays.

A lease also names its holder (host, PID namespace, pid). A holder that was killed (SIGKILL, the
OOM killer) releases nothing: on the same host and in the same PID namespace, a lease whose
holder is no longer running is broken at once instead of when it expires, and the first such
lease a process finds has every other lease of dead holders in the directory removed with it, so
that a killed run's leases stall no later one. (Marks of unwritten keys name no holder: they are
meant to outlive the process that left them, until they expire.)

Expiry is wall-clock time written in the file by the holder and compared with the reader's
clock, because hosts sharing a mount share no other clock. A skew between hosts of ``d`` seconds
shifts when others judge a lease expired by ``d``: a reader whose clock is ahead may break a live
lease early (when ``d`` exceeds what remains of it: the heartbeat renews every third of the TTL),
which costs a duplicate compile; a reader whose clock is behind waits up to ``d`` longer for a
dead holder's lease (bounded by the wait timeout). Neither ever gives a wrong result: leases only
decide who compiles, and entries are verified on every read and published atomically.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from compilecache.errors import StoreUnavailable
from compilecache.stores.capabilities import UNWRITTEN_SUFFIX, Claim, Leases
from compilecache.stores.frame import key_digest

log = logging.getLogger("compilecache")

# A lease file that exists but cannot be parsed yet (its creator is between the exclusive create
# and the write, or died there) counts as held for this long after its modification time. On a
# network filesystem that mtime is the server's clock: a skew shifts the grace like an expiry.
LEASE_CREATE_GRACE = 10.0

_READ_RETRIES = 3
_ASIDE_SUFFIXES = (".stale", ".release")


class LeaseFiles(Leases):
    """Expiring, exclusive leases on keys, one small file per held key in ``directory``: the
    leases of the local store and of ``?shared=1``.

    ``publish(path, data)`` replaces a file atomically (the owning store's temporary-file-and-
    rename, with its fsync policy); ``fsync`` also flushes a newly created lease to the disk or
    server before it is reported taken; ``entry_path(key)`` is the owning store's file of an
    entry (a claim looks for it).
    """

    def __init__(
        self,
        directory: Path,
        publish: Callable[[Path, bytes], None],
        entry_path: Callable[[str], Path],
        *,
        fsync: bool = False,
    ) -> None:
        self.directory = directory
        self._publish = publish
        self._entry_path = entry_path
        self._fsync = fsync
        self._swept = False  # the leases of dead holders were removed once already
        # Leases the sweep removed: the claim that next takes one took it over from the dead.
        self._taken_from_dead: set[Path] = set()

    def path_of(self, key: str) -> Path:
        return self.directory / f"{key_digest(key)}.lease"

    def acquire(self, key: str, ttl_s: float) -> str | None:
        """A new token when the lease was taken, ``None`` when another process holds it."""
        return self._acquire(key, ttl_s)[0]

    def _acquire(self, key: str, ttl_s: float) -> tuple[str | None, bool]:
        """:meth:`acquire`, and whether it broke the lease of a holder that no longer runs."""
        path = self.path_of(key)
        token = uuid.uuid4().hex
        took_over = False
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:  # the directory is created on first use
                with contextlib.suppress(OSError):
                    self.directory.mkdir(parents=True, exist_ok=True)
                continue
            except FileExistsError:
                broken = self._break_expired(path)
                if not broken:
                    return None, False
                took_over = took_over or broken == "dead"
                continue
            except OSError as exc:
                raise StoreUnavailable(f"cannot create the lease {path}: {exc}") from exc
            try:
                with os.fdopen(fd, "wb") as f:
                    # A mark of an unwritten key outlives its maker on purpose: no holder named.
                    f.write(_lease_body(token, ttl_s, holder=not key.endswith(UNWRITTEN_SUFFIX)))
                    if self._fsync:
                        f.flush()
                        os.fsync(f.fileno())
            except OSError as exc:
                # Created but not written (disk full, server gone): do not make the others wait
                # out the grace period of an empty file.
                with contextlib.suppress(OSError):
                    path.unlink()
                raise StoreUnavailable(f"cannot write the lease {path}: {exc}") from exc
            if self._taken_from_dead:
                try:
                    self._taken_from_dead.remove(path)
                    took_over = True
                except KeyError:
                    pass
            return token, took_over
        return None, False

    def claim(self, key: str, ttl_s: float) -> Claim:
        """The lease, checked: ``unwritten`` when the key's mark is held, ``present`` when its
        entry file exists (the lease is given back in both cases), else ``won``."""
        token, took_over = self._acquire(key, ttl_s)
        if token is None:
            return Claim("held", checked=True)
        state: Literal["unwritten", "present"]
        if self.held(key + UNWRITTEN_SUFFIX):
            state = "unwritten"
        elif self._entry_path(key).exists():
            state = "present"
        else:
            return Claim("won", token, checked=True, took_over=took_over)
        self.release(key, token)
        return Claim(state, checked=True)

    def held(self, key: str) -> bool:
        """Whether an unexpired lease on ``key`` exists, held by a process that may still run
        (read only: nothing is taken)."""
        _, expires, dead = _lease_state(self.path_of(key))
        return expires is not None and time.time() < expires and not dead

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        """Extend the lease if ``token`` still holds it; ``False`` when it was lost."""
        path = self.path_of(key)
        if read_lease(path)[0] != token:
            return False
        try:
            self._publish(path, _lease_body(token, ttl_s))
        except OSError:
            return False
        return True

    def release(self, key: str, token: str) -> None:
        """Remove the lease if ``token`` holds it; another holder's lease is left alone.

        The lease is moved aside first and read there (not read in place first: a holder
        releases its own lease almost always, and the read in place cost every release four
        system calls of the background thread)."""
        path = self.path_of(key)
        aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}.release")
        try:
            os.rename(path, aside)
        except OSError:
            return  # gone: released, or broken and not taken again
        if read_lease(aside)[0] != token:
            with contextlib.suppress(OSError):
                os.link(aside, path)  # another holder's lease: put it back unless replaced
        with contextlib.suppress(OSError):
            aside.unlink()

    def _break_expired(self, path: Path, *, sweep: bool = True) -> Literal[False, True, "dead"]:
        """Remove ``path`` if its lease has expired or its holder on this host is no longer
        running; true when the caller may create it (``"dead"``: a dead holder's lease was
        broken). The first lease found with a dead holder removes the others of dead holders
        too (``sweep``)."""
        _, expires, dead = _lease_state(path)
        if expires is None:
            return True  # vanished: try again
        if time.time() < expires and not dead:
            return False
        aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}.stale")
        try:
            os.rename(path, aside)
        except OSError:
            return True  # someone else broke or released it first
        _, moved_expires, moved_dead = _lease_state(aside)
        if moved_expires is not None and time.time() < moved_expires and not moved_dead:
            # What we moved is fresh: a new lease created, or this one renewed (or written by
            # its creator), between our read and our rename. Restore it.
            with contextlib.suppress(OSError):
                os.link(aside, path)
            with contextlib.suppress(OSError):
                aside.unlink()
            return False
        with contextlib.suppress(OSError):
            aside.unlink()
        if moved_dead and sweep and not self._swept:
            self._swept = True
            swept = self.clean_dead()
            log.info(
                "compilecache: took over the leases of a process that ended without releasing "
                "them (killed?): %d in %s",
                swept + 1,
                self.directory,
            )
        return "dead" if moved_dead else True

    def clean_dead(self) -> int:
        """Remove every lease of this directory whose holder ran on this host and is no longer
        running (a killed process's, which would otherwise stall others until they expire), and
        what such a process had set aside and not yet removed. Returns how many were removed."""
        removed = 0
        try:
            names = list(self.directory.iterdir())
        except OSError:
            return 0
        for path in names:
            if path.suffix == ".lease":
                if _lease_state(path)[2] and self._break_expired(path, sweep=False):
                    self._taken_from_dead.add(path)
                    removed += 1
            elif path.name.endswith(_ASIDE_SUFFIXES) and _lease_state(path)[2]:
                # Set aside by a release or a break that a SIGKILL cut short before its unlink:
                # the lease inside names a dead holder, so nothing will link it back.
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    def clean_stale(self, older_than: float) -> int:
        """Housekeeping: remove what processes killed mid-lease left behind more than
        ``older_than`` seconds ago (files set aside by a break or a release, and leases that
        expired and that nobody asked for again). Returns how many files were removed."""
        cutoff = time.time() - older_than
        removed = 0
        try:
            names = list(self.directory.iterdir())
        except OSError:
            return 0
        for path in names:
            with contextlib.suppress(OSError):
                if path.name.endswith(_ASIDE_SUFFIXES):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
                elif path.suffix == ".lease":
                    _, expires = read_lease(path)
                    if expires is not None and expires < cutoff and self._break_expired(path):
                        removed += 1
        return removed


_HOST = socket.gethostname()


def _pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]`` on Linux; ``""`` where there is no
    such thing): a pid means the same process only within one namespace (one container)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


_PIDNS = _pid_namespace()


def _lease_body(token: str, ttl_s: float, *, holder: bool = True) -> bytes:
    body: dict[str, object] = {"token": token, "expires": time.time() + ttl_s}
    if holder:
        body.update(pid=os.getpid(), host=_HOST, pidns=_PIDNS)
    return json.dumps(body, separators=(",", ":")).encode()


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this PID namespace still runs (a zombie, killed and not yet
    reaped by its parent, does not)."""
    if pid <= 0:
        return True  # not a pid we can judge: assume its holder lives
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _holder_dead(data: dict[str, object]) -> bool:
    """Whether a lease's holder ran in this host's PID namespace and no longer runs."""
    pid = data.get("pid")
    return (
        isinstance(pid, int)
        and data.get("host") == _HOST
        and data.get("pidns", "") == _PIDNS
        and not _running(pid)
    )


def holder() -> str:
    """This process as a lease's holder, for stores whose lease is one string (Redis): the
    host, the PID namespace and the pid, read back by :func:`holder_gone`."""
    return f"{_HOST}|{_PIDNS}|{os.getpid()}"


def holder_gone(text: str) -> bool:
    """Whether the holder :func:`holder` wrote as ``text`` ran on this host, in this PID
    namespace, and no longer runs (anything else, or unreadable: it may still run)."""
    parts = text.split("|")
    if len(parts) < 3 or not parts[-1].isdigit():
        return False
    pid = int(parts[-1])
    pidns = parts[-2]
    host = "|".join(parts[:-2])
    return _holder_dead({"pid": pid, "host": host, "pidns": pidns})


def _lease_state(path: Path) -> tuple[str | None, float | None, bool]:
    """:func:`read_lease`, and whether the lease's holder is a process of this host that is no
    longer running."""
    raw = _read_raw(path)
    if raw is None:
        return None, None, False
    try:
        data = json.loads(raw)
        return str(data["token"]), float(data["expires"]), _holder_dead(data)
    except (ValueError, KeyError, TypeError):
        pass
    token, expires = read_lease(path)
    return token, expires, False


def read_lease(path: Path) -> tuple[str | None, float | None]:
    """The token and expiry (wall clock) of a lease file; ``(None, None)`` when it is absent.

    A file that exists but does not parse (being written) has no token and expires
    ``LEASE_CREATE_GRACE`` seconds after its modification time.
    """
    raw = _read_raw(path)
    if raw is None:
        return None, None
    try:
        data = json.loads(raw)
        return str(data["token"]), float(data["expires"])
    except (ValueError, KeyError, TypeError):
        pass
    try:  # only now the time it was made: a system call fewer for every lease that parses
        mtime = os.stat(path).st_mtime
    except OSError:
        return None, None  # gone meanwhile
    return None, mtime + LEASE_CREATE_GRACE


def _read_raw(path: Path) -> bytes | None:
    for attempt in range(_READ_RETRIES):
        try:
            with open(path, "rb", buffering=0) as f:
                return f.read(4096)
        except OSError as exc:
            # ESTALE: another host replaced (renewed) or moved the file under our open handle.
            if exc.errno == errno.ESTALE and attempt + 1 < _READ_RETRIES:
                continue
            return None
    return None
