"""A user's first hour, through the real command line and real processes: every mistake gets
one clear line, every command tells the truth, and what the README promises holds.

Stores are real (local directories, a real Redis server, moto_server for S3); programs run in
fresh processes under ``compilecache run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compilecache import entry
from compilecache.entry import EntryHeader
from compilecache.runtime import explain, history
from compilecache.runtime.cache import Cache
from compilecache.stores.local import LocalStore
from tests.conftest import JAX_PROGRAM, clean_env, last_json, run_cli

# A child that looks at its session without importing a framework: compilecache enables it.
ACTIVE = "import compilecache; s = compilecache.active(); print('session', s is not None)"


cli = run_cli


def ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("compilecache")]


# -- configuration and URLs ------------------------------------------------------------------


@pytest.mark.parametrize("option", ["max_sise=1KB", "timout=1"])
def test_a_redis_url_typo_is_one_line_and_the_job_runs_uncached(option: str) -> None:
    url = f"redis://127.0.0.1:1/0?{option}"
    # The command starts a second Python: the error is said once for the whole run.
    program = (
        f"{ACTIVE}; import subprocess, sys; subprocess.run([sys.executable, '-c', {ACTIVE!r}])"
    )
    proc = cli("run", "--", sys.executable, "-c", program, env={"COMPILECACHE_URL": url})
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in ours(proc.stderr) if "not enabled" in line]
    name = option.split("=")[0]
    assert len(errors) == 1 and f"unknown option {name}" in errors[0], proc.stderr
    assert "redis:// knows:" in errors[0] and "timeout" in errors[0]
    assert proc.stdout.count("session False") == 2  # both ran, uncached


def test_an_unknown_scheme_is_not_warned_about_as_an_unsigned_store(tmp_path: Path) -> None:
    proc = cli(
        "run",
        "--",
        sys.executable,
        "-c",
        ACTIVE,
        env={"COMPILECACHE_URL": "foo://bar", "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert proc.returncode == 0
    assert not any("not signed" in line for line in ours(proc.stderr)), proc.stderr
    (line,) = [x for x in ours(proc.stderr) if "not enabled" in x]
    assert "unknown store URL scheme 'foo'" in line


def test_a_store_whose_package_is_missing_is_one_error_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util
    import logging

    import compilecache

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("compilecache")
    logger.addHandler(handler)
    monkeypatch.setattr(logger, "handlers", [handler])

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "obstore" else real(name, *a),
    )
    session = compilecache.enable("s3://bucket/prefix")
    assert session is not None and session.installed == set()  # nothing is hooked
    assert session.stats()["errors"] == 1
    said = [r.getMessage() for r in records if "obstore is not installed" in r.getMessage()]
    assert len(said) == 1 and "pip install 'compilecache[s3]'" in said[0]


def test_a_bare_size_is_bytes_and_an_entry_larger_than_the_bound_says_so(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {"COMPILECACHE_URL": str(store), "COMPILECACHE_MAX_SIZE": "20"}
    proc = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in ours(proc.stderr) if "larger than the whole size bound" in line]
    assert len(warned) == 1 and "a bare number is bytes" in warned[0], proc.stderr
    result = last_json(proc.stdout)
    assert result["stats"]["writes"] == 0 and result["stats"]["skipped"] > 0
    check = cli("check", "--url", str(store), env={"COMPILECACHE_MAX_SIZE": "20"})
    assert "a bare number is bytes" in check.stdout


def test_errors_name_where_the_value_came_from(tmp_path: Path) -> None:
    import compilecache
    from compilecache.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^max_size: cannot read .20 gigs."):
        compilecache.enable(str(tmp_path / "s"), max_size="20 gigs")
    env = {"COMPILECACHE_MIN_COMPILE_TIME": "-3"}
    proc = cli("stats", "--url", str(tmp_path), env=env)
    assert proc.returncode == 2
    assert "COMPILECACHE_MIN_COMPILE_TIME: expected seconds (0 or more), got -3" in proc.stderr
    # keygen into a place it cannot write: the target is named, not its temporary file.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = blocker / "writer.pem"
    proc = cli("keygen", "--out", str(target))
    assert proc.returncode == 1
    assert f"cannot write {target}: Not a directory" in proc.stderr and ".key-" not in proc.stderr


def test_version_global_url_and_a_mistyped_flag(tmp_path: Path) -> None:
    from compilecache import __version__

    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"compilecache {__version__}"
    LocalStore(tmp_path / "s").close()
    before = cli("--url", str(tmp_path / "s"), "stats", "--json")
    assert before.returncode == 0 and json.loads(before.stdout)["url"] == str(tmp_path / "s")
    typo = cli("stats", "--jsn", "--url", str(tmp_path / "s"))
    assert typo.returncode == 2
    assert typo.stderr.startswith("usage: compilecache stats ")
    assert "unrecognized arguments: --jsn" in typo.stderr


# -- compilecache check ------------------------------------------------------------------------


def test_check_reports_settings_levels_and_problems(tmp_path: Path) -> None:
    from tests.servers import running_redis

    store = tmp_path / "store"
    LocalStore(store).close()
    with running_redis(tmp_path / "redis") as server:
        url = f"{store},{server.url}"
        env = {"COMPILECACHE_MAX_SIZE": "5GB", "XDG_STATE_HOME": str(tmp_path / "state")}
        good = cli("check", "--url", url, "--json", env=env)
        assert good.returncode == 0, good.stdout + good.stderr
        report = json.loads(good.stdout)
        sources = {s["name"]: s["source"] for s in report["settings"]}
        assert sources["url"] == "argument (--url)"
        assert sources["max_size"] == "COMPILECACHE_MAX_SIZE"
        assert sources["min_compile_time"] == "default"
        levels = report["levels"]
        assert [lv["reachable"] for lv in levels] == [True, True]
        assert all(lv["writable"] and lv["latency_ms"] is not None for lv in levels)
        assert report["signing"]["role"] == "none"
        assert report["frameworks"]["jax"] != "not installed"
        assert any("not signed" in w["what"] for w in report["warnings"])
    down = cli("check", "--url", url, env=env)  # the server is gone now
    assert down.returncode == 1
    assert "problems:" in down.stdout and "fix:" in down.stdout
    bad = cli("check", "--json", env={"COMPILECACHE_MIN_COMPILE_TIME": "-3"})
    assert bad.returncode == 1
    (problem,) = json.loads(bad.stdout)["problems"]
    assert "COMPILECACHE_MIN_COMPILE_TIME" in problem["what"] and problem["fix"]


# -- output that tells the truth ---------------------------------------------------------------


def _fill(root: Path) -> LocalStore:
    """A store with two jit_evaluate entries, an entry of another key's signature (foreign), a
    damaged one, and torch's internal entries (a kernel, a probe miss with C++ in it)."""
    store = LocalStore(root)
    cache = Cache(store)
    for i in (1, 2):
        header = EntryHeader(framework="jax", key=f"jax/jit_evaluate-{i}", name="jit_evaluate")
        assert cache.save(header, b"x" * 300)
    from compilecache.signing import Signing

    other = Cache(store, signing=Signing(secret=b"another writer's secret"))
    assert other.save(EntryHeader(framework="jax", key="jax/jit_foreign-1", name="f"), b"y" * 50)
    assert cache.save(EntryHeader(framework="jax", key="jax/jit_bad-1", name="bad"), b"z" * 50)
    path = store.path_of("jax/jit_bad-1")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    kernel = EntryHeader(
        framework="torch",
        key="torch/kernel/" + "0" * 64,
        name="c2abc.so",
        extra={"layer": "kernel", entry.INTERNAL: True},
    )
    assert cache.save(kernel, b"\x7fELF" * 10)
    explain.record_miss(
        cache,
        framework="torch",
        name="isa avx512",
        key="torch/probe/isa/1",
        components={"source": "a"},
        readable={"source": "#include <x>\nint main() {\n  return 0;\n}"},
        internal=True,
    )
    explain.record_miss(
        cache, framework="jax", name="jit_new", key="jax/jit_new-1", components={"c": "1"}
    )
    return store


def test_json_is_the_only_thing_on_stdout_for_every_command(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _fill(root).close()
    url = str(root)
    bundle = tmp_path / "b.ccb"
    commands = [
        ["stats", "--json"],
        ["ls", "--json"],
        ["show", "jit_evaluate", "--json"],
        ["explain", "--json"],
        ["explain", "no-such-function", "--json"],
        ["verify", "--json"],
        ["prune", "--dry-run", "--max-size", "100", "--json"],
        ["export", str(bundle), "--framework", "jax", "--json"],
        ["import", str(bundle), "--json"],
        ["warm", "--from", url, "--json"],
        ["check", "--json"],
        ["stats", "--zero", "--json"],
    ]
    for args in commands:
        proc = cli(*args, "--url", url)
        try:
            json.loads(proc.stdout)
        except ValueError:
            pytest.fail(f"{args}: stdout is not one JSON document:\n{proc.stdout}")
    doctor = cli("doctor", "--json", "--", sys.executable, "-c", "pass")
    json.loads(doctor.stdout)


def test_explain_and_show_agree_on_what_a_name_matches(tmp_path: Path) -> None:
    _fill(tmp_path / "store").close()
    url = str(tmp_path / "store")
    shown = json.loads(cli("show", "jit_evaluate", "--json", "--url", url).stdout)
    explained = json.loads(cli("explain", "jit_evaluate", "--json", "--url", url).stdout)
    assert len(shown) == 2
    assert sorted(r["key"] for r in explained) == sorted(s["store"]["key"] for s in shown)


def test_internal_entries_are_grouped_and_every_miss_is_one_line(tmp_path: Path) -> None:
    _fill(tmp_path / "store").close()
    url = str(tmp_path / "store")
    stats = cli("stats", "--url", url).stdout
    assert "torch internal      1 entry (" in stats, stats
    assert "c2abc.so" not in stats  # not among the program's functions
    listed = cli("explain", "--url", url).stdout.splitlines()
    assert any("jit_new" in line for line in listed)
    assert not any("isa avx512" in line for line in listed)
    assert any(
        "1 internal entry (probe answers)" in line and "explain --all" in line for line in listed
    )
    every = cli("explain", "--all", "--url", url).stdout.splitlines()
    (probe,) = [line for line in every if "isa avx512" in line]
    assert "#include <x> int main()" in probe or "isa avx512" in probe
    assert all("\n" not in line for line in every) and not any(
        line.strip().startswith(("int main", "return 0")) for line in every
    )


def test_show_prints_dates(tmp_path: Path) -> None:
    _fill(tmp_path / "store").close()
    text = cli("show", "jax/jit_evaluate-1", "--url", str(tmp_path / "store")).stdout
    today = time.strftime("%Y-%m-%d")
    created = [line for line in text.splitlines() if line.strip().startswith("created:")]
    assert created and all(today in line and "ago" in line for line in created), text


def test_counts_by_reason_and_an_export_that_matches_nothing(tmp_path: Path) -> None:
    source = LocalStore(tmp_path / "source")
    cache = Cache(source)
    for i in range(5):  # compiled for a JAX this host does not have: skipped on import
        header = EntryHeader(
            framework="jax",
            key=f"jax/jit_old{i}-1",
            name=f"jit_old{i}",
            versions={"jax": "0.0.1", "jaxlib": "0.0.1"},
        )
        assert cache.save(header, b"o" * 100)
    source.close()
    warmed = cli("warm", "--from", str(tmp_path / "source"), "--url", str(tmp_path / "t"))
    skipped = [line for line in warmed.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith("skipped 5 entries: "), warmed.stdout
    verbose = cli(
        "warm", "--from", str(tmp_path / "source"), "--url", str(tmp_path / "t"), "--verbose"
    )
    assert len([x for x in verbose.stdout.splitlines() if x.startswith("skipped jax/")]) == 5
    nothing = tmp_path / "nothing.ccb"
    proc = cli("export", str(nothing), "--name", "zzz*", "--url", str(tmp_path / "source"))
    assert proc.returncode == 2 and "nothing written" in proc.stderr
    assert not nothing.exists()


# -- behaviour ---------------------------------------------------------------------------------


def test_a_failed_import_leaves_nothing_behind(tmp_path: Path) -> None:
    source = LocalStore(tmp_path / "source")
    Cache(source).save(EntryHeader(framework="jax", key="jax/jit_a-1", name="jit_a"), b"a" * 99)
    source.close()
    bundle = tmp_path / "b.ccb"
    assert cli("export", str(bundle), "--url", str(tmp_path / "source")).returncode == 0
    truncated = tmp_path / "t.ccb"
    truncated.write_bytes(bundle.read_bytes()[:-40])
    target = tmp_path / "new-store"
    proc = cli("import", str(truncated), "--url", str(target))
    assert proc.returncode == 2 and not target.exists(), proc.stderr
    # A bundle with nothing this host can use: nothing imported, no store made, status 1.
    old = LocalStore(tmp_path / "old")
    versions = {"jax": "0.0.1", "jaxlib": "0.0.1"}
    header = EntryHeader(framework="jax", key="jax/jit_o-1", name="o", versions=versions)
    Cache(old).save(header, b"o" * 99)
    old.close()
    assert cli("export", str(bundle), "--url", str(tmp_path / "old")).returncode == 0
    proc = cli("import", str(bundle), "--url", str(target))
    assert proc.returncode == 1 and not target.exists(), proc.stdout + proc.stderr


@pytest.mark.slow
def test_damaged_entry_is_explained_as_damaged_not_as_another_entrys_flags(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    env = {"COMPILECACHE_URL": str(store)}
    assert cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env).returncode == 0
    local = LocalStore(store)
    (key,) = [i.key for i in local.scan("jax/jit_step-")][:1]
    path = local.path_of(key)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    local.close()
    again = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
    assert again.returncode == 0
    records = json.loads(cli("explain", "jit_step", "--json", "--url", str(store)).stdout)
    assert "the stored entry was damaged" in records[0]["summary"], records[0]
    assert "flags" not in records[0]["summary"]


@pytest.mark.slow
def test_a_warm_local_start_never_touches_the_remote_level(tmp_path: Path) -> None:
    """Tiers local,redis: after two runs every entry is local; with the Redis level down the
    third start (prefetch on, the default) counts no error and prints no warning."""
    from tests.servers import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    try:
        env = {
            "COMPILECACHE_URL": f"{tmp_path / 'local'},{server.url}",
            "XDG_STATE_HOME": str(tmp_path / "state"),
        }
        for _ in range(2):
            proc = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
            assert proc.returncode == 0, proc.stderr
    finally:
        server.kill()
    proc = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
    assert proc.returncode == 0
    stats = last_json(proc.stdout)["stats"]
    assert stats["errors"] == 0 and stats["misses"] == 0 and stats["hits"] > 0, stats
    (summary,) = ours(proc.stderr)  # the summary line, and no warning
    assert " hits, 0 misses" in summary and "0 errors" in summary, proc.stderr


def test_a_read_only_home_gets_a_temporary_xla_directory_and_no_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    env = {"XDG_CACHE_HOME": str(blocker / "cache"), "COMPILECACHE_URL": str(tmp_path / "s")}
    proc = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not any("not restored" in line for line in ours(proc.stderr)), proc.stderr
    check = cli("check", "--url", str(tmp_path / "s"), env=env)
    assert "XLA's caches use" in check.stdout and "compilecache-xla" in check.stdout


def test_a_read_only_store_counts_skipped_writes_not_errors(tmp_path: Path) -> None:
    LocalStore(tmp_path / "s").close()
    env = {"COMPILECACHE_URL": f"{tmp_path / 's'}?readonly=1"}
    proc = cli("run", "--", sys.executable, JAX_PROGRAM, "plain", env=env)
    stats = last_json(proc.stdout)["stats"]
    assert stats["errors"] == 0 and stats["skipped"] > 0 and stats["writes"] == 0, stats


def test_run_enables_a_process_only_when_it_imports_a_framework(tmp_path: Path) -> None:
    """A Python child that imports no framework does not load compilecache at all."""
    program = "import sys; print(sorted(m for m in sys.modules if m.startswith('compilecache')))"
    proc = cli("run", "--", sys.executable, "-c", program, env={"COMPILECACHE_URL": str(tmp_path)})
    assert proc.returncode == 0
    assert proc.stdout.strip() == "[]", proc.stdout
    history_free = LocalStore(tmp_path)
    try:
        assert history.read(history_free, history.RUN) == []
    finally:
        history_free.close()


@pytest.mark.slow
def test_demo_uses_a_scratch_store_and_leaves_the_users_cache_alone(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", "demo", "--layers", "1", "--json"],
        env=clean_env({"COMPILECACHE_FRAMEWORKS": "jax", "XDG_CACHE_HOME": str(xdg)}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["scratch_store"] is True and not Path(report["store"]).exists()
    assert not (xdg / "compilecache").exists()
