"""Host facts (``compilecache.host``): the CPU, versions, and whether an entry can run here.

The version comparison is one function used on both sides: entries record a framework's
``__version__`` (``2.15.0+cu132`` on torch's standard wheels) and the host check reads the
installed distribution's version (``2.15.0``). A bundle import in a fresh process whose torch
distribution says ``X`` (a forged ``dist-info`` first on ``sys.path``) admits an entry recorded
under ``X+cu132``, and still refuses one recorded under another release.
"""

from __future__ import annotations

import ast
import json
import os
import platform
from importlib import metadata
from pathlib import Path

import pytest

from compilecache import entry, host
from compilecache.entry import EntryHeader
from compilecache.host import HostCheck, same_version, split_version
from compilecache.runtime.cache import Cache
from compilecache.stores.local import LocalStore
from compilecache.tools import bundle
from tests.conftest import clean_env, run_python

PACKAGE = Path(host.__file__).resolve().parent


# -- the comparison ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "installed", "same"),
    [
        ("2.15.0+cu132", "2.15.0", True),  # the standard wheels: issue 11, item 15
        ("2.15.0", "2.15.0+cu132", True),
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.14.1+cu130", "2.14.1", True),
        (" 2.15.0+CU132 ", "2.15.0", True),
        ("2.13.0+cpu", "2.13.0+cu121", False),  # two labelled builds that differ
        ("2.14.1+cu130", "2.15.0", False),
        ("2.15.0", "2.14.1", False),
        ("0.4.30", "0.10.2", False),
        ("0.10.2", "0.10.2", True),
    ],
)
def test_same_version(recorded: str, installed: str, same: bool) -> None:
    assert same_version(recorded, installed) is same
    assert same_version(installed, recorded) is same  # one rule, whichever side is which


def test_split_version() -> None:
    assert split_version("2.15.0+cu132") == ("2.15.0", "cu132")
    assert split_version("2.15.0") == ("2.15.0", "")


def _torch_header(version: str, python: str | None = None) -> EntryHeader:
    return EntryHeader(
        framework="torch",
        key="torch/fx/fabc",
        name="f",
        versions={"torch": version, "python": python or platform.python_version()},
    )


def test_host_check_compares_torch_versions_with_the_one_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host, "installed_version", {"torch": "2.15.0"}.get)
    check = HostCheck()
    assert check.reason(_torch_header("2.15.0+cu132")) is None
    assert check.reason(_torch_header("2.15.0")) is None
    assert "torch 2.14.1+cu130" in (check.reason(_torch_header("2.14.1+cu130")) or "")
    assert "Python 2.7" in (check.reason(_torch_header("2.15.0+cu132", "2.7.18")) or "")
    monkeypatch.setattr(host, "installed_version", {}.get)
    assert "not installed" in (check.reason(_torch_header("2.15.0")) or "")


# -- end to end: a bundle imported where the distribution has no local label --------------------


def _forged_distribution(root: Path, version: str) -> Path:
    """A directory that, first on ``sys.path``, makes ``metadata.version('torch')`` say
    ``version`` (torch itself is never imported by an import of a bundle)."""
    info = root / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return root


@pytest.mark.skipif(
    not any(d.metadata["Name"] == "torch" for d in metadata.distributions()),
    reason="torch is not installed",
)
def test_a_bundle_of_entries_recorded_under_a_local_label_imports_where_the_wheel_has_none(
    tmp_path: Path,
) -> None:
    public, _ = split_version(metadata.version("torch"))
    source = LocalStore(tmp_path / "source")
    cache = Cache(source)
    python = platform.python_version()
    labelled = EntryHeader(
        framework="torch",
        key="torch/fx/flabelled",
        name="labelled",
        compile_time_s=2.0,
        versions={"torch": f"{public}+cu132", "git": "abc", "python": python},
        extra={"layer": "fx", "cpu": host.cpu_target()},
    )
    older = EntryHeader(
        framework="torch",
        key="torch/fx/folder",
        name="older",
        compile_time_s=2.0,
        versions={"torch": "1.0.0+cu132", "git": "abc", "python": python},
        extra={"layer": "fx"},
    )
    assert cache.save(labelled, b"graph one")
    assert cache.save(older, b"graph two")
    path = tmp_path / "torch.ccb"
    bundle.export_bundle(source, path)
    source.close()

    # The host: a fresh process whose torch distribution says the public version only.
    forged = _forged_distribution(tmp_path / "site", public)
    # compilecache itself from where this test imported it (PACKAGE's parent), after the forgery.
    env = clean_env({"PYTHONPATH": os.pathsep.join([str(forged), str(PACKAGE.parent)])})
    target = tmp_path / "target"
    proc = run_python(
        ["-m", "compilecache", "import", str(path), "--url", str(target), "--json"], env
    )
    report = json.loads(proc.stdout)
    assert report["transferred"] == 1, report
    assert [s["key"] for s in report["skipped"]] == ["torch/fx/folder"]
    assert f"this host has torch {public}" in report["skipped"][0]["reason"]
    store = LocalStore(target)
    try:
        data = store.get("torch/fx/flabelled")
        assert data is not None
        assert entry.decode(data).payload == b"graph one"
    finally:
        store.close()


# -- the CPU -------------------------------------------------------------------------------------

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R)
flags\t\t: fpu vme sse sse2 ssse3 avx avx2 fma bmi2 avx512f hypervisor

processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: fpu sse
"""
# An old Arm kernel lists Features after the processor blocks.
OLD_ARM = """Processor\t: ARMv7 Processor rev 4 (v7l)
processor\t: 0
BogoMIPS\t: 38.40

processor\t: 1
BogoMIPS\t: 38.40

Features\t: half thumb fastmult vfp edsp neon vfpv3 tls
CPU implementer\t: 0x41
"""


def test_cpuinfo_blocks_and_isa_features(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text(X86)
    first = host.read_cpuinfo(str(x86))
    assert first["model"] == "85" and "avx2" in first["flags"]
    assert host.isa_features(first) == [
        "avx",
        "avx2",
        "avx512f",
        "bmi2",
        "fma",
        "sse",
        "sse2",
        "ssse3",
    ]
    arm = tmp_path / "arm"
    arm.write_text(OLD_ARM)
    assert "Features" not in host.read_cpuinfo(str(arm))
    whole = host.read_cpuinfo(str(arm), whole=True)
    assert host.isa_features(whole) == sorted(
        ["half", "thumb", "fastmult", "vfp", "edsp", "neon", "vfpv3", "tls"]
    )
    assert host.read_cpuinfo(str(tmp_path / "missing")) == {}


def test_cpu_target_and_native_cpu_describe_this_host() -> None:
    target = host.cpu_target()
    assert target["machine"] == platform.machine()
    assert target["features"] == host.isa_features(host.read_cpuinfo(whole=True))
    digest, readable = host.native_cpu()
    assert len(digest) == 64 and readable.startswith(platform.machine())


# -- one place for host facts --------------------------------------------------------------------


def _compilecache_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_host_is_ground_and_imports_no_framework_at_module_level() -> None:
    imported = _compilecache_imports(PACKAGE / "host.py")
    ours = {m for m in imported if m.startswith("compilecache")}
    assert ours <= {"compilecache.errors", "compilecache.config", "compilecache.entry"}
    assert not imported & {"jax", "jaxlib", "torch", "numpy"}


def test_host_facts_are_written_once() -> None:
    """/proc/cpuinfo is read, and versions are gathered, in host.py only (issue 10)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "host.py":
            continue
        text = path.read_text()
        for needle in ("/proc/cpuinfo", "def _versions() ->", "def _private(", "def cpu_target("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []
