"""``export``, ``import`` and ``warm``: moving entries between stores, bundles and torch's
artifact files."""

from __future__ import annotations

import argparse
import os
from typing import Any

from compilecache import config as config_mod
from compilecache.cli.common import Commands, config_of, print_json, store_of
from compilecache.config import Config, format_size
from compilecache.errors import CompileCacheError


def _entry_filter(args: argparse.Namespace) -> Any:
    from compilecache.runtime.transfer import EntryFilter, parse_since

    return EntryFilter(
        framework=args.framework,
        since=parse_since(args.since) if args.since else None,
        name=args.name,
    )


def _print_transfer(report: Any, args: argparse.Namespace, done: str) -> None:
    if args.json:
        print_json(report.as_json())
        return
    if getattr(args, "verbose", False):
        for key, reason in report.skipped:
            print(f"skipped {key}: {reason}")
    else:
        by_reason: dict[str, int] = {}
        for _, reason in report.skipped:
            by_reason[reason] = by_reason.get(reason, 0) + 1
        for reason, count in sorted(by_reason.items(), key=lambda item: -item[1]):
            print(f"skipped {count} {'entry' if count == 1 else 'entries'}: {reason}")
    line = f"compilecache: {done} {report.counted()} ({format_size(report.bytes)})"
    if report.present:
        line += f", {len(report.present)} already present"
    if report.skipped:
        line += f", {len(report.skipped)} skipped"
        if not getattr(args, "verbose", False):
            line += " (--verbose lists them)"
    print(line)


def cmd_export(args: argparse.Namespace) -> int:
    from compilecache.tools import bundle

    signing = config_of(args).signing
    if args.format == "torch":
        # Late on purpose: only this path imports torch (seconds).
        from compilecache.tools import torch_artifacts

        report = torch_artifacts.export_blob(
            store_of(args, create=False), args.file, select=_entry_filter(args), signing=signing
        )
        _print_transfer(report, args, f"wrote {args.file}:")
        if not args.json:
            print(
                "compilecache: load it with torch.compiler.load_cache_artifacts() in a process "
                "that configures torch as the ones that compiled it; it holds no C++ kernels, "
                "which compile again there"
            )
        return 0
    report = bundle.export_bundle(
        store_of(args, create=False), args.file, select=_entry_filter(args), signing=signing
    )
    _print_transfer(report, args, f"wrote {args.file}:")
    return 0


def _new_directories(cfg: Config) -> list[str]:
    """The local directories of ``cfg``'s store that do not exist yet (opening it makes them)."""
    from compilecache.stores import registry
    from compilecache.stores.frame import directory_and_size

    out = []
    for level in registry.split_levels(cfg.url):
        parsed = registry.parse_url(level)
        if parsed.scheme == "file":
            path = os.path.expanduser(directory_and_size(parsed)[0])
            if not os.path.exists(path):
                out.append(path)
    return out


def cmd_import(args: argparse.Namespace) -> int:
    """Import a bundle or a torch blob. A store that did not exist before is removed again when
    nothing was imported into it (a damaged bundle, nothing usable here): a failed import
    leaves nothing behind."""
    import shutil

    made = _new_directories(config_of(args))
    try:
        report = _import(args)
    except BaseException:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        raise
    if not report.transferred and not report.present:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
    _print_transfer(report, args, "imported")
    return 0 if report.transferred or report.present or not report.total else 1


def _import(args: argparse.Namespace) -> Any:
    from compilecache.tools import bundle, torch_artifacts

    cfg = config_of(args)
    signing = cfg.signing
    kind = torch_artifacts.sniff(args.file) if args.format == "auto" else args.format
    if kind == "torch":
        if not cfg.shared_writer:
            raise CompileCacheError(
                f"{args.file}: torch's artifact files carry no signature, and this process "
                "trusts only signed entries (COMPILECACHE_TRUSTED_KEYS) without a signing key "
                "of its own: import it where COMPILECACHE_SIGNING_KEY_FILE is set (its entries "
                "are then signed by that key)"
            )
        report = torch_artifacts.import_blob(
            args.file, store_of(args), signing=signing, check=not args.no_check
        )
    else:
        report = bundle.import_bundle(
            args.file, store_of(args), signing=signing, check=not args.no_check
        )
    return report


def cmd_warm(args: argparse.Namespace) -> int:
    from compilecache.tools import bundle

    store = store_of(args)
    target = store.levels[0]  # the local level: the first of several (fastest first)
    report = bundle.warm(
        store_of(args, args.source, create=False),
        target,
        select=_entry_filter(args),
        signing=config_of(args).signing,
        check=not args.no_check,
    )
    _print_transfer(report, args, f"copied into {target.url}:")
    return 0


def register(commands: Commands) -> None:
    """Add export, import and warm to the parser."""

    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("-v", "--verbose", action="store_true", help="list every skipped entry")
        p.add_argument("--framework", choices=config_mod.ENTRY_FRAMEWORKS)
        p.add_argument("--since", help="only entries used since: 7d, or a date (2024-06-01)")
        p.add_argument("--name", metavar="GLOB", help="only entries whose name or key matches")

    no_check = "do not skip entries built for another host (checksums and signatures still apply)"
    p = commands.add("export", "write entries to one portable bundle file")
    p.add_argument("file", help="the bundle to write, e.g. cache.ccb")
    filters(p)
    p.add_argument(
        "--format",
        choices=("bundle", "torch"),
        default="bundle",
        help="bundle: compilecache's (every entry, C++ kernels included); torch: a blob for "
        "torch.compiler.load_cache_artifacts() (torch FX and AOTAutograd entries only; on CPU "
        "the loading process compiles every kernel again)",
    )
    p.set_defaults(func=cmd_export)

    p = commands.add("import", "add a bundle's entries (verified; what cannot run here is skipped)")
    p.add_argument(
        "file", help="a bundle written by export, or a torch.compiler.save_cache_artifacts() blob"
    )
    p.add_argument("--no-check", action="store_true", help=no_check)
    p.add_argument("-v", "--verbose", action="store_true", help="list every skipped entry")
    p.add_argument(
        "--format",
        choices=("auto", "bundle", "torch"),
        default="auto",
        help="auto (default): from the file's first bytes; torch: a save_cache_artifacts() blob, "
        "whose compiled graphs become torch entries (it holds no C++ kernels: on CPU they "
        "compile again on first use)",
    )
    p.set_defaults(func=cmd_import)

    p = commands.add("warm", "copy entries from another store into the local level")
    p.add_argument("--from", dest="source", required=True, metavar="URL", help="store to copy")
    filters(p)
    p.add_argument("--no-check", action="store_true", help=no_check)
    p.set_defaults(func=cmd_warm)
