"""``compilecache run`` passes signals on to its child and waits for it (issue 11, item 4).

Real processes and real signals: the wrapper is ``python -m compilecache run -- python -c CHILD``
started in a subprocess; the test signals the wrapper (as ``kill``, a container runtime or a batch
scheduler would) or types Ctrl-C on a real pseudo-terminal, and then checks what the child got,
the wrapper's exit status, its summary line, that the child is gone, and that no
``compilecache-run-*`` directory is left in the TMPDIR the wrapper was given.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.polling import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# The child: records the signals it gets (one file per delivery), publishes its pid once its
# handlers are in place, and exits with 7 when told to (by default, at the first signal).
CHILD = r"""
import os, signal, sys, time
out, mode = sys.argv[1], sys.argv[2]
count = 0
def record(signum, sender=""):
    global count
    count += 1
    open(os.path.join(out, f"got-{signum}-{count}{sender}"), "w").close()
def on_signal(signum, frame):
    record(signum)
    if mode == "trap" or (mode == "twice" and count == 2):
        sys.exit(7)
if mode in ("trap", "twice"):
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "terminal":  # take SIGINTs one by one, noting who sent each (0: the kernel)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
with open(os.path.join(out, "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(out, "pid.tmp"), os.path.join(out, "pid"))
deadline = time.monotonic() + (4.0 if mode == "terminal" else 120.0)
while (left := deadline - time.monotonic()) > 0:
    if mode == "terminal":
        info = signal.sigtimedwait({signal.SIGINT}, left)
        if info is not None:
            record(info.si_signo, f"-from-{info.si_pid}")
    else:
        time.sleep(0.05)
sys.exit(5)
"""


# The wrapper as users start it (signals taken with sigtimedwait, which tells who sent each),
# and as it runs where Python has no sigtimedwait (macOS): Python signal handlers pass them on.
WRAPPERS = {
    "sigtimedwait": [sys.executable, "-m", "compilecache"],
    "handlers": [
        sys.executable,
        "-c",
        "import signal, sys; del signal.sigtimedwait; from compilecache.cli import main; "
        "sys.exit(main(sys.argv[1:]))",
    ],
}


# Starts the rest of its command line with the signals a terminal leaves at their defaults: a
# test run under ``nohup`` (or as a background job) passes SIGHUP (SIGINT) on ignored, and the
# wrapper rightly keeps ignoring what it was started ignoring (test_a_signal_ignored_at_start_stays_ignored).
DEFAULT_SIGNALS = [
    sys.executable,
    "-c",
    "import os, signal, sys\n"
    "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):\n"
    "    signal.signal(s, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])",
]


class Run:
    """One ``compilecache run -- python -c CHILD`` under test."""

    def __init__(self, tmp_path: Path, mode: str, **popen: object) -> None:
        self.out = tmp_path / "out"
        self.tmp = tmp_path / "tmpdir"
        self.out.mkdir()
        self.tmp.mkdir()
        env = clean_env(
            {
                "COMPILECACHE_URL": str(tmp_path / "store"),
                "COMPILECACHE_FRAMEWORKS": "jax",
                "TMPDIR": str(self.tmp),
            }
        )
        wrapper = popen.pop("wrapper", WRAPPERS["sigtimedwait"])
        assert isinstance(wrapper, list)
        command = [*wrapper, "run", "--", sys.executable, "-c", CHILD, str(self.out), mode]
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        self.prefix = popen.pop("prefix", [])
        assert isinstance(self.prefix, list)
        self.proc = subprocess.Popen(
            [*DEFAULT_SIGNALS, *self.prefix, *command],
            env=env,
            text=True,
            **popen,  # type: ignore[call-overload]
        )
        self.child_pid = 0

    def wait_for_child(self, timeout: float = 60.0) -> int:
        """The child's pid, once its signal handlers are in place."""
        pid_file = self.out / "pid"
        started = wait_until(lambda: pid_file.exists() or self.proc.poll() is not None, timeout)
        assert self.proc.poll() is None, self.proc.communicate()
        assert started and pid_file.exists(), "the child never started"
        self.child_pid = int(pid_file.read_text())
        return self.child_pid

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        """The wrapper's exit status and stderr."""
        try:
            _, stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("the wrapper did not end after its child was signalled")
        return self.proc.returncode, stderr or ""

    def received(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir() if p.name.startswith("got-"))

    def kill(self) -> None:
        for pid in (self.child_pid, self.proc.pid):
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.communicate(timeout=10)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    """Every wrapper and child a test started is gone after it, whatever the outcome."""
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for its parent counts as ended)."""

    def ended() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        return False

    return wait_until(ended, timeout, interval=0.05)


def summary_lines(stderr: str) -> list[str]:
    return [
        line for line in stderr.splitlines() if line.startswith("compilecache: ") and "hits" in line
    ]


def leftover_spools(tmp: Path) -> list[str]:
    return [p.name for p in tmp.iterdir() if p.name.startswith("compilecache-run-")]


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_is_forwarded_and_the_childs_status_returned(
    tmp_path: Path, runs: list[Run], sig: signal.Signals, wrapper: str
) -> None:
    run = Run(tmp_path, "trap", wrapper=WRAPPERS[wrapper])
    runs.append(run)
    child = run.wait_for_child()
    os.kill(run.proc.pid, sig)
    rc, stderr = run.finish()
    assert run.received() == [f"got-{int(sig)}-1"]  # the child got it, once
    assert rc == 7, stderr  # the child's own status, not 128 + sig
    assert len(summary_lines(stderr)) == 1, stderr
    assert gone(child)
    assert leftover_spools(run.tmp) == []


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_child_killed_by_the_signal_gives_128_plus_n(
    tmp_path: Path, runs: list[Run], wrapper: str
) -> None:
    run = Run(tmp_path, "default", wrapper=WRAPPERS[wrapper])
    runs.append(run)
    child = run.wait_for_child()
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, stderr = run.finish()
    assert rc == 128 + signal.SIGTERM, stderr
    assert len(summary_lines(stderr)) == 1, stderr
    assert gone(child)
    assert leftover_spools(run.tmp) == []


def test_a_second_signal_is_forwarded_too(tmp_path: Path, runs: list[Run]) -> None:
    run = Run(tmp_path, "twice")
    runs.append(run)
    run.wait_for_child()
    os.kill(run.proc.pid, signal.SIGTERM)
    assert wait_until(run.received, 30)
    assert run.proc.poll() is None  # the wrapper keeps waiting for its child
    os.kill(run.proc.pid, signal.SIGINT)
    rc, stderr = run.finish()
    assert run.received() == [f"got-{int(signal.SIGTERM)}-1", f"got-{int(signal.SIGINT)}-2"]
    assert rc == 7, stderr
    assert leftover_spools(run.tmp) == []


def test_wrapper_waits_for_a_child_that_ignores_sigterm(tmp_path: Path, runs: list[Run]) -> None:
    run = Run(tmp_path, "ignore")
    runs.append(run)
    child = run.wait_for_child()
    os.kill(run.proc.pid, signal.SIGTERM)
    time.sleep(1.0)
    # Forwarded, ignored: both still run; the wrapper never escalates on its own.
    assert run.proc.poll() is None and not gone(child, timeout=0)
    os.kill(child, signal.SIGKILL)  # what a supervisor does after its grace period
    rc, stderr = run.finish()
    assert rc == 128 + signal.SIGKILL, stderr
    assert len(summary_lines(stderr)) == 1, stderr
    assert leftover_spools(run.tmp) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
@pytest.mark.parametrize("mode", ["trap", "ignore"])
def test_the_command_ends_with_a_wrapper_killed_by_sigkill(
    tmp_path: Path, runs: list[Run], mode: str
) -> None:
    """SIGKILL reaches no handler, so the wrapper cannot pass it on: the kernel ends the command
    with it instead of leaving it running with no parent (one that ignores SIGTERM too)."""
    run = Run(tmp_path, mode)
    runs.append(run)
    child = run.wait_for_child()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.finish()
    assert gone(child), f"the command (pid {child}) outlived its wrapper"


def test_a_signal_ignored_at_start_stays_ignored(tmp_path: Path, runs: list[Run]) -> None:
    """``nohup compilecache run -- CMD``: CMD must ignore SIGHUP as it would without the
    wrapper, so the wrapper may not take SIGHUP over (that would reset it in CMD)."""
    run = Run(tmp_path, "default", prefix=["nohup"], start_new_session=True)
    runs.append(run)
    child = run.wait_for_child()
    os.killpg(run.proc.pid, signal.SIGHUP)  # the terminal hangs up: the whole group
    time.sleep(1.0)
    assert run.proc.poll() is None and not gone(child, timeout=0)
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, stderr = run.finish()
    assert rc == 128 + signal.SIGTERM, stderr
    assert gone(child)
    assert leftover_spools(run.tmp) == []


PRESSES = 8


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_ctrl_c_on_a_terminal_reaches_the_child_once(
    tmp_path: Path, runs: list[Run], wrapper: str
) -> None:
    """A terminal sends Ctrl-C to its whole foreground process group, the child included: the
    wrapper must not pass on a second one (a program that saves a checkpoint on SIGINT would be
    interrupted while saving)."""
    master, slave = os.openpty()

    def controlling_terminal() -> None:  # runs in the wrapper after setsid(): own the pty
        import fcntl
        import termios

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    run = Run(
        tmp_path,
        "terminal",
        wrapper=WRAPPERS[wrapper],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_terminal,
    )
    runs.append(run)
    os.close(slave)
    output = b""
    try:
        run.wait_for_child()
        # Ctrl-C, as typed, a few times: a forwarded copy that comes while the terminal's own
        # is still pending merges with it, so one press alone might not show a second copy.
        for _ in range(PRESSES):
            os.write(master, b"\x03")
            time.sleep(0.15)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError as exc:  # EIO: every process holding the terminal has ended
                    assert exc.errno == errno.EIO
                    break
                if not chunk:
                    break
                output += chunk
        rc = run.proc.wait(timeout=30)
    finally:
        os.close(master)
    # The child listens for 4 s and then exits 5: every SIGINT it got came from the terminal
    # (the kernel: sender 0), none from the wrapper.
    senders = {name.rsplit("-from-", 1)[1] for name in run.received()}
    assert senders == {"0"}, (run.received(), output)
    assert 1 <= len(run.received()) <= PRESSES
    assert rc == 5, output
    text = output.decode(errors="replace").replace("\r", "").replace("^C", "")  # the tty's echo
    assert len(summary_lines(text)) == 1, output
    assert leftover_spools(run.tmp) == []


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        return False
    probe = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def _namespace_init(unshare_pid: int, timeout: float = 30.0) -> int:
    """The host pid of the process ``unshare --fork`` started: PID 1 of the new namespace."""

    def children() -> list[str]:
        with contextlib.suppress(OSError):
            return Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
        return []

    started = wait_until(children, timeout, interval=0.05)
    assert started, "unshare started no process"
    return int(started[0])


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare --user --pid (user namespaces)")
def test_as_pid_1_of_a_container(tmp_path: Path, runs: list[Run]) -> None:
    """As PID 1 (``docker run``): a signal without a handler never reaches PID 1, so the
    wrapper must handle SIGTERM itself (``docker stop``) and pass it on."""
    namespace = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    run = Run(tmp_path, "trap", prefix=namespace)
    runs.append(run)
    run.wait_for_child()
    wrapper = _namespace_init(run.proc.pid)
    nspid = Path(f"/proc/{wrapper}/status").read_text().split("NSpid:")[1].split("\n")[0]
    assert nspid.split()[-1] == "1"  # the wrapper is PID 1 there
    os.kill(wrapper, signal.SIGTERM)  # from outside, as the container runtime does
    rc, stderr = run.finish()
    assert run.received() == [f"got-{int(signal.SIGTERM)}-1"], stderr
    assert rc == 7, stderr
    assert len(summary_lines(stderr)) == 1, stderr
    assert leftover_spools(run.tmp) == []


ORPHAN_MAKER = r"""
import os, sys, time
out = sys.argv[1]
if os.fork() == 0:          # an intermediate that leaves an orphan behind and exits at once
    if os.fork() == 0:
        time.sleep(0.3)     # the orphan, now PID 1's child, ends
        os._exit(0)
    os._exit(0)
os.wait()
time.sleep(2.0)
zombies = 0
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            with open(f"/proc/{entry}/stat") as f:
                zombies += f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            pass
print("zombies", zombies, flush=True)
"""


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare --user --pid (user namespaces)")
def test_as_pid_1_it_reaps_orphans(tmp_path: Path) -> None:
    """PID 1 inherits every orphan of the container: the wrapper reaps them (as tini does), so
    they do not pile up as zombies while the job runs."""
    proc = subprocess.run(
        [
            *("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"),
            *(sys.executable, "-m", "compilecache", "run", "--"),
            *(sys.executable, "-c", ORPHAN_MAKER, str(tmp_path)),
        ],
        env=clean_env({"COMPILECACHE_URL": str(tmp_path / "store"), "TMPDIR": str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "zombies 0" in proc.stdout, proc.stdout + proc.stderr
    assert leftover_spools(tmp_path) == []


# A JAX program in its step loop (it prints "ready" once its loop runs), and a torch program that
# is interrupted after a compile: Ctrl-C must end them as it ends them without compilecache.
JAX_LOOP = r"""
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
x = jnp.ones((64, 64))
f(x).block_until_ready()
print("ready", flush=True)
while True:
    f(x).block_until_ready()
"""
TORCH_INTERRUPTED = r"""
import torch
torch.compile(lambda x: x.sin() + 1)(torch.ones(3))
raise KeyboardInterrupt
"""


def _as_from_a_terminal() -> None:
    """In the child before it runs: SIGINT unblocked and at its default, as a shell starts a
    program (a pytest worker's own signal state is not a user's)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signals(pid: int) -> str:
    """A process's blocked, ignored and caught signals and where it waits, for a failure."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = [line.strip() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        with open(f"/proc/{pid}/wchan") as f:
            lines.append(f"wchan {f.read()}")
        return "; ".join(lines)
    except OSError as exc:
        return f"(no /proc: {exc})"


def _interrupted_by_the_group(argv: list[str], env: dict[str, str]) -> int:
    """Start ``argv`` in a process group of its own, wait for its "ready", then send SIGINT to
    the whole group, as a terminal does, again every 10 s until it ends, as a user presses
    Ctrl-C again (plain JAX, without compilecache, once went on past a first one on a loaded
    machine: an interrupt that lands inside one of its callbacks can be swallowed); its exit
    status."""
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for _ in range(12):
            os.killpg(proc.pid, signal.SIGINT)
            try:
                return proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        raise AssertionError(f"{argv[:3]} did not end after 12 interrupts: {_signals(proc.pid)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_ends_a_jax_step_loop_as_without_compilecache(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    env = clean_env({"COMPILECACHE_URL": str(tmp_path / "store")})
    plain = _interrupted_by_the_group([sys.executable, "-c", JAX_LOOP], env)
    run = [sys.executable, "-m", "compilecache", "run", "--", sys.executable, "-c", JAX_LOOP]
    cold = _interrupted_by_the_group(run, env)
    warm = _interrupted_by_the_group(run, env)
    assert plain == -signal.SIGINT  # killed by SIGINT, as Python ends on Ctrl-C
    assert cold == warm == 128 + signal.SIGINT


def test_a_keyboard_interrupt_after_torch_compiles_exits_130(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = clean_env(
        {
            "COMPILECACHE_URL": str(tmp_path / "store"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "t"),
        }
    )
    run = [
        sys.executable,
        "-m",
        "compilecache",
        "run",
        "--",
        sys.executable,
        "-c",
        TORCH_INTERRUPTED,
    ]
    proc = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-2000:]
    assert "KeyboardInterrupt" in proc.stderr
