"""``check`` and ``keygen``: the configuration a run would use, and the keys that sign entries."""

from __future__ import annotations

import argparse
import sys

from compilecache.cli.common import Commands, print_report
from compilecache.config import Config


def cmd_check(args: argparse.Namespace) -> int:
    from compilecache.tools import check

    report = check.check(url=args.url)
    print_report(args, report)
    return 0 if report.ok else 1


def cmd_keygen(args: argparse.Namespace) -> int:
    """A new Ed25519 signing key for a trusted writer; its public key for the readers."""
    from compilecache import signing

    try:
        public = signing.write_new_key(args.out)
    except FileExistsError:
        print(
            f"compilecache keygen: {args.out} exists; not overwritten (remove it first, or "
            "choose another --out)",
            file=sys.stderr,
        )
        return 1
    except OSError as exc:
        # The error names the key's temporary file (written beside it, then linked): the target
        # is what the user asked for.
        reason = exc.strerror or str(exc)
        print(f"compilecache keygen: cannot write {args.out}: {reason}", file=sys.stderr)
        return 1
    print(public)
    print(
        f"compilecache: private key written to {args.out} (mode 0600). Writers: "
        f"COMPILECACHE_SIGNING_KEY_FILE={args.out}; readers: COMPILECACHE_TRUSTED_KEYS={public}",
        file=sys.stderr,
    )
    return 0


def trust_line(cfg: Config) -> str:
    """What this configuration signs and accepts, in words (``stats``, ``doctor``)."""
    signing = cfg.signing
    if signing is None:
        return "nothing signed or checked: any writer of the store can run code here"
    parts = []
    if cfg.trusted_keys or cfg.signing_key:
        # A writer's own key counts once, listed in COMPILECACHE_TRUSTED_KEYS or not.
        count = len({*cfg.trusted_keys, *([signing.public_key] if signing.public_key else [])})
        parts.append(f"only entries signed by {count} trusted key{'s' * (count != 1)}")
    if cfg.secret:
        parts.append("HMAC secret")
    if cfg.signing_key:
        parts.append("this process signs what it writes")
    elif not cfg.shared_writer:
        parts.append(
            "no signing key: writes nothing to shared levels (COMPILECACHE_SIGNING_KEY_FILE)"
        )
    return "; ".join(parts)


def register(commands: Commands) -> None:
    """Add check and keygen to the parser."""
    p = commands.add(
        "check",
        "show the configuration and where each setting came from, test every store level "
        "with a round trip, and say what a run would warn about",
    )
    # It loads the configuration itself: a setting that does not load is a problem it reports.
    p.set_defaults(func=cmd_check, needs_config=False)

    p = commands.raw(
        "keygen",
        help="write a new Ed25519 signing key; print its public key",
        description="Write a new Ed25519 private key (mode 0600, never over an existing file) "
        "for a trusted writer (COMPILECACHE_SIGNING_KEY_FILE) and print its public key as one "
        "line, ed25519:<base64>, for the readers' COMPILECACHE_TRUSTED_KEYS.",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the private key")
    p.set_defaults(func=cmd_keygen, needs_config=False)
