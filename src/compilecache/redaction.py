"""The one redaction of store URLs for display: no credential a URL carries is ever printed.

Store URLs carry secrets: a Redis password (``redis://user:secret@host``), an S3 key and secret
(``s3://bucket?key=...&secret=...``), an Azure account key or SAS token (``?sas_token=...``, or a
SAS query's ``sig=``). Every place that shows a URL (``check`` and its ``--json``, errors,
warnings, ``stats``, ``explain``, ``doctor``, the reports, the run summary) shows it through
:func:`redact`, which masks the password of the user information and the value of every query
option not known to be harmless: a mistyped ``sas_tokn=`` is as secret as ``sas_token=``, so
only the options of :data:`SHOWN_OPTIONS` (sizes, timeouts, regions, endpoints...) keep their
values. It works on any text, so a message that quotes a
URL (or several, a tiered store's comma-separated levels) is redacted as a whole: the records
of compilecache's logger are (``session``), and so is everything the command line prints
(``cli``).

Ground layer: ``re`` only (``compilecache run`` imports it only to print a line with a URL).
"""

from __future__ import annotations

import re
from typing import Any, TextIO

MASK = "***"
# Option names that hold credentials: passwords, secrets, tokens, keys, SAS signatures,
# connection strings (which hold account keys).
_CREDENTIAL_NAME = re.compile(
    r"(pass(word|wd)?|secret|token|sig(nature)?|credential|connection_?string|(^|_)key|"
    r"access_?key|private|auth|session)$",
    re.IGNORECASE,
)
# Options whose values are never credentials: every store's own options and the client options
# of its documentation that hold no secret, and the public fields of an Azure SAS query. Every
# other option's value is masked (tests hold every backend's non-credential options to this).
SHOWN_OPTIONS = frozenset(
    {
        # every level (the wrappers) and directories
        "readonly",
        "backoff",
        "max_backoff",
        "deadline",
        "guard",
        "max_size",
        "write_behind",
        "shared",
        "touch_interval",
        "evict_interval",
        "fsync",
        # Redis, and redis-py's connection options
        "prefix",
        "namespace",
        "ttl",
        "chunk_size",
        "timeout",
        "connect_timeout",
        "max_connections",
        "client",
        "db",
        "username",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "retry_on_error",
        "health_check_interval",
        "protocol",
        "legacy_responses",
        "client_name",
        "ssl_check_hostname",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_min_version",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_validate_ocsp",
        # object stores
        "retries",
        "conditional",
        "endpoint_url",
        "endpoint",
        "region",
        "profile",
        "anon",
        "account_name",
        "use_emulator",
        # an Azure SAS query's public fields (its signature, sig, is masked)
        "sv",
        "ss",
        "srt",
        "sr",
        "sp",
        "st",
        "se",
        "spr",
        "sip",
        "si",
    }
)
# scheme://user:password@ -> the password.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:@/\s,?#'\"]*):[^@/\s,'\"]*@")
# ?name=value or &name=value (or ;name=value) -> the value, when the name is a credential's.
_OPTION = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s,;'\"]*)")


def _mask_option(match: re.Match[str]) -> str:
    if match["value"] and not is_shown_option(match["name"]):
        return match["head"] + MASK
    return match[0]


def redact(text: str) -> str:
    """``text`` (a URL, several separated by commas, or a message quoting them) with every
    password, and the value of every option not known to be harmless, replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text  # the common case, a local path: nothing to look for
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _OPTION.sub(_mask_option, text)


def is_credential_option(name: str) -> bool:
    """Whether a URL option named ``name`` says it holds a credential (its value is never
    shown, whatever list it is on)."""
    return bool(_CREDENTIAL_NAME.search(name))


def is_shown_option(name: str) -> bool:
    """Whether the value of a URL option named ``name`` may be shown: only an option known to be
    harmless; an unknown one (a typo of a credential's name, a client's own) is masked."""
    return name.lower() in SHOWN_OPTIONS and not is_credential_option(name)


class RedactedStream:
    """A text stream that redacts what is written to it (each ``write`` whole: ``print`` writes
    a line's text in one call), and passes everything else to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
