"""``run``, ``demo`` and ``doctor``: commands that start programs under compilecache."""

from __future__ import annotations

import argparse

from compilecache.cli.common import Commands, print_report
from compilecache.errors import ConfigError
from compilecache.units import parse_duration


def duration_argument(text: str) -> float:
    """A duration option's value in seconds; argparse prints the error, which names the units."""
    try:
        return parse_duration(text, "--timeout")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from compilecache import runner

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    overrides = {"COMPILECACHE_URL": args.url} if args.url else {}
    return runner.run(command, overrides)


def cmd_demo(args: argparse.Namespace) -> int:
    from compilecache.tools import demo

    return demo.main(url=args.url, layers=args.layers, json_output=args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    from compilecache.tools import doctor

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("compilecache doctor: no command given (usage: compilecache doctor -- CMD)")
        return 2
    report = doctor.doctor(command, timeout=args.timeout)
    print_report(args, report)
    return 0 if report.ok else 1


def register(commands: Commands) -> None:
    """Add run, demo and doctor to the parser."""
    p = commands.add("run", "run a command with compilecache enabled in it", json_flag=False)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    # run, demo and doctor configure child processes: the parent loads no configuration.
    p.set_defaults(func=cmd_run, needs_config=False)

    p = commands.add("demo", "compile JAX and torch.compile workloads cold, then warm, and compare")
    p.add_argument("--layers", type=int, default=8, help="transformer layers (default 8)")
    p.set_defaults(func=cmd_demo, needs_config=False)

    p = commands.add(
        "doctor",
        "run a command twice on a scratch store (not your cache); report what will not hit",
    )
    p.add_argument(
        "--timeout", type=duration_argument, help="how long each run may take, e.g. 90s or 10m"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=cmd_doctor, needs_config=False)
