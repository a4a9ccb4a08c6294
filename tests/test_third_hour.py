"""A user's third hour: every count true and said one way by every command, every message
about the store or the program true.

Each test plays the user in fresh processes: the ``compilecache`` command and small JAX programs
under ``compilecache run``, on real stores.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests import servers
from tests.conftest import JAX_PROGRAM, run_cli
from tests.servers import RedisServer, namespace

cc = run_cli
redis_server = servers.redis_server


def run_jax(url: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``compilecache run -- python jax_program.py plain`` on ``url``."""
    proc = cc(
        "run",
        "--",
        sys.executable,
        JAX_PROGRAM,
        "plain",
        env={"COMPILECACHE_URL": url, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def program_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.fixture(scope="module")
def jax_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local store after a cold and a warm run of the JAX program: its entries, and the job's
    lookup list that ``compilecache run`` records beside them."""
    root = tmp_path_factory.mktemp("jax-store") / "store"
    run_jax(str(root))
    run_jax(str(root))
    return root


def copy_of(store: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(store, target)
    return target


# -- one count of entries --------------------------------------------------------------------


def test_every_command_counts_entries_one_way_and_lookup_lists_apart(
    jax_store: Path, tmp_path: Path
) -> None:
    stats = json.loads(cc("stats", "--json", "--url", str(jax_store)).stdout)
    n, lists = stats["entries"], stats["job_lookup_lists"]
    assert n > 0 and lists == 1, stats
    held = f"{n} entries and 1 job lookup list"
    moved = f"{n} of {n} entries and 1 of 1 job lookup list"

    text = cc("stats", "--url", str(jax_store)).stdout
    assert re.search(rf"^entries +{n}$", text, re.M) and "job lookup lists      1" in text
    assert f"{n} entries," in cc("ls", "--url", str(jax_store)).stdout
    assert f"{held}," in cc("ls", "--all", "--url", str(jax_store)).stdout
    assert f"{held} checked, 0 corrupt" in cc("verify", "--url", str(jax_store)).stdout
    verify = json.loads(cc("verify", "--json", "--url", str(jax_store)).stdout)
    assert verify["checked"] == n and verify["job_lookup_lists_checked"] == 1

    bundle = tmp_path / "b.ccb"
    assert moved in cc("export", str(bundle), "--url", str(jax_store)).stdout
    imported = cc("import", str(bundle), "--url", str(tmp_path / "imported"))
    assert moved in imported.stdout, imported.stderr
    again = json.loads(cc("import", str(bundle), "--json", "--url", str(tmp_path / "s")).stdout)
    assert again["total"] == again["transferred"] == n, again
    assert again["job_lookup_lists"] == {"total": 1, "transferred": 1, "already_present": 0}
    warm = cc("warm", "--from", str(jax_store), "--url", str(tmp_path / "warmed"))
    assert moved in warm.stdout, warm.stderr

    prune = cc("prune", "--dry-run", "--max-size", "1", "--url", str(jax_store))
    assert f"in {held};" in prune.stdout
    dry = json.loads(
        cc("prune", "--dry-run", "--max-size", "1", "--json", "--url", str(jax_store)).stdout
    )
    assert dry["planned"] == dry["entries_before"] == n and dry["job_lookup_lists_planned"] == 1

    copy = copy_of(jax_store, tmp_path)
    refused = cc("clear", "--url", str(copy))
    assert f"clear would remove {held} from" in refused.stderr
    assert f"removed {held}" in cc("clear", "--yes", "--url", str(copy)).stdout

    page = tmp_path / "report.html"
    assert cc("report", "--html", str(page), "--url", str(jax_store)).returncode == 0
    assert "manifest" not in page.read_text()


# -- counts are integers -----------------------------------------------------------------------


def _non_integer_counts(data: Any, path: str = "") -> list[str]:
    """Every count in ``data`` (a name not ending in ``_s``, nor a rate) that is a float."""
    found = []
    if isinstance(data, dict):
        for name, value in data.items():
            found += _non_integer_counts(value, f"{path}.{name}")
    elif isinstance(data, float):
        name = path.rsplit(".", 1)[-1]
        if not name.endswith("_s") and name != "hit_rate":
            found.append(path)
    return found


def test_counts_are_integers_in_stats_json_and_session_stats(jax_store: Path) -> None:
    stats = json.loads(cc("stats", "--json", "--url", str(jax_store)).stdout)
    assert stats["functions"], stats
    assert _non_integer_counts(stats) == []
    assert isinstance(stats["frameworks"]["jax"]["read_ahead_hits"], int)
    session = program_json(run_jax(str(jax_store)))["stats"]
    assert session["hits"] > 0 and _non_integer_counts(session) == []
    assert isinstance(session["compile_time_saved_s"], float)


# -- stats says who signed the store's entries, and what this process would do ------------------


def test_stats_says_the_stores_signatures_and_this_processs_settings_apart(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    key = tmp_path / "writer.pem"
    made = cc("keygen", "--out", str(key))
    assert made.returncode == 0, made.stderr
    public = next(w for w in made.stdout.split() if w.startswith("ed25519:"))
    store = tmp_path / "signed"
    run_jax(str(store), env={"COMPILECACHE_SIGNING_KEY_FILE": str(key)})

    text = cc("stats", "--url", str(store)).stdout  # a reader with no signing settings
    entries = json.loads(cc("stats", "--json", "--url", str(store)).stdout)["entries"]
    # stats reads the 20 newest entries' signatures (the program's executables and their traces)
    looked = min(entries, 20)
    said = f"all {entries}" if entries <= 20 else f"the 20 newest of {entries}"
    assert f"signatures            store: {said} entries signed by {public}" in text, text
    assert "this process: nothing signed or checked" in text
    signers = json.loads(cc("stats", "--json", "--url", str(store)).stdout)["signers"]
    assert signers == {public: looked}

    unsigned = tmp_path / "unsigned"
    run_jax(str(unsigned))
    plain = cc("stats", "--url", str(unsigned)).stdout
    assert f"store: {said} entries unsigned\n" in plain, plain


# -- XLA's entries: one framework name everywhere, in its own words ------------------------------


def test_xla_entries_are_listed_by_their_framework_and_described_in_xlas_words(
    tmp_path: Path,
) -> None:
    # Tiers: the first level gets the job's (empty, on a CPU) list of XLA's autotune files.
    local = tmp_path / "local"
    run_jax(f"{local},{tmp_path / 'shared'}")
    stats = cc("stats", "--url", str(local)).stdout
    line = next(line for line in stats.splitlines() if "xla internal" in line)
    assert "xla internal        1 entry (" in line, line
    assert "XLA's autotune files" in line and "kernel binaries" not in line, line
    assert "`compilecache ls --framework xla`" in line
    listed = cc("ls", "--framework", "xla", "--url", str(local))
    assert listed.returncode == 0, listed.stderr
    last = listed.stdout.splitlines()[-1]
    assert "xla/autotune-index/" in listed.stdout, listed.stdout
    assert last.startswith("1 entry, ") and "lookup" not in last, last
    bundle = tmp_path / "xla.ccb"
    exported = cc("export", str(bundle), "--framework", "xla", "--url", str(local))
    assert exported.returncode == 0 and "1 of 1 entry" in exported.stdout, exported.stderr


# -- explain: the footer promises what `explain --all` lists ---------------------------------------

TORCH_STEP = ("-m", "compilecache.workloads.torch_step", "--model", "tiny", "--fresh-dirs")


@pytest.fixture(scope="module")
def torch_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local store after one cold run of a small torch.compile step (new torch directories)."""
    pytest.importorskip("torch")
    store = tmp_path_factory.mktemp("torch-store") / "store"
    proc = cc("run", "--", sys.executable, *TORCH_STEP, env={"COMPILECACHE_URL": str(store)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return store


def test_explain_footer_names_what_explain_all_lists_and_probes_are_not_functions(
    torch_store: Path,
) -> None:
    store = torch_store
    text = cc("explain", "--url", str(store)).stdout
    footer = text.splitlines()[-1]
    match = re.search(r"and (\d+) internal entries \(([^)]*)\) missed too: `([^`]*)` lists", footer)
    assert match, text
    count, kinds, command = int(match[1]), match[2], match[3].split()
    listed = json.loads(cc(*command, "--json", "--url", str(store)).stdout)
    internal = [r for r in listed if r.get("internal")]
    assert len(internal) == count, (footer, len(internal))
    assert kinds == "probe answers", footer  # what they are: no kernels among them
    assert all(r["key"].startswith("torch/probe/") for r in internal)
    assert not any("new function" in r["summary"] for r in internal), internal
    functions = [r for r in listed if not r.get("internal")]
    assert any("new function" in r["summary"] for r in functions), functions


# -- show: no empty fields, and an unsigned entry says so ----------------------------------------


def test_show_omits_empty_fields_and_says_an_entry_is_unsigned(jax_store: Path) -> None:
    shown = cc("show", "jit_step", "--url", str(jax_store))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "  signed_by: unsigned" in lines, shown.stdout
    # A line that ends in ':' heads a nested block: it is followed by a deeper line.
    for n, line in enumerate(lines):
        assert not line.endswith(": "), line
        if line.endswith(":"):
            depth = len(line) - len(line.lstrip())
            following = lines[n + 1] if n + 1 < len(lines) else ""
            assert len(following) - len(following.lstrip()) > depth, (line, following)
    assert "XLA flags" not in shown.stdout and "custom_hook" not in shown.stdout
    raw = json.loads(cc("show", "jit_step", "--json", "--url", str(jax_store)).stdout)
    assert raw["entry"]["extra"]["readable"]["custom_hook"] == ""  # --json keeps every field


# -- the demo's table says whose hits and misses it shows ---------------------------------------


def test_the_demo_table_says_its_hits_and_misses_are_the_warm_runs(tmp_path: Path) -> None:
    proc = cc(
        "demo", "--layers", "1", "--url", str(tmp_path / "store"),
        env={"COMPILECACHE_FRAMEWORKS": "jax"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| workload"))
    assert "| warm hits |" in header and "| warm misses |" in header, header
    assert " hits " not in header.replace("warm hits", "")
    assert "warm hits and warm misses: the warm run's lookups" in proc.stdout


# -- the docs: what is tested, present tense, what a wheel user has --------------------------------

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_names_only_the_tested_pythons_and_installs_torchs_build_first() -> None:
    versions = (ROOT / "docs" / "versions.md").read_text()
    claimed = set(re.findall(r"Python (3\.\d+)\+?", README))
    assert claimed and "3.10+" not in README, claimed
    for version in claimed:
        assert f"Python {version}" in versions, version
    install = README.index("pip install './[torch]'")
    before = README[:install]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in before
    assert "several GB" in before[before.rindex("For torch") :]
    # What the summary counts, as the code counts it: a write is not always a miss's.
    summary = README[README.index("The summary line counts") :][:900]
    assert "writes can exceed\nmisses" in summary and "never negative" in summary, summary


def test_the_docs_speak_in_the_present_and_how_it_works_lists_every_workload() -> None:
    docs = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
    for name, phrase in (
        ("frameworks.md", "went on serving"),
        ("frameworks.md", "build compared"),
        ("fleet.md", "before it recorded"),
    ):
        assert phrase not in docs[name], (name, phrase)
    workloads = ROOT / "src" / "compilecache" / "workloads"
    layout = docs["how-it-works.md"]
    for module in sorted(workloads.glob("*.py")):
        if module.stem != "__init__":
            assert module.stem in layout, module.stem


def test_messages_cite_what_a_wheel_user_has() -> None:
    """No message of the package points at a file of the repository (docs/...): a wheel holds
    the README (its metadata), and the messages name its sections, which exist."""
    import ast

    cited = []
    for path in (ROOT / "src" / "compilecache").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and re.search(r"docs/[\w-]+\.md", node.value)
            ):
                cited.append((path.name, node.value))
    assert cited == []
    from compilecache import unsigned_warning

    text = unsigned_warning.message(["redis://cache:6379/0"])
    section = re.search(r'the README, section "([^"]+)"', text)
    assert section and f"\n## {section[1]}\n" in README, text


# -- time saved and the function table ---------------------------------------------------------------


def test_a_load_slower_than_its_compile_saves_nothing_never_negative(tmp_path: Path) -> None:
    from compilecache.entry import EntryHeader
    from compilecache.run_summary import Summary
    from compilecache.runtime.cache import Cache
    from compilecache.stats import typed
    from compilecache.stores.local import LocalStore

    store = LocalStore(tmp_path / "store")
    header = EntryHeader(framework="jax", key="jax/jit_quick-1", name="jit_quick")
    assert Cache(store).save(replace(header, compile_time_s=0.0), b"x" * 4096)
    reader = Cache(store)
    assert reader.load("jax", "jax/jit_quick-1") is not None
    counted = reader.stats.snapshot()
    assert counted["hits"] == 1 and counted["compile_time_saved_s"] == 0.0
    assert counted["fn.jax.jit_quick.compile_time_saved_s"] == 0.0
    # Whatever was added up (a wait longer than the compile), no reader sees a negative.
    assert typed({"compile_time_saved_s": -0.0043})["compile_time_saved_s"] == 0.0
    assert "-0.0s" not in Summary.of({"compile_time_saved_s": -0.0043}).line()
    store.close()


def test_torchs_function_table_includes_the_dynamo_packages_compile_time(
    torch_store: Path,
) -> None:
    entries = json.loads(cc("ls", "--json", "--url", str(torch_store)).stdout)
    (package,) = [e for e in entries if e["key"].startswith("torch/dynamo/")]
    assert package["compile_time_s"] > 0
    functions = json.loads(cc("stats", "--json", "--url", str(torch_store)).stdout)["functions"]
    row = functions[f"torch/{package['name']}"]
    # The row's compile time counts every compile of that function, its Dynamo package's too.
    same_name = sum(e["compile_time_s"] for e in entries if e["name"] == package["name"])
    assert row["compile_time_s"] == pytest.approx(same_name, rel=1e-6), (row, same_name)


def test_a_levels_seconds_are_not_rounded_to_whole_numbers(tmp_path: Path) -> None:
    url = f"{tmp_path / 'local'},{tmp_path / 'shared'}"
    run_jax(url)
    shutil.rmtree(tmp_path / "local")  # a fresh host: served by the shared level
    run_jax(url)
    text = cc("stats", "--url", url).stdout
    levels = [line for line in text.splitlines() if line.startswith("level ")]
    assert levels, text
    saved = [re.search(r"saved_s (\S+)", line) for line in levels]
    shown = [m[1] for m in saved if m]
    assert shown and all(re.fullmatch(r"\d+\.\d\ds", v) for v in shown), levels


# -- check: creates nothing, shows what applies, durations as written, one name per store ---------


def test_check_on_a_fresh_home_creates_nothing(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "xdg-cache-of-a-fresh-home"
    home.mkdir()
    proc = cc("check", env={"HOME": str(home), "XDG_CACHE_HOME": str(cache)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not cache.exists() and list(home.iterdir()) == [], list(home.rglob("*"))


def test_check_of_a_redis_store_shows_what_applies_in_the_units_it_is_written_in(
    redis_server: RedisServer,
) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/0/{namespace()}?ttl=7d"
    check = cc("check", "--url", url)
    assert check.returncode == 0, check.stdout + check.stderr
    settings = check.stdout.split("store:")[0]
    assert "max_size" not in settings  # it bounds a local directory: there is none
    assert re.search(r"^  lease_ttl +30s ", settings, re.M), settings
    assert re.search(r"^  wait_timeout +30m ", settings, re.M), settings
    assert re.search(r"^  min_compile_time +0s ", settings, re.M), settings
    assert "1800.0" not in check.stdout and "30.0 " not in check.stdout
    # The store has one name: the one `stats` gives it.
    stats = cc("stats", "--url", url).stdout
    name = re.search(r"^store +(\S+)$", stats, re.M)
    assert name, stats
    assert f"\n  {name[1]}: reachable" in check.stdout, (name[1], check.stdout)
    json_levels = json.loads(cc("check", "--json", "--url", url).stdout)["levels"]
    assert [level["url"] for level in json_levels] == [name[1]]
    # A local store still shows its bound.
    assert "max_size" in cc("check", "--url", f"{url.split('?')[0]},/tmp/x").stdout


def test_redis_names_only_documented_options_when_it_refuses_one() -> None:
    stores = (ROOT / "docs" / "stores.md").read_text()
    documented = set(re.findall(r"`([a-z_]+)(?:=[^`]*)?`", stores))
    proc = cc("check", "--url", "redis://127.0.0.1:1/0?max_size=1GB")
    said = re.search(r"redis:// knows: ([^;]+);", proc.stdout)
    assert said, proc.stdout
    own = said[1].split(", ")
    assert "max_size" not in own and set(own) <= documented, set(own) - documented


# -- errors: one line, in words, counted the same way -------------------------------------------------


def test_an_unknown_command_and_a_misplaced_json_are_said_in_words() -> None:
    for argv in (["stat"], ["--url", "/tmp/x", "stat"]):
        proc = cc(*argv)
        assert proc.returncode == 2
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("compilecache: error: unknown command 'stat' (did you mean stats?)")
        assert "command_name" not in proc.stderr and "invalid choice" not in proc.stderr
    before, after = cc("--json", "clear"), cc("clear", "--json")
    assert before.returncode == after.returncode == 2
    said = "compilecache clear: error: clear prints no data: --json is not taken"
    assert before.stderr.strip().splitlines()[-1] == said
    assert after.stderr.strip().splitlines()[-1] == said


def test_a_dead_redis_is_one_line_for_one_failure(tmp_path: Path) -> None:
    from tests.servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    for command in ("stats", "ls"):
        proc = cc(command, "--url", url)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("compilecache: error: redis://"), lines
    # Beside a local level, the dead one is left out: said once, not twice.
    local = tmp_path / "local"
    run_jax(str(local))
    tiers = cc("ls", "--url", f"{local},{url}")
    assert tiers.returncode == 0
    said = [line for line in tiers.stderr.splitlines() if line.startswith("compilecache")]
    assert len(said) == 1 and "left out of this command" in said[0], said


def test_a_level_in_back_off_names_its_cause_once() -> None:
    from compilecache.errors import LevelSkipped, StoreUnavailable
    from compilecache.stores import registry
    from tests.servers import free_port

    store = registry.open_store(f"redis://127.0.0.1:{free_port()}/0")
    (level,) = store.levels
    with pytest.raises(StoreUnavailable):  # the failure: warned, and the level backs off
        level.get("k")
    with pytest.raises(LevelSkipped) as skipped:
        level.put("k", b"v", None)  # type: ignore[arg-type]
    text = str(skipped.value)
    assert text.count("failed") == 1 and "get failed: " in text, text
    store.close()


def test_every_not_enabled_run_counts_one_error() -> None:
    program = [sys.executable, "-c", "import jax"]
    for url, said in (
        ("redis://127.0.0.1:1/0?bogus=1", "unknown option bogus"),  # a bad option
        ("redis://127.0.0.1:1/0?client=nosuch", "client: expected"),  # a bad value
    ):
        proc = cc("run", "--", *program, env={"COMPILECACHE_URL": url})
        assert f"compilecache: not enabled: {said}" in proc.stderr, proc.stderr
        assert ", 1 error, " in proc.stderr.splitlines()[-1], proc.stderr
