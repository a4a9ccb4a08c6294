"""``compilecache run -- CMD``: enable the cache in CMD and its Python children, no code change.

The child environment gets our ``_bootstrap`` directory first on PYTHONPATH (its
``sitecustomize`` calls :func:`compilecache.enable`) and a spool directory where every Python
process writes its counters at exit. After CMD ends, the counters are summed into the one-line
summary printed on stderr, and CMD's exit status is returned (128 + N when a signal N ended it).

Signals: the wrapper stands between CMD and whoever manages it (a shell, ``kill``, a container
runtime, a batch scheduler's preemption notice), so it passes SIGTERM, SIGINT, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 on to CMD, each as often as it gets them, and keeps waiting for CMD to end:
never orphaned, never killed before it. It does not escalate: a CMD that ignores SIGTERM keeps
running (and the wrapper keeps waiting) until it ends or is killed. CMD stays in the wrapper's
process group, so a signal the kernel sends to that whole group (Ctrl-C or Ctrl-\\ typed on the
terminal, the terminal hanging up) already reaches CMD and is not passed on a second time; a
signal some process sends to the whole group (``kill -TERM -PGID``) does reach CMD twice. As
PID 1 of a container, the wrapper also reaps the orphans it inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from compilecache.config import absolute_url
from compilecache.stats import Summary, merge
from compilecache.unsigned import first_run_warning

# Passed on to the child: the ways a process is asked to stop (or told something) from outside.
FORWARDED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
# The keys a terminal turns into signals for its whole foreground process group.
_TERMINAL_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGINT", "SIGQUIT") if hasattr(signal, name)
)
# How long one wait for a signal lasts: SIGCHLD normally ends it at once; this bounds the delay
# when a child's end is not signalled to this thread.
_POLL_S = 0.5

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"


def child_environment(
    base: Mapping[str, str], spool: str | None = None, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment that makes Python processes enable compilecache at start-up."""
    env = dict(base)
    env.update(overrides or {})
    parts = [str(BOOTSTRAP_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["COMPILECACHE_BOOTSTRAP_PATH"] = str(Path(__file__).resolve().parent.parent)
    if env.get("COMPILECACHE_URL"):
        # Every process under ``run`` uses the same store, whichever directory it starts in.
        env["COMPILECACHE_URL"] = absolute_url(env["COMPILECACHE_URL"])
    if spool:
        env["COMPILECACHE_RUN_SPOOL"] = spool
    return env


def read_spool(spool: Path) -> dict[str, float]:
    """Sum the counters every process under ``run`` left in the spool directory."""
    totals: list[dict[str, float]] = []
    for path in spool.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            totals.append({str(k): float(v) for k, v in data.items()})
    return merge(*totals)


def read_settings(spool: Path) -> list[str]:
    """What the program's framework settings changed in the processes under ``run`` (each
    ``framework: reason`` once), from the events they left in the spool directory."""
    seen: dict[str, None] = {}
    for path in sorted(spool.glob("*.events.jsonl")):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if '"setting"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "setting":
                seen[str(event.get("summary", ""))] = None
    return [summary for summary in seen if summary]


def run(command: Sequence[str], overrides: Mapping[str, str] | None = None) -> int:
    """Run ``command`` under compilecache; print the summary line; return its exit status."""
    if not command:
        print(
            "compilecache run: no command given (usage: compilecache run -- CMD ...)",
            file=sys.stderr,
        )
        return 2
    forwarder = Forwarder()
    # Installed before the child starts, so that no signal finds the default action (death,
    # leaving the child behind) in between; the child starts with the default dispositions.
    forwarder.install()
    try:
        with tempfile.TemporaryDirectory(prefix="compilecache-run-") as spool:
            env = child_environment(os.environ, spool, overrides)
            warning = first_run_warning(env)
            if warning:
                print(f"compilecache: warning: {warning}", file=sys.stderr)
            try:
                proc = subprocess.Popen(list(command), env=env)
            except OSError as exc:
                print(f"compilecache run: cannot start {command[0]!r}: {exc}", file=sys.stderr)
                return 127
            forwarder.started(proc.pid)
            status = wait(proc, forwarder)
            counters = read_spool(Path(spool))
            settings = read_settings(Path(spool))
        if env.get("COMPILECACHE_DISABLE", "").strip() not in ("1", "true", "yes", "on"):
            print(Summary.of(counters).line(), file=sys.stderr)
            for summary in settings:  # what the program's own settings changed (and why)
                print(f"compilecache: {summary}", file=sys.stderr)
    finally:
        forwarder.restore()
    return status if status >= 0 else 128 - status


class Forwarder:
    """Passes the signals this process gets on to the child, once each.

    Signals that come before the child exists are held and passed on when it starts; signals
    that come after it ended are dropped (its pid may already name another process).
    """

    def __init__(self) -> None:
        self.pid: int | None = None
        self.ended = False
        self.held: list[int] = []
        # signal -> the handler it had before (what signal.signal returns)
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    @property
    def signals(self) -> set[int]:
        """The signals being passed on."""
        return set(self._previous)

    def install(self) -> None:
        """Handle the forwarded signals, except those this process was started ignoring:
        ``nohup`` (SIGHUP) or a shell's background job (SIGINT, SIGQUIT) means the child should
        ignore them too, and it inherits that only if they stay ignored here."""
        for sig in FORWARDED_SIGNALS:
            try:
                if signal.getsignal(sig) == signal.SIG_IGN:
                    continue
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: Python lets only that one set handlers
                break

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def started(self, pid: int) -> None:
        self.pid = pid
        held, self.held = self.held, []
        for signum in held:
            self.forward(signum)

    def stopped(self) -> None:
        self.pid, self.ended = None, True

    def forward(self, signum: int) -> None:
        if self.pid is None:
            if not self.ended:
                self.held.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # ended, not yet reaped: nobody to tell
            os.kill(self.pid, signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Delivered as a Python handler (no sigtimedwait here, or another thread took it):
        # without the sender's details, a terminal key is judged by who owns the terminal.
        if self.pid is not None and signum in _TERMINAL_SIGNALS and _terminal_foreground():
            return
        self.forward(signum)


def wait(proc: subprocess.Popen[bytes], forwarder: Forwarder) -> int:
    """Wait for ``proc`` while passing signals on; its status (``-N``: ended by signal N)."""
    if not forwarder.signals or not hasattr(signal, "sigtimedwait"):
        code = proc.wait()  # macOS, Windows: the Python handlers pass signals on
        forwarder.stopped()
        return code
    waited = {*forwarder.signals, signal.SIGCHLD}
    # Blocked, the signals queue up for sigtimedwait, which tells who sent each one.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        while (status := _reap(proc)) is None:
            info = signal.sigtimedwait(waited, _POLL_S)
            if info is None or info.si_signo == signal.SIGCHLD or _sent_to_the_group(info):
                continue  # a child's end (the loop looks) or a signal the child got as well
            forwarder.forward(info.si_signo)
        forwarder.stopped()
        while signal.sigtimedwait(waited, 0) is not None:
            pass  # came after the child ended: nobody to pass them to
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return status


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    """``proc``'s status once it has ended, else None. As PID 1 (a container's init), also reap
    the orphans the kernel hands over, or they stay zombies for as long as the job runs."""
    status = proc.poll()
    if status is not None or os.getpid() != 1:
        return status
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return proc.poll()
        if pid == 0:
            return None
        if pid == proc.pid:  # ended between poll() and here
            proc.returncode = os.waitstatus_to_exitcode(raw)
            return proc.returncode


def _sent_to_the_group(info: signal.struct_siginfo) -> bool:
    """Whether the kernel sent this signal to the whole foreground process group, so that the
    child (in the same group) got it too: a terminal's Ctrl-C or Ctrl-\\, or a hang-up that is
    not this process's own as a session leader (that one goes to the leader alone)."""
    if info.si_code <= 0:  # kill() or sigqueue() from a process: to this one
        return False
    if info.si_signo == getattr(signal, "SIGHUP", None):
        return os.getsid(0) != os.getpid()
    return True


def _terminal_foreground() -> bool:
    """Whether this process's group is the foreground of its terminal (then a Ctrl-C typed
    there went to the child as well)."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False
