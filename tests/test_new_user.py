"""What a new user meets: every message true, every failure one clear line, and ``check``,
``stats``, ``run`` and ``explain`` saying the same thing of the same store.

Each test plays the user in fresh processes: the ``compilecache`` command and a small JAX program
under ``compilecache run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache.run_summary import Summary
from tests import servers
from tests.conftest import (
    JAX_PROGRAM,
    clean_env,
    in_mount_namespace,
    mount_namespaces_work,
    run_cli,
)
from tests.servers import RedisServer, free_port, namespace

redis_server = servers.redis_server


cc = run_cli


def run_jax(
    url: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``compilecache run -- python jax_program.py plain`` on ``url``."""
    proc = cc(
        "run",
        "--",
        sys.executable,
        JAX_PROGRAM,
        "plain",
        *extra,
        env={"COMPILECACHE_URL": url, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def summary(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line
        for line in proc.stderr.splitlines()
        if line.startswith("compilecache: ") and " hit" in line
    ]
    assert lines, proc.stderr
    return lines[-1]


def ours(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """compilecache's own lines on stderr (not the program's JSON)."""
    return [line for line in proc.stderr.splitlines() if line.startswith("compilecache")]


# -- 1. a store path that is a file ----------------------------------------------------------


def test_a_file_as_the_store_is_the_same_error_for_every_command(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("a file")
    said = "cannot use " + str(path) + " as a cache directory: Not a directory"
    check = cc("check", "--url", str(path))
    assert check.returncode == 1 and said in check.stdout and "not made yet" not in check.stdout
    for command in (["stats"], ["ls"], ["explain"], ["show", "x"]):
        proc = cc(*command, "--url", str(path))
        assert proc.returncode == 2 and said in proc.stderr, (command, proc.stderr)
    run = cc("run", "--url", str(path), "--", sys.executable, "-c", "import jax")
    assert f"not enabled: {said}" in run.stderr
    assert "1 error," in summary(run)
    below = cc("check", "--url", str(path / "sub"))
    assert below.returncode == 1 and f"({path} is a file)" in below.stdout
    assert path.read_text() == "a file"  # nothing touched it


# -- 2. a read-only store -----------------------------------------------------------------------


@pytest.mark.skipif(
    not mount_namespaces_work(), reason="a read-only bind mount needs a mount namespace (root)"
)
def test_a_read_only_store_serves_reads_and_says_once_that_it_writes_nothing(
    tmp_path: Path,
) -> None:
    store, mounted = tmp_path / "store", tmp_path / "ro"
    mounted.mkdir()
    first = run_jax(str(store))
    n = int(json.loads(first.stdout.strip().splitlines()[-1])["stats"]["writes"])
    assert n > 0
    new_program = tmp_path / "new.py"
    new_program.write_text(
        "import jax, jax.numpy as jnp\nprint(float(jax.jit(lambda x: jnp.cos(x) * 7)(jnp.ones(5)).sum()))\n"
    )
    script = (
        'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && '
        '"$@"; for c in check stats; do echo "== $c"; '
        f'{sys.executable} -m compilecache $c --url "$MOUNTED"; echo "rc $?"; done'
    )
    runs = (
        f"{sys.executable} -m compilecache run -- {sys.executable} {JAX_PROGRAM} plain; "
        f"{sys.executable} -m compilecache run -- {sys.executable} {new_program}"
    )
    proc = subprocess.run(
        in_mount_namespace(script, "sh", str(store), str(mounted), "sh", "-c", runs),
        env=clean_env({"COMPILECACHE_URL": str(mounted), "MOUNTED": str(mounted)}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    summaries = [
        line for line in out.splitlines() if line.startswith("compilecache: ") and " hit" in line
    ]
    assert summaries[0].startswith(f"compilecache: {n} hits, 0 misses"), summaries
    assert "0 writes, 0 errors" in summaries[1]
    said = [
        line
        for line in out.splitlines()
        if "is read-only: reads are served, nothing is written" in line
    ]
    assert len(said) == 1, out
    check = out.split("== check")[1].split("== stats")[0]
    assert "reachable" in check and "read-only" in check and "NOT reachable" not in check
    assert "rc 0" in check and "uncached" not in check
    assert "rc 0" in out.split("== stats")[1]
    assert sorted(p.name for p in (store / "entries").rglob("*.cce")) != []  # untouched source


# -- 4. a remote level that is down behind a local one ---------------------------------------


def test_a_level_that_is_down_is_one_warning_and_one_error_in_tiers_as_alone(
    tmp_path: Path,
) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0?timeout=0.5s"
    alone = run_jax(down)
    tiers = run_jax(f"{tmp_path / 'l1'},{down}")
    for proc in (alone, tiers):
        warnings = [line for line in ours(proc) if "failed" in line]
        assert len(warnings) == 1, ours(proc)
        assert "1 error," in summary(proc), summary(proc)
    check = cc("check", "--url", f"{tmp_path / 'l1'},{down}")
    assert check.returncode == 1
    assert f"the other levels ({tmp_path / 'l1'}) serve meanwhile" in check.stdout
    assert "uncached" not in check.stdout
    # The local level serves the next run.
    assert summary(run_jax(f"{tmp_path / 'l1'},{down}")).split(",")[1].strip() == "0 misses"


# -- 5. a reader that trusts another writer ----------------------------------------------------


def test_a_reader_keeps_its_own_compiles_where_the_shared_entries_are_anothers(
    tmp_path: Path,
) -> None:
    keys = {}
    for name in ("writer", "other"):
        made = cc("keygen", "--out", str(tmp_path / f"{name}.pem"))
        assert made.returncode == 0, made.stderr
        keys[name] = made.stdout.strip().splitlines()[-1]
    shared = f"{tmp_path / 'shared'}?shared=1"
    run_jax(shared, env={"COMPILECACHE_SIGNING_KEY_FILE": str(tmp_path / "writer.pem")})
    before = {p.name: p.read_bytes() for p in (tmp_path / "shared").rglob("*.cce")}
    reader = {"COMPILECACHE_TRUSTED_KEYS": keys["other"]}
    tiers = f"{tmp_path / 'local'},{shared}"
    first = run_jax(tiers, env=reader)
    assert " signed with another key" in summary(first)
    second = run_jax(tiers, env=reader)
    assert ", 0 misses," in summary(second) and "signed with another key" not in summary(second)
    # The shared store is as the writer left it.
    assert {p.name: p.read_bytes() for p in (tmp_path / "shared").rglob("*.cce")} == before
    explained = cc("explain", "--url", str(tmp_path / "local")).stdout
    assert "signed with a key this process does not trust" in explained
    assert "the write failed" not in explained


# -- 6. stats and ls agree, and say what they count ------------------------------------------


def test_stats_and_ls_agree_on_entries_and_compile_time(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    remote = f"{redis_server.url}/{namespace()}"
    local = str(tmp_path / "local")
    run_jax(f"{local},{remote}")
    for url in (local, remote):
        stats = json.loads(cc("stats", "--json", "--url", url).stdout)
        listed = json.loads(cc("ls", "--json", "--url", url).stdout)
        assert stats["entries"] == len(listed) > 0, url
        stored = sum(e["compile_time_s"] for e in listed)
        assert stored > 0 and stats["stored_compile_time_s"] == pytest.approx(stored), url
        human = cc("stats", "--url", url).stdout
        assert f"compile time stored   {stored:.1f} s" in human, human
        for values in stats["frameworks"].values():
            assert all(
                isinstance(values[k], int)
                for k in ("hits", "misses", "writes", "entries")
                if k in values
            )
    everything = json.loads(cc("ls", "--json", "--all", "--url", local).stdout)
    assert (
        len(everything)
        == len(listed_local := json.loads(cc("ls", "--json", "--url", local).stdout)) + 1
    )
    assert "job lookup list" in cc("ls", "--url", local).stdout and listed_local


def test_no_hit_rate_before_any_lookup(tmp_path: Path) -> None:
    made = f"import compilecache; compilecache.enable({str(tmp_path / 'empty')!r})"
    assert subprocess.run([sys.executable, "-c", made], env=clean_env()).returncode == 0
    assert "hit rate              n/a" in cc("stats", "--url", str(tmp_path / "empty")).stdout
    assert (
        json.loads(cc("stats", "--json", "--url", str(tmp_path / "empty")).stdout)["hit_rate"]
        is None
    )


def test_the_summary_line_counts_in_words() -> None:
    one = Summary(hits=1, misses=1, writes=1, errors=1, compile_time_saved_s=0.5).line()
    assert one == "compilecache: 1 hit, 1 miss, 1 write, 1 error, 0.5s compile time saved"
    two = Summary(hits=2, misses=0, writes=2, errors=0, compile_time_saved_s=0.0).line()
    assert two == "compilecache: 2 hits, 0 misses, 2 writes, 0 errors, 0.0s compile time saved"


# -- 7. --json before the command --------------------------------------------------------------


def test_json_is_taken_before_the_command_as_url_is(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    made = f"import compilecache; compilecache.enable({url!r})"
    assert subprocess.run([sys.executable, "-c", made], env=clean_env()).returncode == 0
    before = cc("--json", "stats", "--url", url)
    after = cc("stats", "--json", "--url", url)
    assert (
        before.returncode == 0
        and json.loads(before.stdout)["url"] == json.loads(after.stdout)["url"]
    )
    refused = cc("--json", "run", "--", "true")
    assert refused.returncode == 2 and "--json is not taken" in refused.stderr


# -- 8. a one-shot command against an unreachable store ----------------------------------------


def test_a_command_on_an_unreachable_redis_does_not_promise_a_retry(tmp_path: Path) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0?timeout=0.5s"
    for command in (["stats"], ["ls"]):
        proc = cc(*command, "--url", f"{tmp_path / 'l'},{down}")
        assert "retrying" not in proc.stderr and "left out of this command" in proc.stderr, (
            proc.stderr
        )
        alone = cc(*command, "--url", down)
        assert alone.returncode == 2 and "retrying" not in alone.stderr


# -- 9. the unsigned-store warning, once per host and shared store ------------------------------


def test_the_unsigned_store_warning_is_said_once_per_shared_store(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    remote = f"{redis_server.url}/{namespace()}"
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    warned = []
    for local in ("a", "b", "a"):
        proc = cc(
            "run",
            "--url",
            f"{tmp_path / local},{remote}",
            "--",
            sys.executable,
            "-c",
            "pass",
            env=env,
        )
        warned.append("shared and entries are not signed" in proc.stderr)
    assert warned == [True, False, False]


# -- 10. check shows what a run would use -------------------------------------------------------


def test_check_says_how_the_job_is_named_when_unset() -> None:
    settings = {s["name"]: s for s in json.loads(cc("check", "--json").stdout)["settings"]}
    assert settings["job"]["value"] == "(decided by each run: a fingerprint of the command it runs)"
    named = json.loads(cc("check", "--json", env={"COMPILECACHE_JOB": "train"}).stdout)
    assert {s["name"]: s["value"] for s in named["settings"]}["job"] == "train"


# -- the same store, the same words -------------------------------------------------------------


@pytest.mark.parametrize("case", ["file", "missing-package-scheme", "bad-option"])
def test_check_stats_run_and_explain_say_the_same_of_one_store(tmp_path: Path, case: str) -> None:
    """A store that cannot be used: every command names the same cause, in the same words."""
    if case == "file":
        target = tmp_path / "file"
        target.write_text("x")
        url, words = str(target), "Not a directory"
    elif case == "missing-package-scheme":
        url, words = "nosuchscheme://bucket/p", "unknown store URL scheme"
    else:
        url, words = f"{tmp_path / 'd'}?max_sise=1GB", "unknown option max_sise"
    said: dict[str, Any] = {}
    said["check"] = cc("check", "--url", url).stdout
    said["stats"] = cc("stats", "--url", url).stderr
    said["explain"] = cc("explain", "--url", url).stderr
    said["run"] = cc("run", "--url", url, "--", sys.executable, "-c", "import jax").stderr
    assert {name: words in text for name, text in said.items()} == dict.fromkeys(said, True), said
