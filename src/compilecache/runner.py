"""``compilecache run -- CMD``: enable the cache in CMD and its Python children, no code change.

The child environment gets our ``_bootstrap`` directory first on PYTHONPATH (its
``sitecustomize`` calls :func:`compilecache.enable`) and a spool directory where every Python
process writes its counters at exit. After CMD ends, the counters are summed into the one-line
summary printed on stderr, and CMD's exit status is returned (128 + N when a signal N ended it).

Signals: the wrapper stands between CMD and whoever manages it (a shell, ``kill``, a container
runtime, a batch scheduler's preemption notice), so it passes SIGTERM, SIGINT, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 on to CMD, each as often as it gets them, and keeps waiting for CMD to end:
never orphaned, never killed before it. It does not escalate: a CMD that ignores SIGTERM keeps
running (and the wrapper keeps waiting) until it ends or is killed. A SIGKILL of the wrapper
reaches no handler: on Linux, CMD is started with the parent-death signal set to SIGKILL, so the
kernel ends it with the wrapper instead of leaving it running unwatched. CMD stays in the wrapper's
process group, so a signal the kernel sends to that whole group (Ctrl-C or Ctrl-\\ typed on the
terminal, the terminal hanging up) already reaches CMD and is not passed on a second time; a
signal some process sends to the whole group (``kill -TERM -PGID``) does reach CMD twice. As
PID 1 of a container, the wrapper also reaps the orphans it inherits.
"""

from __future__ import annotations

import os
import sys

# Lean on purpose: this module starts the user's command, and everything it imports is paid on
# every `compilecache run` (python -c pass under it was 0.24 s against 0.012 s). The entry
# format, the stores and the configuration are imported only when a run needs them (a relative
# store path, a shared store to warn about, counters to sum).
TYPE_CHECKING = False  # not typing's: importing typing costs ~10 ms here
if TYPE_CHECKING:
    import signal
else:
    # The C module under `signal`: the same functions and numbers, without the enum wrappers
    # (`signal` imports `enum`, ~10 ms here).
    try:
        import _signal as signal
    except ImportError:
        import signal
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from types import FrameType
    from typing import Any

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

_HERE = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP_DIR = os.path.join(_HERE, "_bootstrap")
# Store URL schemes that name a directory on this machine (a relative one is made absolute).
_DIRECTORY_SCHEMES = ("file", "file+shared")


def _may_be_relative(url: str) -> bool:
    """Whether a level of ``url`` may be a relative local path (cheap: no URL parsing)."""
    for level in url.split(","):
        text = level.strip()
        scheme, sep, rest = text.partition("://")
        if sep and scheme.lower() not in _DIRECTORY_SCHEMES:
            continue  # redis://, s3://, ...: not a local path
        path = rest if sep else text
        if path and not path.startswith("/"):
            return True
    return False


def child_environment(
    base: Mapping[str, str], spool: str | None = None, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment that makes Python processes enable compilecache at start-up."""
    env = dict(base)
    env.update(overrides or {})
    parts = [BOOTSTRAP_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["COMPILECACHE_BOOTSTRAP_PATH"] = os.path.dirname(_HERE)
    url = env.get("COMPILECACHE_URL")
    if url and _may_be_relative(url):
        from compilecache.config import absolute_url

        # Every process under ``run`` uses the same store, whichever directory it starts in.
        env["COMPILECACHE_URL"] = absolute_url(url)
    if spool:
        env["COMPILECACHE_RUN_SPOOL"] = spool
    return env


def read_spool(spool: Path | str) -> dict[str, float]:
    """Sum the counters every process under ``run`` left in the spool directory: its exit
    report, or, for a process that ended without one (killed), the counts it kept while it
    ran."""
    return _read_reports(spool)[0]


def _read_reports(spool: Path | str) -> tuple[dict[str, float], int]:
    """The summed counters, and how many processes ended without their exit report."""
    from compilecache.run_summary import PROGRESS_SUFFIX
    from compilecache.stats import merge

    final = _spool_files(spool, ".json")
    reported = {name.removesuffix(".json") for name in final}
    unreported = [
        name
        for name in _spool_files(spool, PROGRESS_SUFFIX)
        if name.removesuffix(PROGRESS_SUFFIX) not in reported
    ]
    totals = [
        counts for name in (*final, *unreported) if (counts := _counters(spool, name)) is not None
    ]
    return merge(*totals), len(unreported)


def _counters(spool: Path | str, name: str) -> dict[str, float] | None:
    import json

    try:
        with open(os.path.join(spool, name)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): float(v) for k, v in data.items()}


def _spool_files(spool: Path | str, suffix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(spool) if n.endswith(suffix))
    except OSError:
        return []


def read_settings(spool: Path | str) -> list[str]:
    """What the program's framework settings changed in the processes under ``run`` (each
    ``framework: reason`` once), from the events they left in the spool directory."""
    import json

    seen: dict[str, None] = {}
    for name in _spool_files(spool, ".events.jsonl"):
        try:
            with open(os.path.join(spool, name)) as f:
                lines = f.read().splitlines()
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


def summary_lines(spool: str) -> list[str]:
    """The summary line, then what the program's settings changed (each once)."""
    from compilecache.run_summary import Summary

    counters, unreported = _read_reports(spool)
    lines = [Summary.of(counters).line()]  # all zeros: no process used a framework we cache
    if unreported:
        lines.append(
            f"compilecache: {unreported} process{'es' if unreported > 1 else ''} of the command "
            "ended without reporting at exit (killed?): counted above as far as "
            f"{'they' if unreported > 1 else 'it'} had got, every entry written included"
        )
    return lines + [f"compilecache: {summary}" for summary in read_settings(spool)]


def _make_spool() -> str:
    """A private directory for the processes' counters (``tempfile`` costs ~14 ms to import)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = os.path.join(base, f"compilecache-run-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise OSError(f"cannot make a spool directory in {base}")


def _remove_spool(path: str) -> None:
    """Remove the spool directory (flat: one file per process). Never raises."""
    # try/except, not contextlib.suppress: contextlib costs every run ~6 ms of imports.
    for name in _spool_files(path, ""):
        try:  # noqa: SIM105
            os.unlink(os.path.join(path, name))
        except OSError:
            pass
    try:  # noqa: SIM105
        os.rmdir(path)
    except OSError:
        pass


def _may_be_shared(url: str) -> bool:
    """Whether a level of ``url`` may be shared with other hosts: a remote scheme or a shared
    directory (cheap: no URL parsing; the default is this host's own directory)."""
    for level in url.split(","):
        scheme, sep, _ = level.strip().partition("://")
        if (sep and scheme.lower() not in ("file", "memory")) or "shared=" in level:
            return True
    return False


def _shared_store_warning(env: Mapping[str, str]) -> str | None:
    """The first-run warning about a shared store nothing signs."""
    if not _may_be_shared(env.get("COMPILECACHE_URL", "")):
        return None
    from compilecache.unsigned_warning import first_run_warning

    return first_run_warning(env)


def _unknown_variables(env: Mapping[str, str]) -> list[str]:
    """Sentences for the ``COMPILECACHE_*`` variables compilecache does not read (a typo would
    otherwise be silently ignored)."""
    from compilecache import variables

    return variables.describe_unknown(variables.unknown_variables(env))


def _redacted(line: str) -> str:
    """``line`` through the one redaction of URLs, imported only for a line that may quote one
    (``re`` costs every run a few milliseconds)."""
    if "://" not in line and "=" not in line:
        return line
    from compilecache.redaction import redact

    return redact(line)


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
    spool = ""
    try:
        spool = _make_spool()
        env = child_environment(os.environ, spool, overrides)
        for said in _unknown_variables(env):
            print(f"compilecache: warning: {said}", file=sys.stderr)
        warning = _shared_store_warning(env)
        if warning:
            print(_redacted(f"compilecache: warning: {warning}"), file=sys.stderr)
        try:
            proc = Child.start(list(command), env)
        except OSError as exc:
            print(f"compilecache run: cannot start {command[0]!r}: {exc}", file=sys.stderr)
            return 127
        forwarder.started(proc.pid)
        status = wait(proc, forwarder)
        if env.get("COMPILECACHE_DISABLE", "").strip() not in ("1", "true", "yes", "on"):
            for line in summary_lines(spool):
                print(_redacted(line), file=sys.stderr)
    finally:
        forwarder.restore()
        if spool:
            _remove_spool(spool)
    return status if status >= 0 else 128 - status


# What Python ignores in itself and a child must get back as the default (as subprocess's
# restore_signals does): SIGPIPE, so that `cmd | head` ends cmd, and SIGXFSZ.
_RESTORED = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))


class Child:
    """The command, started with ``posix_spawnp`` (``subprocess`` costs every run ~10 ms of
    imports; where posix_spawn is missing, it is used instead)."""

    def __init__(self, pid: int, popen: Any = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._popen = popen

    @classmethod
    def start(cls, command: list[str], env: dict[str, str]) -> Child:
        if sys.platform.startswith("linux"):
            tie = _parent_death_signal()
            if tie is not None:
                return cls(_fork_tied(command, env, tie))
        spawn = getattr(os, "posix_spawnp", None)
        if spawn is None:
            import subprocess

            popen = subprocess.Popen(command, env=env)
            return cls(popen.pid, popen)
        # The wrapper's inheritable descriptors (stdin, stdout, stderr) are the command's; its
        # own are close-on-exec (PEP 446). Handled signals are reset by exec, ignored ones stay
        # ignored (nohup), as with subprocess.
        return cls(spawn(command[0], command, env, setsigdef=_RESTORED))

    def poll(self) -> int | None:
        """Its status once it has ended (``-N``: ended by signal N), else ``None``."""
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.poll()
                return self.returncode
            try:
                pid, raw = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(raw)
        return self.returncode

    def wait(self) -> int:
        if self._popen is not None:
            code: int = self._popen.wait()
            self.returncode = code
            return code
        while self.returncode is None:
            _, raw = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(raw)
        return self.returncode


def _find_program(name: str, env: Mapping[str, str]) -> str:
    """The file ``name`` runs, searched in ``env``'s PATH as ``execvp`` does (a name with a
    slash as it is); FileNotFoundError when no PATH entry has it executable."""
    if os.sep in name:
        return name
    found = ""
    for directory in os.get_exec_path(dict(env)):
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
        found = found or (path if os.path.exists(path) else "")
    if found:  # there, but not executable: exec says why (permission denied)
        return found
    raise FileNotFoundError(2, os.strerror(2), name)


# prctl(2)'s option that has the kernel send a signal to a process when its parent ends.
_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> Callable[[], bool] | None:
    """What ties a new process to this one on Linux: a function that, called in the child,
    asks the kernel to send it SIGKILL when this process ends, and says whether it took
    (``None`` where libc's prctl cannot be reached)."""
    try:
        import ctypes  # ~2 ms, Linux only: the price of never orphaning the command

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    option = ctypes.c_int(_PR_SET_PDEATHSIG)
    kill = ctypes.c_ulong(int(signal.SIGKILL))

    def tie() -> bool:
        return (
            int(prctl(option, kill, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))) == 0
        )

    return tie


def _fork_tied(command: list[str], env: dict[str, str], tie: Callable[[], bool]) -> int:
    """Start ``command`` in a child that the kernel kills when this process ends, even by
    SIGKILL (which no handler sees): the command is never left running without the wrapper
    that forwards its signals and reports its status. The pid, or OSError when it cannot be
    executed (said by the child through a pipe, as subprocess does)."""
    parent = os.getpid()
    # Everything the child needs is decided here: after the fork, each Python step of the
    # child copies memory pages the parent shares (the start of every run pays for it).
    program = _find_program(command[0], env)
    defaults = [
        sig
        for sig in (*FORWARDED_SIGNALS, *_RESTORED)
        if sig in _RESTORED or callable(signal.getsignal(sig))
    ]
    # Non-inheritable (PEP 446): the exec closes the write end, so the read below returns
    # b"" when the command started, or the errno when it could not.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing here may return into the wrapper's code
        code = 127
        try:
            # Signals the wrapper handles get back their defaults now, not only at exec: one
            # that comes before the exec acts on the command as it would after.
            for sig in defaults:
                signal.signal(sig, signal.SIG_DFL)
            try:  # noqa: SIM105  (contextlib: ~6 ms of every run)
                tie()
            except Exception:  # untied, the command still runs: as without the tie
                pass
            # The wrapper may have died before the tie: then nobody would kill this process.
            if os.getppid() != parent:
                code = 128 + int(signal.SIGKILL)
            else:
                os.execve(program, command, env)
        except OSError as exc:
            os.write(write_end, str(exc.errno or 0).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        said = b""
        while chunk := os.read(read_end, 64):
            said += chunk
    finally:
        os.close(read_end)
    if said:
        os.waitpid(pid, 0)
        number = int(said or b"0")
        raise OSError(number, os.strerror(number), command[0])
    return pid


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
        try:  # noqa: SIM105
            os.kill(self.pid, signum)
        except ProcessLookupError:  # ended, not yet reaped: nobody to tell
            pass

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Delivered as a Python handler (no sigtimedwait here, or another thread took it):
        # without the sender's details, a terminal key is judged by who owns the terminal.
        if self.pid is not None and signum in _TERMINAL_SIGNALS and _terminal_foreground():
            return
        self.forward(signum)


def wait(proc: Child, forwarder: Forwarder) -> int:
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


def _reap(proc: Child) -> int | None:
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
