"""No output prints a credential a store URL carries: one redaction, every command, every scheme.

The unit tests hold the rule; the command tests run every command that shows a URL (its human
output, its ``--json``, the HTML report it writes, the run summary and warnings with debug
logging on) against a URL of each scheme that carries secrets, pointing at a server that is not
there (so errors and warnings, which quote URLs, are printed too), and look for each secret in
everything printed.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compilecache.redaction import MASK, RedactedStream, is_credential_option, redact
from tests.conftest import clean_env
from tests.servers import free_port


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://alice:pw1@cache:6379/0", "redis://alice:***@cache:6379/0"),
        ("rediss://:pw1@cache:6380/1?ttl=7d", "rediss://:***@cache:6380/1?ttl=7d"),
        ("redis://cache/0?password=pw1&timeout=2s", "redis://cache/0?password=***&timeout=2s"),
        (
            "s3://b/p?key=AKIA1&secret=pw1&token=t1&region=eu-west-1",
            "s3://b/p?key=***&secret=***&token=***&region=eu-west-1",
        ),
        (
            "az://c/p?account_name=acct&account_key=pw1&sas_token=sv%3D1%26sig%3Dpw2",
            "az://c/p?account_name=acct&account_key=***&sas_token=***",
        ),
        (
            "https://acct.blob/c?sv=2022&sig=pw1&se=2030",
            "https://acct.blob/c?sv=2022&sig=***&se=2030",
        ),
        ("gs://b/p?token=/keys/sa.json", "gs://b/p?token=***"),
        ("/home/me/.cache/compilecache", "/home/me/.cache/compilecache"),
        (
            "/tmp/l1,redis://u:pw1@h:1/0,s3://b?secret=pw2",
            "/tmp/l1,redis://u:***@h:1/0,s3://b?secret=***",
        ),
        ("cannot reach redis://u:pw1@h:1/0: refused", "cannot reach redis://u:***@h:1/0: refused"),
    ],
)
def test_redact_masks_passwords_and_credential_options(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_credential_option_names() -> None:
    for name in (
        "password",
        "secret",
        "key",
        "token",
        "account_key",
        "sas_token",
        "sig",
        "aws_secret_access_key",
        "ssl_password",
        "connection_string",
        "session_token",
    ):
        assert is_credential_option(name), name
    for name in (
        "timeout",
        "ttl",
        "region",
        "account_name",
        "endpoint_url",
        "prefix",
        "max_size",
        "ssl_keyfile",
        "username",
        "namespace",
    ):
        assert not is_credential_option(name), name


def test_a_redacted_stream_redacts_each_write(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    with open(path, "w") as f:
        stream = RedactedStream(f)  # type: ignore[arg-type]
        stream.write("store redis://:pw1@h/0\n")
        assert stream.writable()  # everything else passes through
    assert path.read_text() == f"store redis://:{MASK}@h/0\n"


SECRETS = ("pw1SECRET", "pw2SECRET", "AKIAKEYSECRET")


def _urls(tmp_path: Path) -> dict[str, str]:
    """A URL of each scheme, carrying the secrets, at a port where nothing listens."""
    port = free_port()
    down = f"http://127.0.0.1:{port}"
    fast = "timeout=1s&retries=0"
    return {
        "redis": f"redis://alice:pw1SECRET@127.0.0.1:{port}/0?timeout=0.5s",
        "redis-option": f"redis://127.0.0.1:{port}/0?password=pw1SECRET&timeout=0.5s",
        "s3": f"s3://bkt/p?key=AKIAKEYSECRET&secret=pw1SECRET&token=pw2SECRET&endpoint_url={down}&{fast}",
        "azure": (
            f"az://ctr/p?account_name=acct&account_key=pw1SECRET&sas_token=sv%3D1%26sig%3Dpw2SECRET"
            f"&endpoint_url={down}&{fast}"
        ),
        "tiers": f"{tmp_path / 'local'},redis://:pw2SECRET@127.0.0.1:{port}/0?timeout=0.5s",
    }


COMMANDS = [
    ["check"],
    ["check", "--json"],
    ["stats"],
    ["stats", "--json"],
    ["stats", "--prometheus"],
    ["ls"],
    ["ls", "--json"],
    ["show", "jit_f"],
    ["explain"],
    ["explain", "--json"],
    ["verify"],
    ["prune", "--max-size", "1GB", "--dry-run"],
    ["report", "--html", "REPORT"],
    ["doctor", "--", sys.executable, "-c", "pass"],
    ["run", "--", sys.executable, "-c", "from compilecache import session; session.active()"],
]


def test_no_command_prints_a_credential(tmp_path: Path) -> None:
    pytest.importorskip("obstore")
    jobs = []
    for scheme, url in _urls(tmp_path).items():
        for n, command in enumerate(COMMANDS):
            report = tmp_path / f"report-{scheme}-{n}.html"
            argv = [str(report) if a == "REPORT" else a for a in command]
            jobs.append((scheme, argv, url, report))

    def run(job: tuple[str, list[str], str, Path]) -> tuple[str, list[str], str]:
        scheme, argv, url, report = job
        env = clean_env({"COMPILECACHE_URL": url, "COMPILECACHE_LOG": "debug"})
        proc = subprocess.run(
            [sys.executable, "-m", "compilecache", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        printed = proc.stdout + proc.stderr
        if report.exists():
            printed += report.read_text()
        return scheme, argv, printed

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, jobs))
    leaks = [
        f"{scheme} {' '.join(argv[:2])}: {secret}"
        for scheme, argv, printed in results
        for secret in SECRETS
        if secret in printed
    ]
    assert leaks == []
    # A malformed credential (this Azure key is not base64) is a clear error, never a traceback.
    crashed = [f"{scheme} {' '.join(argv[:2])}" for scheme, argv, p in results if "Traceback" in p]
    assert crashed == []
    # The commands did print the URLs, redacted (not nothing at all).
    checked = [printed for _, argv, printed in results if argv == ["check"]]
    assert all(MASK in printed for printed in checked), checked
