"""The entry format: one self-describing, checksummed record per cached compile.

Layout (all integers big-endian)::

    magic      8 bytes   b"\\x89CCE\\r\\n\\x1a\\n" (PNG-style: catches text-mode and truncation damage)
    version    u16       FORMAT_VERSION
    flags      u16       bit 0: payload is zstd-compressed by compilecache
    header_len u32       length of the JSON metadata header
    stored_len u64       length of the payload as stored
    header     JSON      framework, key, name, created, compile time, sizes, versions, components
    payload    bytes
    sig_len    u16       0, or the length of the signatures over the frame, header and payload
    sig        bytes     HMAC-SHA256 (32), Ed25519 public key + signature (96), or both (128)
    checksum   16 bytes  XXH3-128 over everything above

The checksum is last so that a truncated file can never pass, and it covers the signature so a
flipped signature byte is reported as corruption rather than forgery. What signs and what is
accepted is :class:`compilecache.signing.Signing`. :func:`decode` is the one
verifier (checksum, stored key, signature, payload size); whatever bytes it is given it raises
:class:`CorruptEntry` (damaged, or not what the key names) or :class:`ForeignEntry` (intact, but
unsigned or signed with another key: valid, perhaps, for the clients holding that key) and
nothing else.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from typing import Any

import xxhash
import zstandard

from compilecache.errors import CorruptEntry
from compilecache.signing import Signing

# ``extra[INTERNAL]``: an entry compilecache keeps for a framework (a kernel binary, a probe's
# answer, an autotune record), not a function of the program: counted and listed apart.
INTERNAL = "internal"
# Keys of the records a framework keeps about a compile rather than of compiles (JAX's guarded
# traces, each naming an executable): stored, read, signed and moved like any entry, but counted
# as neither hits, misses nor writes, by the cache (``Cache.load_uncounted``,
# ``Cache.save(counted=False)``) nor by a store's levels, so that every count of compiles (a
# host's, a level's, the fleet's on a shared level) counts the same ones.
RECORD_PREFIXES = ("jax/trace/",)


def is_record(key: str) -> bool:
    """Whether ``key`` is a record's about a compile (:data:`RECORD_PREFIXES`), not a compile's."""
    return key.startswith(RECORD_PREFIXES)


MAGIC = b"\x89CCE\r\n\x1a\n"
FORMAT_VERSION = 1
FLAG_ZSTD = 1
_PREFIX = struct.Struct(">8sHHIQ")
_SIG_LEN = struct.Struct(">H")
_CHECKSUM_LEN = 16
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"
# Compressing a few hundred bytes costs more than it saves.
_MIN_COMPRESS_SIZE = 512
# Compressed payloads are kept only when they are at least this much smaller.
_MIN_SAVING = 0.05
# zstd's level: 3, its default, but 1 from this size up (a torch precompiled header, 156 MB:
# 0.24 s instead of 0.36 s of a cold compile's CPU for a 4% larger entry).
_LEVEL = 3
_LARGE_LEVEL = 1
_LARGE_SIZE = 16 * 1024 * 1024
# JSON headers stay small; a huge length field means corruption, not a real header.
_MAX_HEADER_LEN = 16 * 1024 * 1024
# Decompression trusts a frame's declared size only up to this much (one-shot is about twice as
# fast); beyond it, output is produced in pieces of _DECOMPRESS_CHUNK, never sized by the frame.
_ONE_SHOT_LIMIT = 1024 * 1024 * 1024
_DECOMPRESS_CHUNK = 8 * 1024 * 1024


def _plain(value: Any) -> Any:
    """What ``json.dumps`` cannot write in a header's mappings: a dataclass as its fields (what
    ``asdict`` would have made of it); anything else is an error, as json's own."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@dataclass(frozen=True)
class EntryHeader:
    """Metadata stored in front of every payload."""

    framework: str
    key: str
    name: str = ""
    created: float = field(default_factory=time.time)
    compile_time_s: float = 0.0
    payload_size: int = 0
    compression: str = "none"
    versions: dict[str, str] = field(default_factory=dict)
    components: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        # The fields as they are, not dataclasses.asdict: its deep copy of the nested mappings
        # cost a cold JAX compile 0.7 ms of bookkeeping, and json.dumps copies nothing.
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=_plain).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EntryHeader:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("header is not an object")
        header = cls(
            framework=str(data["framework"]),
            key=str(data["key"]),
            name=str(data.get("name", "")),
            created=float(data.get("created", 0.0)),
            compile_time_s=float(data.get("compile_time_s", 0.0)),
            payload_size=int(data.get("payload_size", 0)),
            compression=str(data.get("compression", "none")),
            versions={str(k): str(v) for k, v in dict(data.get("versions", {})).items()},
            components={str(k): str(v) for k, v in dict(data.get("components", {})).items()},
            extra=dict(data.get("extra", {})),
        )
        if header.payload_size < 0 or header.compression not in ("none", "zstd"):
            raise ValueError("bad payload size or compression")
        return header


@dataclass(frozen=True)
class Entry:
    """A decoded entry: its header and the original (decompressed) payload."""

    header: EntryHeader
    payload: bytes
    signed: bool = False
    # Who signed: "ed25519:<base64>" (the writer's public key), "hmac", or "".
    signer: str = ""


def encode(
    header: EntryHeader,
    payload: bytes,
    *,
    compress: bool | None = None,
    signing: Signing | None = None,
    level: int | None = None,
) -> bytes:
    """Serialise ``payload`` with ``header``.

    ``compress=None`` compresses unless the payload is small or already zstd, and keeps the
    compressed form only when it saves at least ``_MIN_SAVING`` (incompressible data, such as an
    executable the framework compressed itself, would only cost a decompression on every hit).
    ``level`` (zstd's) defaults to a faster one for large payloads.
    """
    if level is None:
        level = _LARGE_LEVEL if len(payload) >= _LARGE_SIZE else _LEVEL
    if compress is None:
        attempt = len(payload) >= _MIN_COMPRESS_SIZE and not payload.startswith(_ZSTD_FRAME_MAGIC)
    else:
        attempt = compress
    stored = zstandard.ZstdCompressor(level=level).compress(payload) if attempt else payload
    if compress is None and len(stored) > len(payload) * (1 - _MIN_SAVING):
        stored = payload
    compress = stored is not payload
    header = replace(header, payload_size=len(payload), compression="zstd" if compress else "none")
    header_raw = header.to_json()
    prefix = _PREFIX.pack(
        MAGIC, FORMAT_VERSION, FLAG_ZSTD if compress else 0, len(header_raw), len(stored)
    )
    hasher = xxhash.xxh3_128(prefix)
    hasher.update(header_raw)
    hasher.update(stored)
    sig = signing.sign([prefix, header_raw, stored]) if signing is not None else b""
    trailer = _SIG_LEN.pack(len(sig)) + sig
    hasher.update(trailer)
    return b"".join((prefix, header_raw, stored, trailer, hasher.digest()))


PREFIX_SIZE = _PREFIX.size


def header_end(prefix: bytes) -> int:
    """How many bytes from the start of an entry hold its prefix and header, from its first
    :data:`PREFIX_SIZE` bytes; ``CorruptEntry`` when they are not an entry's."""
    if len(prefix) < _PREFIX.size:
        raise CorruptEntry(f"entry too short ({len(prefix)} bytes)")
    magic, version, _, header_len, _ = _PREFIX.unpack_from(prefix)
    if magic != MAGIC or version != FORMAT_VERSION or header_len > _MAX_HEADER_LEN:
        raise CorruptEntry("not a compilecache entry of this format")
    return int(_PREFIX.size + header_len)


def unverified_header(start: bytes) -> EntryHeader:
    """The header at the start of an entry, NOT verified (no checksum or signature: only the
    whole entry has them): for listings that say what an entry claims, never for serving it."""
    end = header_end(start)
    if len(start) < end:
        raise CorruptEntry("entry truncated inside its header")
    try:
        return EntryHeader.from_json(bytes(start[_PREFIX.size : end]))
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise CorruptEntry(f"unreadable entry header: {exc}") from None


def _split(data: bytes | memoryview) -> tuple[int, EntryHeader, memoryview, memoryview, int]:
    """Parse the frame without verifying: flags, header, stored payload, signature, body end."""
    view = memoryview(data)
    if len(view) < _PREFIX.size + _SIG_LEN.size + _CHECKSUM_LEN:
        raise CorruptEntry(f"entry too short ({len(view)} bytes)")
    magic, version, flags, header_len, stored_len = _PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise CorruptEntry("not a compilecache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unsupported entry format version {version}")
    if flags & ~FLAG_ZSTD or header_len > _MAX_HEADER_LEN:
        raise CorruptEntry("bad flags or header length")
    header_end = _PREFIX.size + header_len
    payload_end = header_end + stored_len
    if payload_end + _SIG_LEN.size + _CHECKSUM_LEN > len(view):
        raise CorruptEntry("entry truncated")
    (sig_len,) = _SIG_LEN.unpack_from(view, payload_end)
    body_end = payload_end + _SIG_LEN.size + sig_len
    if body_end + _CHECKSUM_LEN != len(view):
        raise CorruptEntry("entry length does not match its frame")
    try:
        header = EntryHeader.from_json(bytes(view[_PREFIX.size : header_end]))
    # json and the conversions raise more than ValueError on hostile input: deep nesting is a
    # RecursionError, float(10**400) and int(1e999) are OverflowErrors.
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise CorruptEntry(f"unreadable entry header: {exc}") from None
    if (flags & FLAG_ZSTD) != (header.compression == "zstd"):
        raise CorruptEntry("compression flag and header disagree")
    return (
        flags,
        header,
        view[header_end:payload_end],
        view[payload_end + _SIG_LEN.size : body_end],
        body_end,
    )


def _decompress(stored: memoryview, size: int) -> bytes:
    """Decompress one zstd frame that must hold exactly ``size`` bytes.

    One-shot decompression trusts the frame's content size field and allocates that much up
    front (a forged frame claiming terabytes is a MemoryError, not a corrupt entry). So it is
    used only for plausible sizes; otherwise read in bounded chunks and stop as soon as the
    output exceeds what the header promised.
    """
    try:
        declared = zstandard.frame_content_size(stored)
        if declared not in (-1, size):
            raise CorruptEntry("zstd frame size does not match the entry header")
        if declared == size and size <= _ONE_SHOT_LIMIT:
            payload: bytes = zstandard.ZstdDecompressor().decompress(stored)
            if len(payload) != size:
                raise CorruptEntry("payload size does not match its header")
            return payload
        chunks: list[bytes] = []
        produced = 0
        with zstandard.ZstdDecompressor().stream_reader(stored) as reader:
            while produced <= size:
                chunk = reader.read(min(_DECOMPRESS_CHUNK, size + 1 - produced))
                if not chunk:
                    break
                chunks.append(chunk)
                produced += len(chunk)
    except zstandard.ZstdError as exc:
        raise CorruptEntry(f"payload does not decompress: {exc}") from None
    if produced != size:
        raise CorruptEntry("payload size does not match its header")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def claimed_signer(data: bytes | memoryview) -> str:
    """Who an entry says signed it (``ed25519:...``, ``hmac``, or ``""`` when unsigned), after
    checking the frame but nothing else: for describing a store, never for trusting an entry."""
    return Signing.signer_of(_split(data)[3])


def read_header(data: bytes | memoryview) -> EntryHeader:
    """The header of an entry, after checking the frame but not the checksum (cheap, for listings)."""
    return _split(data)[1]


def _verified(
    data: bytes | memoryview, signing: Signing | None, expect_key: str | None
) -> tuple[int, EntryHeader, memoryview, memoryview]:
    """The checks of :func:`decode`, short of the payload: flags, header, stored payload and
    signature block of an entry whose checksum, key and signatures pass."""
    flags, header, stored, sig, body_end = _split(data)
    view = memoryview(data)
    if xxhash.xxh3_128_digest(view[:body_end]) != bytes(view[body_end:]):
        raise CorruptEntry("checksum mismatch")
    # The key before the signature: an entry stored under a key it does not hold is wrong for
    # every reader, whoever signed it.
    if expect_key is not None and header.key != expect_key:
        raise CorruptEntry(f"entry holds key {header.key!r}, not {expect_key!r}")
    if signing is not None:
        header_end = body_end - _SIG_LEN.size - len(sig) - len(stored)
        signing.verify([view[: _PREFIX.size], view[_PREFIX.size : header_end], stored], bytes(sig))
    return flags, header, stored, sig


def verify(
    data: bytes | memoryview, *, signing: Signing | None = None, expect_key: str | None = None
) -> EntryHeader:
    """The header of an entry that passes :func:`decode`'s checks of its checksum, key and
    signatures (the same errors), without decompressing or copying its payload: for a pass
    that only decides whether a whole set of entries is acceptable."""
    return _verified(data, signing, expect_key)[1]


def decode(
    data: bytes | memoryview, *, signing: Signing | None = None, expect_key: str | None = None
) -> Entry:
    """Verify and decode an entry.

    Damage, and an entry that holds another key than ``expect_key``, raise :class:`CorruptEntry`.
    With ``signing``, an intact entry that is unsigned or signed with a key it does not accept
    raises :class:`~compilecache.errors.ForeignEntry`: it cannot be served, but it is no damage
    either (it may be valid for the clients that hold its key), so callers leave it where it is.
    """
    flags, header, stored, sig = _verified(data, signing, expect_key)
    payload = _decompress(stored, header.payload_size) if flags & FLAG_ZSTD else bytes(stored)
    if len(payload) != header.payload_size:
        raise CorruptEntry("payload size does not match its header")
    return Entry(header=header, payload=payload, signed=bool(sig), signer=Signing.signer_of(sig))
