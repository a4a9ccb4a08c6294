"""The one redaction of store URLs for display: no credential a URL carries is ever printed.

Store URLs carry secrets: a Redis password (``redis://user:secret@host``), an S3 key and secret
(``s3://bucket?key=...&secret=...``), an Azure account key or SAS token (``?sas_token=...``, or a
SAS query's ``sig=``). Every place that shows a URL (``check`` and its ``--json``, errors,
warnings, ``stats``, ``explain``, ``doctor``, the reports, the run summary) shows it through
:func:`redact`, which masks the password of the user information and the value of every query
option whose name says it holds a credential. It works on any text, so a message that quotes a
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
# scheme://user:password@ -> the password.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:@/\s,?#'\"]*):[^@/\s,'\"]*@")
# ?name=value or &name=value (or ;name=value) -> the value, when the name is a credential's.
_OPTION = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s,;'\"]*)")


def _mask_option(match: re.Match[str]) -> str:
    if _CREDENTIAL_NAME.search(match["name"]) and match["value"]:
        return match["head"] + MASK
    return match[0]


def redact(text: str) -> str:
    """``text`` (a URL, several separated by commas, or a message quoting them) with every
    password and credential option value replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text  # the common case, a local path: nothing to look for
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _OPTION.sub(_mask_option, text)


def is_credential_option(name: str) -> bool:
    """Whether a URL option named ``name`` holds a credential (its value is never shown)."""
    return bool(_CREDENTIAL_NAME.search(name))


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
