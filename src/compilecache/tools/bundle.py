"""Bundles: a cache, or a filtered part of it, in one portable file; and warming from a store.

``compilecache export cache.ccb`` writes one file that can be copied into a container image or
to an air-gapped cluster; ``compilecache import cache.ccb`` adds its entries to a store;
``compilecache warm --from URL`` copies entries from another store into the local level.

Format: a tar archive in one zstd frame (with zstd's content checksum)::

    manifest.json        first member: what the bundle holds and where it was made
    entries/000000.cce   each entry exactly as stored (the entry format: header, payload,
    entries/000001.cce   optional HMAC signature, XXH3 checksum), in manifest order

``manifest.json``: ``format``, ``version``, ``created``, ``compilecache`` (version), ``source``
(store URL), ``platform`` (system, machine, python), ``cpu`` (machine and ISA features of the
exporting host), ``frameworks`` (versions installed there), ``device_kinds``, ``total_size`` and
``entries``: one record per member with ``key``, ``file``, ``size``, ``sha256``, ``framework``,
``name``, ``created``, ``compile_time_s``, ``versions``, ``backend``, ``device_kinds``,
``signed``.

Import reads the file twice and writes nothing until the first pass has read all of it:

1. verify: ``manifest.json`` comes first and parses; every member is listed in it with the
   listed size and SHA-256; nothing listed is missing. A truncated or damaged bundle fails here
   with :class:`BundleError`, and the target store is untouched.
2. apply: each entry is decoded (its checksum; its signature when COMPILECACHE_SECRET is set),
   checked against this host (framework versions, backend and device kinds, CPU architecture
   and ISA features) and written, unless the target already holds a valid entry under the key:
   a good entry is never replaced, and never by a bad one. What is skipped is reported with the
   reason. ``warm`` applies the same checks to entries read from another store.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from compilecache import atomicfile, entry
from compilecache.errors import BundleError, CorruptEntry, ForeignEntry
from compilecache.host import HostCheck, cpu_target, installed_frameworks, installed_version
from compilecache.host import entry_backend as _backend
from compilecache.runtime.reader import Reader
from compilecache.runtime.transfer import (
    EntryFilter,
    Progress,
    Report,
    admit,
    count_words,
    nothing_matched,
    peek_entry,
    read_entry,
    split_keys,
)
from compilecache.signing import Signing
from compilecache.stores.base import Store

FORMAT = "compilecache-bundle"
VERSION = 1
MANIFEST = "manifest.json"
# A manifest is a list of small records: anything bigger is damage, not a real manifest.
_MAX_MANIFEST = 256 * 1024 * 1024
_READ_CHUNK = 1024 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")


# -- export --------------------------------------------------------------------------------------


def _record(key: str, data: bytes, found: entry.Entry, file: str) -> dict[str, Any]:
    header = found.header
    backend, kinds = _backend(header)
    return {
        "key": key,
        "file": file,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "framework": header.framework,
        "name": header.name,
        "created": header.created,
        "compile_time_s": header.compile_time_s,
        "versions": header.versions,
        "backend": backend,
        "device_kinds": sorted(kinds),
        "signed": found.signed,
        "signed_by": found.signer,
    }


def _manifest(source: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": time.time(),
        "compilecache": installed_version("compilecache") or "",
        "source": source,
        "platform": {
            "system": platform.system(),
            "machine": platform.machine(),
            "python": platform.python_version(),
        },
        "cpu": cpu_target(),
        "frameworks": installed_frameworks(),
        "device_kinds": sorted({k for r in records for k in r["device_kinds"]}),
        "total_size": sum(r["size"] for r in records),
        "entries": records,
    }


def export_bundle(
    store: Store,
    path: str | os.PathLike[str],
    *,
    select: EntryFilter | None = None,
    signing: Signing | None = None,
) -> Report:
    """Write the entries of ``store`` that ``select`` matches to the bundle ``path``.

    Entries are read with ``peek`` and verified (checksum, and the signature when ``signing`` is
    given); damaged ones are left out, reported and left in ``store``. The file appears complete
    or not at all (written under a temporary name, then renamed), and an existing file is not
    replaced by a bundle that holds nothing: that raises :class:`OutputError`."""
    select = select or EntryFilter()
    target = atomicfile.target_of(path)  # a missing directory fails before the store is read
    report = Report("export", store.url, str(Path(path)))
    infos = [i for i in store.scan() if select.matches(i)]
    if not infos:
        raise nothing_matched(store, select)
    report.total = len(infos)
    report.total_lists = split_keys(i.key for i in infos)[1]
    progress = Progress(len(infos), "reading")
    reader = Reader(signing)
    records: list[dict[str, Any]] = []
    offsets: list[int] = []
    # Entries are spooled to a temporary file first: the manifest, which lists their checksums,
    # must come first in the archive.
    with tempfile.TemporaryFile(prefix="compilecache-export-") as spool:
        for info in infos:
            progress.advance()
            read = read_entry(store, info.key, reader)
            if isinstance(read, str):
                report.skipped.append((info.key, read))
                continue
            data, found = read
            offsets.append(spool.tell())
            spool.write(data)
            records.append(_record(info.key, data, found, f"entries/{len(records):06d}.cce"))
            report.transferred.append(info.key)
            report.bytes += len(data)
        progress.close()
        if not records and target.exists():
            raise atomicfile.OutputError(
                f"nothing to export ({count_words(*split_keys(i.key for i in infos))} matched, "
                f"{len(report.skipped)} skipped): {os.fspath(path)} was left as it was"
            )
        manifest = json.dumps(_manifest(store.url, records), indent=1, sort_keys=True).encode()
        progress = Progress(len(records), "writing")
        try:
            with atomicfile.replacing(path) as raw:
                compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
                with (
                    compressor.stream_writer(raw, closefd=False) as compressed,
                    tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar,
                ):
                    _add(tar, MANIFEST, len(manifest), io.BytesIO(manifest))
                    for record, offset in zip(records, offsets, strict=True):
                        spool.seek(offset)
                        _add(tar, record["file"], record["size"], spool)
                        progress.advance()
        finally:
            progress.close()
    return report


def _add(tar: tarfile.TarFile, name: str, size: int, source: BinaryIO) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, source)


# -- import --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    data: dict[str, Any]
    records: dict[str, dict[str, Any]]  # member file -> entry record

    @property
    def cpu(self) -> Mapping[str, Any] | None:
        cpu = self.data.get("cpu")
        return cpu if isinstance(cpu, Mapping) else None


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a file holding one zstd frame. Reaching the end of the file
    before the end of the frame, or finding bytes after it, raises BundleError: a bundle cut
    after its last entry is still a truncated file."""

    def __init__(self, raw: BinaryIO, path: Path) -> None:
        self.raw = raw
        self.path = path
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._buffer = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buffer and not self._ended:
            chunk = self.raw.read(_READ_CHUNK)
            if not chunk:
                self._ended = True
                if not self._obj.eof:
                    raise BundleError(f"{self.path} is truncated: its compressed stream ends early")
                break
            if self._obj.eof:
                raise BundleError(f"{self.path} has unexpected bytes after its end")
            self._buffer = self._obj.decompress(chunk)
        n = min(len(b), len(self._buffer))
        b[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n

    def drain(self) -> None:
        """Read to the end (checking the frame's end and checksum)."""
        while self.read(_READ_CHUNK):
            pass


@contextlib.contextmanager
def _open_bundle(path: Path) -> Iterator[tuple[tarfile.TarFile, _Decompressed]]:
    """The bundle's tar stream; every failure to read it becomes a BundleError."""
    try:
        raw = open(path, "rb")  # noqa: SIM115  (closed below, after the stream)
    except OSError as exc:
        raise BundleError(f"cannot read the bundle {path}: {exc}") from exc
    try:
        reader = _Decompressed(raw, path)
        with tarfile.open(fileobj=io.BufferedReader(reader, _READ_CHUNK), mode="r|") as tar:
            yield tar, reader
    except BundleError:
        raise
    except (tarfile.TarError, zstandard.ZstdError, EOFError, OSError, ValueError) as exc:
        raise BundleError(
            f"{path} is not a readable compilecache bundle (truncated or damaged?): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    finally:
        raw.close()


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    if member.size > limit:
        raise BundleError(f"bundle member {member.name} is larger than expected")
    f = tar.extractfile(member)
    if f is None:
        raise BundleError(f"bundle member {member.name} is not a file")
    data = f.read()
    if len(data) != member.size:
        raise BundleError(f"bundle member {member.name} is truncated")
    return data


def _parse_manifest(raw: bytes, path: Path) -> Manifest:
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a compilecache bundle manifest")
        if data.get("version") != VERSION:
            raise ValueError(f"unsupported bundle version {data.get('version')!r}")
        records: dict[str, dict[str, Any]] = {}
        keys: set[str] = set()
        for record in data["entries"]:
            key, file, size = record["key"], record["file"], record["size"]
            if not (isinstance(key, str) and isinstance(file, str) and isinstance(size, int)):
                raise ValueError("an entry record has a bad key, file or size")
            if size < 0 or not _HEX64.fullmatch(str(record["sha256"])):
                raise ValueError(f"the record of {key!r} has a bad size or checksum")
            if file in records or key in keys or file == MANIFEST:
                raise ValueError(f"{file!r} or {key!r} is listed twice")
            records[file] = record
            keys.add(key)
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{path}: bad manifest: {exc}") from exc
    return Manifest(data, records)


def _members(path: Path, progress_label: str) -> Iterator[tuple[Manifest, dict[str, Any], bytes]]:
    """Every entry of the bundle with its record, after checking it against the manifest.
    Raises BundleError (possibly after yielding some) when the bundle is damaged."""
    with _open_bundle(path) as (tar, stream):
        first = tar.next()
        if first is None or first.name != MANIFEST or not first.isfile():
            raise BundleError(f"{path}: {MANIFEST} must be the first member of a bundle")
        manifest = _parse_manifest(_member_bytes(tar, first, _MAX_MANIFEST), path)
        seen: set[str] = set()
        progress = Progress(len(manifest.records), progress_label)
        try:
            for member in tar:
                if member is first:
                    continue  # iterating a TarFile starts again with what was read already
                record = manifest.records.get(member.name)
                if record is None or member.name in seen or not member.isfile():
                    raise BundleError(f"{path}: unexpected member {member.name!r}")
                if member.size != record["size"]:
                    raise BundleError(f"{path}: {member.name} does not have its listed size")
                data = _member_bytes(tar, member, record["size"])
                if hashlib.sha256(data).hexdigest() != record["sha256"]:
                    raise BundleError(f"{path}: {member.name} ({record['key']}) is damaged")
                seen.add(member.name)
                progress.advance()
                yield manifest, record, data
        finally:
            progress.close()
        stream.drain()
        missing = len(manifest.records) - len(seen)
        if missing:
            raise BundleError(f"{path} is truncated: {missing} listed entries are missing")
        if not manifest.records:
            yield manifest, {}, b""  # an empty bundle: still hand the manifest over


def verify_bundle(path: str | os.PathLike[str], signing: Signing | None = None) -> Manifest:
    """Read the whole bundle and check it against its manifest; BundleError when damaged, or,
    when ``signing`` trusts only some writers, when any entry is not signed by one of them."""
    manifest: Manifest | None = None
    untrusted: list[tuple[str, str]] = []
    for read, record, data in _members(Path(path), "verifying"):
        manifest = read
        if record and signing is not None and signing.verifies_writers:
            try:
                # Signatures only: import's own pass decodes the entries it admits.
                Reader(signing).verify(data, record["key"])
            except ForeignEntry as exc:
                untrusted.append((record["key"], str(exc)))
            except CorruptEntry:
                pass  # damage is the entry's own: import skips it with the reason
    assert manifest is not None
    if untrusted:
        key, why = untrusted[0]
        raise BundleError(
            f"{path}: {len(untrusted)} of {len(manifest.records)} entries are not signed by a "
            f"trusted key (first: {key}: {why}); nothing imported. Import it where its "
            "writer's public key is in COMPILECACHE_TRUSTED_KEYS, or have a trusted writer "
            "export it."
        )
    return manifest


def import_bundle(
    path: str | os.PathLike[str],
    target: Store,
    *,
    signing: Signing | None = None,
    check: bool = True,
) -> Report:
    """Add the bundle's entries to ``target``: see the module docstring for the guarantees."""
    source = Path(path)
    # Pass 1: nothing is written unless all of it reads (and, with trusted keys, all of it is
    # signed by a trusted writer).
    manifest = verify_bundle(source, signing)
    keys = [record["key"] for record in manifest.records.values()]
    report = Report(
        "import", str(source), target.url, total=len(keys), total_lists=split_keys(keys)[1]
    )
    host = HostCheck(manifest.cpu) if check else None
    reader = Reader(signing)
    for _, record, data in _members(source, "importing"):
        if record:
            admit(target, record["key"], data, report, reader=reader, host=host)
    return report


# -- warm ----------------------------------------------------------------------------------------


def warm(
    source: Store,
    target: Store,
    *,
    select: EntryFilter | None = None,
    signing: Signing | None = None,
    check: bool = True,
) -> Report:
    """Copy the entries of ``source`` that ``select`` matches into ``target`` (verified, checked
    against this host, never replacing a good entry)."""
    select = select or EntryFilter()
    infos = [i for i in source.scan() if select.matches(i)]
    report = Report(
        "warm",
        source.url,
        target.url,
        total=len(infos),
        total_lists=split_keys(i.key for i in infos)[1],
    )
    host = HostCheck() if check else None
    reader = Reader(signing)
    progress = Progress(len(infos), "warming")
    try:
        for info in infos:
            progress.advance()
            data = peek_entry(source, info.key)  # admit() decodes it
            if isinstance(data, str):  # damaged there: reported and left in the source
                report.skipped.append((info.key, data))
                continue
            admit(target, info.key, data, report, reader=reader, host=host)
    finally:
        progress.close()
    return report
