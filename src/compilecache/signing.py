"""Who signs the entries this process writes, and whose signatures it accepts.

Two kinds of signature, alone or together:

- **HMAC-SHA256** with a shared secret (``COMPILECACHE_SECRET``): every host that holds the
  secret can both check and sign, so one compromised host can sign anything.
- **Ed25519** (``COMPILECACHE_SIGNING_KEY_FILE`` to sign, ``COMPILECACHE_TRUSTED_KEYS`` to
  check): only the holders of a private key sign; readers hold public keys and cannot forge.
  The signature is over a SHA-256 digest of everything the entry's checksum covers except the
  signatures themselves (frame, JSON header with key, versions and host facts, payload), so an
  entry can be neither changed, nor relabelled, nor moved to another key.

The entry's signature block (see :mod:`compilecache.entry`) is told apart by its length: empty
(unsigned), 32 bytes (HMAC, the format of earlier versions), 96 bytes (the Ed25519 public key,
then its signature) or 128 bytes (both). Each configured check must pass; an intact entry that
fails one is a :class:`~compilecache.errors.ForeignEntry` (valid, perhaps, for other readers).

``cryptography`` is imported only when an Ed25519 key is configured.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from compilecache.errors import ConfigError, ForeignEntry

PUBLIC_PREFIX = "ed25519:"
# Prepended to the digest before signing: a signature made for an entry means nothing elsewhere.
_CONTEXT = b"compilecache entry signature v1\0"
HMAC_LEN = 32
_PUBLIC_LEN = 32
_ED25519_LEN = _PUBLIC_LEN + 64
SIGNATURE_LENGTHS = frozenset({0, HMAC_LEN, _ED25519_LEN, HMAC_LEN + _ED25519_LEN})
MISSING_PACKAGE = (
    "Ed25519 signatures need the 'cryptography' package: pip install 'compilecache[signing]'"
)


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ConfigError(MISSING_PACKAGE) from exc
    return ed25519


def require_ed25519() -> None:
    """A :class:`ConfigError` saying what to install when Ed25519 is not available."""
    _ed25519()


def public_text(raw: bytes) -> str:
    """A public key as users write it: ``ed25519:<base64>``."""
    return PUBLIC_PREFIX + base64.b64encode(raw).decode()


def parse_public(text: str) -> bytes:
    """The raw 32 bytes of ``ed25519:<base64>``; a :class:`ConfigError` naming what is wrong."""
    value = text.strip()
    if not value.startswith(PUBLIC_PREFIX):
        raise ConfigError(f"a trusted key must look like ed25519:<base64>, got {value[:40]!r}")
    try:
        raw = base64.b64decode(value[len(PUBLIC_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"trusted key {value[:40]!r} is not valid base64") from None
    if len(raw) != _PUBLIC_LEN:
        raise ConfigError(f"trusted key {value[:40]!r} holds {len(raw)} bytes, not 32")
    return raw


def parse_public_list(text: str) -> tuple[bytes, ...]:
    """The keys of ``COMPILECACHE_TRUSTED_KEYS`` (comma- or space-separated, in order)."""
    parts = [p for p in text.replace(",", " ").split() if p]
    return tuple(dict.fromkeys(parse_public(p) for p in parts))


def read_private(path: str) -> bytes:
    """The raw 32-byte Ed25519 private key in the PEM file ``path`` (``compilecache keygen``
    writes one; so does ``openssl genpkey -algorithm ed25519``)."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    try:
        with open(path, "rb") as f:
            loaded = serialization.load_pem_private_key(f.read(), password=None)
    except OSError as exc:
        raise ConfigError(f"COMPILECACHE_SIGNING_KEY_FILE: cannot read {path}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"COMPILECACHE_SIGNING_KEY_FILE: {path} is not an unencrypted PEM private key "
            f"({exc}); make one with `compilecache keygen --out FILE`"
        ) from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise ConfigError(
            f"COMPILECACHE_SIGNING_KEY_FILE: {path} holds a {type(loaded).__name__}, not an "
            "Ed25519 key"
        )
    raw: bytes = loaded.private_bytes_raw()
    return raw


def new_private_pem() -> tuple[bytes, str]:
    """A new Ed25519 private key as PEM (PKCS#8, unencrypted) and its public key's text."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    key = ed25519.Ed25519PrivateKey.generate()
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, public_text(key.public_key().public_bytes_raw())


def write_new_key(path: str) -> str:
    """Write a new private key to ``path`` (mode 0600; an existing file is never replaced) and
    return its public key's text. Raises ``FileExistsError`` / ``OSError``."""
    pem, public = new_private_pem()
    # Written under a temporary name and linked into place: no reader ever sees half a key,
    # and the link fails, rather than replaces, when ``path`` exists.
    fd, temporary = tempfile.mkstemp(prefix=".key-", dir=os.path.dirname(path) or ".")
    try:
        os.write(fd, pem)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.link(temporary, path)
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(temporary)
    return public


def load_or_create_host_key(path: str) -> bytes:
    """The raw private key at ``path``, created (0600, in a 0700 directory) if there is none:
    what a process that may not write shared levels signs its own local entries with."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # made before, or by a process beside this one
        write_new_key(path)
    return read_private(path)


def _digest(parts: Iterable[bytes | memoryview]) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return _CONTEXT + h.digest()


@dataclass(frozen=True)
class Signing:
    """This process's keys: what it signs with and what it accepts.

    ``secret``: the HMAC key (signs and checks). ``private_key``: the raw Ed25519 key it signs
    with; its public key is trusted too. ``trusted``: the raw Ed25519 public keys whose entries
    it accepts; with any, every entry must carry a signature of one of them. ``shared_writer``:
    False for a process that trusts keys but holds none of its own (a reader): it writes no level
    other processes read. ``host``: it signs only its local level's entries, with a key of this
    host and user (so its own compiles are reused here and trusted nowhere else).
    """

    secret: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    trusted: tuple[bytes, ...] = ()
    host: bool = False

    @property
    def enabled(self) -> bool:
        """Whether this signs or checks anything at all."""
        return bool(self.secret or self.private_key or self.trusted)

    @property
    def verifies_writers(self) -> bool:
        """Whether only entries signed with a trusted Ed25519 key are accepted."""
        return bool(self.trusted) or self.private_key is not None

    @property
    def shared_writer(self) -> bool:
        """Whether this process may write the levels other processes read."""
        return not self.trusted or (self.private_key is not None and not self.host)

    @cached_property
    def _signer(self) -> Any:
        if self.private_key is None:
            return None
        return _ed25519().Ed25519PrivateKey.from_private_bytes(self.private_key)

    @cached_property
    def public_key(self) -> bytes | None:
        """The raw public key of ``private_key``."""
        if self._signer is None:
            return None
        raw: bytes = self._signer.public_key().public_bytes_raw()
        return raw

    @cached_property
    def _verifiers(self) -> dict[bytes, Any]:
        keys = list(self.trusted)
        if self.public_key is not None:
            keys.append(self.public_key)
        if not keys:
            return {}
        ed25519 = _ed25519()
        return {raw: ed25519.Ed25519PublicKey.from_public_bytes(raw) for raw in keys}

    def with_host_key(self, private_key: bytes) -> Signing:
        """A reader's signing: its own local entries signed with this host's key."""
        return Signing(self.secret, private_key, self.trusted, host=True)

    def sign(self, body: list[bytes]) -> bytes:
        """The signature block of an entry whose signed parts are ``body``."""
        sig = b""
        if self.secret is not None:
            mac = hmac.new(self.secret, digestmod=hashlib.sha256)
            for part in body:
                mac.update(part)
            sig = mac.digest()
        if self._signer is not None:
            assert self.public_key is not None
            sig += self.public_key + self._signer.sign(_digest(body))
        return sig

    def verify(self, body: list[memoryview], sig: bytes) -> None:
        """Raise :class:`ForeignEntry` unless ``sig`` satisfies every configured check."""
        if not self.enabled:
            return
        if len(sig) not in SIGNATURE_LENGTHS:
            raise ForeignEntry(f"entry has a signature of {len(sig)} bytes, of no known kind")
        has_hmac = len(sig) in (HMAC_LEN, HMAC_LEN + _ED25519_LEN)
        if self.secret is not None:
            if not has_hmac:
                raise ForeignEntry("entry is not signed with COMPILECACHE_SECRET")
            mac = hmac.new(self.secret, digestmod=hashlib.sha256)
            for part in body:
                mac.update(part)
            if not hmac.compare_digest(mac.digest(), sig[:HMAC_LEN]):
                raise ForeignEntry("entry signature does not match this key")
        if not self._verifiers:
            return
        signed = sig[HMAC_LEN:] if has_hmac else sig
        if not signed:
            raise ForeignEntry("entry is not signed by a trusted writer (it has no Ed25519 key)")
        public, signature = signed[:_PUBLIC_LEN], signed[_PUBLIC_LEN:]
        verifier = self._verifiers.get(public)
        if verifier is None:
            raise ForeignEntry(f"entry is signed by {public_text(public)}, which is not trusted")
        from cryptography.exceptions import InvalidSignature

        try:
            verifier.verify(signature, _digest(body))
        except InvalidSignature:
            raise ForeignEntry(
                f"entry's signature by {public_text(public)} does not verify"
            ) from None

    @staticmethod
    def signer_of(sig: bytes | memoryview) -> str:
        """Who signed, from a signature block: ``ed25519:...``, ``hmac``, or ``""``."""
        if len(sig) in (_ED25519_LEN, HMAC_LEN + _ED25519_LEN):
            start = len(sig) - _ED25519_LEN
            return public_text(bytes(sig[start : start + _PUBLIC_LEN]))
        return "hmac" if len(sig) == HMAC_LEN else ""
