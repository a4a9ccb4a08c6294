"""A typo never does something else than what was meant, and never prints a secret.

A URL with one slash too few, a scheme spelt wrong, a credential option spelt wrong: each is met
in fresh processes through the real command line, against a real Redis server, and on an
install without fsspec (an optional package) as a user of the wheel has it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compilecache.errors import ConfigError
from compilecache.redaction import MASK, is_credential_option, is_shown_option, redact
from compilecache.stores.base import WRAPPER_PARAMS
from compilecache.stores.registry import open_store, parse_url
from tests import servers
from tests.conftest import run_cli
from tests.servers import RedisServer

redis_server = servers.redis_server

# A child that looks at its session without importing a framework: compilecache enables it.
ACTIVE = "import compilecache; s = compilecache.active(); print('session', s is not None)"


def without_fsspec(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import fsspec, as on an install without it."""
    blocker = tmp_path / "no-fsspec" / "fsspec"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'fsspec'\", name='fsspec')\n"
    )
    return {"PYTHONPATH": str(blocker.parent)}


@pytest.mark.parametrize(
    ("url", "written"),
    [
        ("redis:/127.0.0.1:6391/0", "redis://"),
        ("redis:127.0.0.1:6391/0", "redis://"),
        ("s3:/bucket/prefix", "s3://"),
        ("memory:name", "memory://"),
    ],
)
def test_a_malformed_url_is_an_error_naming_it(url: str, written: str) -> None:
    with pytest.raises(ConfigError, match=f"malformed store URL '{url}'.*{written}"):
        parse_url(url)


def test_a_url_with_one_slash_never_reaches_another_server(redis_server: RedisServer) -> None:
    """``redis:/host:port/0`` once read as a path on localhost's default port: every command
    and every run now refuse it, naming it and how it is written."""
    url = f"redis:/127.0.0.1:{redis_server.port}/0"
    for args in (["stats", "--url", url], ["check", "--url", url]):
        proc = run_cli(*args)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0, said
        assert f"malformed store URL '{url}'" in said and "redis://" in said, said
        assert "Traceback" not in said
    proc = run_cli("run", "--", sys.executable, "-c", ACTIVE, env={"COMPILECACHE_URL": url})
    assert proc.returncode == 0 and "session False" in proc.stdout, proc.stderr
    assert f"not enabled: malformed store URL '{url}'" in proc.stderr


def test_an_unknown_scheme_names_the_nearest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"unknown store URL scheme 'redsi' \(did you mean redis"):
        open_store("redsi://127.0.0.1:6391/0")
    with pytest.raises(ConfigError, match=r"unknown store URL scheme 'xyzzy'; known:"):
        open_store("xyzzy://somewhere")


def test_without_fsspec_an_unknown_scheme_is_said_by_check_and_run(tmp_path: Path) -> None:
    env = without_fsspec(tmp_path)
    proc = run_cli("check", "--url", "redsi://127.0.0.1:6391/0", env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "Traceback" not in said and "No module named" not in said, said
    assert "unknown store URL scheme 'redsi' (did you mean redis://?)" in proc.stdout
    run_env = {**env, "COMPILECACHE_URL": "redsi://127.0.0.1:6391/0"}
    proc = run_cli("run", "--", sys.executable, "-c", ACTIVE, env=run_env)
    assert proc.returncode == 0 and "session False" in proc.stdout, proc.stderr
    assert "No module named" not in proc.stderr, proc.stderr
    assert "not enabled: unknown store URL scheme 'redsi' (did you mean redis://?)" in proc.stderr
    # A protocol only fsspec has says what it needs.
    proc = run_cli("check", "--url", "sftp://host/path", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "fsspec's protocols need fsspec installed" in proc.stdout


@pytest.mark.parametrize(
    "url",
    [
        "az://c/p?account_name=acct&sas_tokn=pw1SECRET",
        "s3://b/p?region=eu-west-1&secert=pw1SECRET",
        "redis://cache:6379/0?timeout=2s&passwrd=pw1SECRET",
        "gs://b/p?tokn=pw1SECRET",
    ],
)
def test_a_mistyped_credential_option_is_masked(url: str) -> None:
    shown = redact(url)
    assert "pw1SECRET" not in shown and f"={MASK}" in shown, shown
    # Options known to be harmless keep their values.
    for kept in ("account_name=acct", "region=eu-west-1", "timeout=2s"):
        if kept in url:
            assert kept in shown


def test_every_option_a_backend_documents_is_shown_unless_it_is_a_credential() -> None:
    from compilecache.stores import frame, objectstore, redis

    known = (
        redis.OPTIONS
        | redis.CLIENT_OPTIONS
        | objectstore.OPTIONS
        | frame.DIRECTORY_OPTIONS
        | WRAPPER_PARAMS
    )
    for name in known:
        assert is_shown_option(name) != is_credential_option(name), name
    for name in ("account_name", "endpoint_url", "region", "profile", "use_emulator", "anon"):
        assert is_shown_option(name), name


def test_check_never_prints_a_mistyped_credential(tmp_path: Path) -> None:
    url = "az://c/p?account_name=acct&sas_tokn=pw1SECRET"
    for args in (["check", "--url", url], ["check", "--json", "--url", url]):
        proc = run_cli(*args)
        said = proc.stdout + proc.stderr
        assert "pw1SECRET" not in said, said
        assert "sas_tokn=***" in said and "account_name=acct" in said, said
