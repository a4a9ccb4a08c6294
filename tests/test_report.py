"""``compilecache report --html``: a self-contained page whose charts render in Chromium.

The screenshot test needs the Debian ``chromium`` package (``apt-get install -y chromium``); it
is skipped, saying so, where no Chromium binary is installed.
"""

from __future__ import annotations

import ast
import errno
import html
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.runtime import history
from compilecache.runtime.cache import Cache
from compilecache.stats import Stats
from compilecache.stores.local import LocalStore
from compilecache.tools import report
from tests.conftest import clean_env, missing_server

CHART_COLOURS = {
    "saved per run": report.SAVED_COLOUR,
    "hit rate": report.HIT_RATE_COLOUR,
    "top functions": report.COMPILE_COLOUR,
    "size": report.SIZE_COLOUR,
    "age": report.AGE_COLOUR,
}


@pytest.fixture
def filled_store(tmp_path: Path) -> Path:
    """A local store with entries of several ages, counters, runs and explained misses."""
    root = tmp_path / "store"
    store = LocalStore(root)
    cache = Cache(store, stats=Stats())
    now = time.time()
    for i in range(12):
        framework = "jax" if i % 3 else "torch"
        name = f"jit_fn{i % 5}" if framework == "jax" else f"Model.forward:{i}"
        header = EntryHeader(
            framework, f"{framework}/{name}-{i}", name=name, compile_time_s=0.5 + i
        )
        assert cache.save(header, bytes(range(256)) * (20 + 10 * i), compress=False)
        cache.stats.add(f"fn.{framework}.{name}.compile_time_s", 0.5 + i)
    for i in (1, 2, 4, 5, 7):
        assert cache.load("jax", f"jax/jit_fn{i % 5}-{i}") is not None
    store.counters.add(cache.stats.snapshot())
    # Entries written at different times: backdate some rows.
    with store._transaction() as conn:
        for i, age in enumerate((0, 2 * 3600, 3 * 86400, 10 * 86400, 60 * 86400)):
            conn.execute("UPDATE entries SET created = ? WHERE key LIKE ?", (now - age, f"%-{i}"))
    for r in range(8):
        history.append(
            store,
            history.RUN,
            {
                "time": now - (8 - r) * 3600,
                "run": f"run-{r}",
                "hits": r * 3,
                "misses": 8 - r,
                "compile_time_saved_s": 4.0 * r,
            },
        )
    for i, summary in enumerate(
        (
            "jit_fn1: XLA flags changed: --xla_cpu_enable_fast_math=true added",
            "jit_fn2: new function: no earlier entry of that name",
        )
    ):
        history.append(
            store,
            history.MISS,
            {
                "time": now - i,
                "framework": "jax",
                "name": summary.split(":")[0],
                "key": f"jax/x-{i}",
                "summary": summary,
                "stored": i == 0,
                "reason": "" if i == 0 else "it uses host callbacks <&>",
                "compile_time_s": 1.5,
            },
        )
    store.close()
    return root


def test_report_is_self_contained(
    filled_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--url", str(filled_store)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    # No fetch of anything: the only URL is the SVG namespace, which is never loaded.
    urls = set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert not re.search(r"\b(?:src|href)\s*=", page)
    for colour in CHART_COLOURS.values():
        assert f'fill="{colour}"' in page
    assert "XLA flags changed: --xla_cpu_enable_fast_math=true added" in page
    assert "host callbacks &lt;&amp;&gt;" in page  # escaped
    assert page.count("<svg") == 5


def test_report_on_an_empty_store(tmp_path: Path) -> None:
    out = tmp_path / "empty.html"
    LocalStore(tmp_path / "empty").close()  # reading commands never create a store (issue 11)
    assert main(["report", "--html", str(out), "--url", str(tmp_path / "empty")]) == 0
    page = out.read_text()
    assert "No data yet." in page and "No misses recorded yet." in page


def test_report_imports_no_cli() -> None:
    """The statistics record lives below both: ``report`` no longer imports ``cli`` (a loop)."""
    source = Path(report.__file__).read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "compilecache.cli" not in imported
    assert "compilecache.tools.store_stats" in imported


# -- readable in a browser (issue 11, item 12) ------------------------------------------------


def test_durations_in_the_unit_that_fits() -> None:
    assert report.duration(0) == "0 s"
    assert report.duration(0.0004) == "0.4 ms"
    assert report.duration(0.035) == "35 ms"
    assert report.duration(0.0999) == "100 ms"
    assert report.duration(1.2) == "1.2 s"
    assert report.duration(250) == "250 s"
    assert report.duration(750) == "12.5 min"
    assert report.duration(4 * 3600 * 3) == "12.0 h"


def _page(store_root: Path, tmp_path: Path) -> str:
    out = tmp_path / "page.html"
    assert main(["report", "--html", str(out), "--url", str(store_root)]) == 0
    return out.read_text()


def _miss(name: str, summary: str, when: float, compile_time_s: float) -> dict[str, object]:
    return {
        "time": when,
        "framework": "jax",
        "name": name,
        "key": f"jax/{name}-{when}",
        "summary": f"{name}: {summary}",
        "stored": True,
        "compile_time_s": compile_time_s,
    }


def test_small_compile_times_are_shown_in_ms(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalStore(root)
    cache = Cache(store, stats=Stats())
    for name, seconds in (("jit_tiny", 0.035), ("jit_big", 1.2)):
        header = EntryHeader("jax", f"jax/{name}-1", name=name, compile_time_s=seconds)
        assert cache.save(header, b"payload" * 50, compress=False)
        cache.stats.add(f"fn.jax.{name}.compile_time_s", seconds)
    store.counters.add(cache.stats.snapshot())
    now = time.time()
    store.history.add(history.MISS, _miss("jit_tiny", "new function", now - 5, 0.035))
    store.history.add(history.RUN, {"time": now - 5, "run": "r1", "hits": 0, "misses": 2})
    store.close()

    page = _page(root, tmp_path)
    assert "35 ms" in page  # the miss's compile time and the top-functions bar
    assert "1.2 s" in page
    assert "0.0s" not in page and "0.0 s" not in page  # the old rendering of both
    rows = re.findall(r'<tr class="miss">.*?</tr>', page)
    assert len(rows) == 1 and '<td class="compile">35 ms</td>' in rows[0]


def _cells(row: str) -> dict[str, str]:
    cells = re.findall(r"<td(?: class=\"(\w+)\")?>(.*?)</td>", row)
    plain = [text for cls, text in cells if not cls]
    named = {cls: text for cls, text in cells if cls}
    return {"framework": plain[0], "name": plain[1], "why": plain[2], **named}


def test_repeated_misses_are_grouped_with_count_first_and_last(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalStore(root)
    start = time.time() - 3600
    flags = "XLA flags changed: --xla_cpu_enable_fast_math=true added"
    # Recorded the way the runtime records them: one history record per miss, oldest first.
    for i in range(6):  # the same function, the same reason, six runs in a row
        store.history.add(history.MISS, _miss("jit_step", flags, start + 60 * i, 0.02))
    for i in range(2):  # the same function for another reason
        store.history.add(history.MISS, _miss("jit_step", "new function", start + 30 * i, 0.5))
    store.history.add(history.MISS, _miss("jit_loss", flags, start + 10, 2.0))
    store.close()

    page = _page(root, tmp_path)
    rows = [_cells(row) for row in re.findall(r'<tr class="miss">.*?</tr>', page)]
    assert len(rows) == 3, rows  # not nine
    by = {(r["name"], r["why"]): r for r in rows}
    step = by[("jit_step", html.escape(flags))]
    assert step["count"] == "6"
    assert step["first"] == report._when(start)
    assert step["last"] == report._when(start + 300)
    assert step["compile"] == "120 ms"  # 6 x 20 ms
    new = by[("jit_step", "new function")]
    assert (new["count"], new["first"], new["last"]) == (
        "2",
        report._when(start),
        report._when(start + 30),
    )
    assert by[("jit_loss", html.escape(flags))]["count"] == "1"
    assert rows[0]["name"] == "jit_step" and rows[0]["count"] == "6"  # most recent group first


def _axis_labels(page: str, title: str) -> list[str]:
    """The per-bar axis labels of the chart under ``title``, their lines joined by ``|``."""
    chart = page.split(f"<h2>{title}</h2>", 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'<text[^>]*class="axis">((?:<tspan[^>]*>[^<]*</tspan>)+)</text>', chart)
    return ["|".join(re.findall(r">([^<]*)</tspan>", label)) for label in labels]


def test_runs_in_the_same_minute_get_distinct_labels(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalStore(root)
    minute = (time.time() // 60 - 5) * 60  # the start of a minute, five minutes ago
    for run, offset, hits in (("job-a", 5.0, 3), ("job-b", 41.0, 7)):
        store.history.add(
            history.RUN,
            {
                "time": minute + offset,
                "run": run,
                "hits": hits,
                "misses": 1,
                "compile_time_saved_s": 1.5,
            },
        )
    store.close()

    page = _page(root, tmp_path)
    for chart in ("Compile time saved per run", "Hit rate per run"):
        labels = _axis_labels(page, chart)
        assert len(labels) == 2 and labels[0] != labels[1], labels
        assert [label.split("|")[0] for label in labels] == ["#1", "#2"]
    if time.localtime(minute)[:3] == time.localtime()[:3]:  # seconds on the report's day
        labels = _axis_labels(page, "Hit rate per run")
        assert labels[0].endswith(time.strftime("%H:%M:05", time.localtime(minute))), labels
        assert labels[1].endswith(time.strftime("%H:%M:41", time.localtime(minute))), labels
    assert "run #2 (job-b)" in page  # the bar's tooltip names the run


# -- writing the file (issue 11, item 10) -----------------------------------------------------


def _report_cli(store: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compilecache", "report", "--html", str(out), "--url", str(store)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compilecache: error: cannot write"), lines
    for word in words:
        assert word in lines[0], lines[0]


def test_report_to_a_missing_directory_or_a_directory(filled_store: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "report.html"
    _one_line_error(_report_cli(filled_store, missing), "does not exist", str(missing.parent))
    assert not (tmp_path / "no").exists()

    directory = tmp_path / "reports"
    directory.mkdir()
    _one_line_error(_report_cli(filled_store, directory), "is a directory")
    assert list(directory.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _fill(directory: Path) -> Path:
    """Write into ``directory`` until the filesystem is full."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def test_report_on_a_full_disk_keeps_the_old_file(
    filled_store: Path, small_disk: Path, tmp_path: Path
) -> None:
    good = small_disk / "report.html"
    good.write_text("<!DOCTYPE html>\n<p>yesterday's report</p>\n")
    before = good.read_bytes()
    filler = _fill(small_disk)

    _one_line_error(_report_cli(filled_store, good), "No space left on device", "left as it was")
    assert good.read_bytes() == before  # not truncated, not replaced by a partial page
    fresh = small_disk / "new.html"
    _one_line_error(_report_cli(filled_store, fresh), "No space left on device", "no file")
    assert not fresh.exists()  # no 0-byte file
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report.html"]  # no temp

    filler.unlink()
    proc = _report_cli(filled_store, good)
    assert proc.returncode == 0, proc.stderr
    page = good.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert page.count("<svg") == 5


def test_report_replaces_a_file_with_its_permissions(filled_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("old")
    out.chmod(0o640)
    assert main(["report", "--html", str(out), "--url", str(filled_store)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    new = tmp_path / "new.html"
    assert main(["report", "--html", str(new), "--url", str(filled_store)]) == 0
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0o600


# -- Chromium ---------------------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw pixel rows): 8-bit RGB/RGBA, non-interlaced PNGs."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour_type in (2, 6), (depth, colour_type)
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = bytearray(stride * height)
    previous = bytearray(stride)
    pos = 0
    for y in range(height):
        kind = raw[pos]
        row = bytearray(raw[pos + 1 : pos + 1 + stride])
        pos += 1 + stride
        if kind == 1:
            for i in range(channels, stride):
                row[i] = (row[i] + row[i - channels]) & 0xFF
        elif kind == 2:
            row = bytearray((a + b) & 0xFF for a, b in zip(row, previous, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                row[i] = (row[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = row[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                row[i] = (row[i] + pred) & 0xFF
        out[y * stride : (y + 1) * stride] = row
        previous = row
    return width, height, channels, bytes(out)


def _rgb(colour: str) -> tuple[int, int, int]:
    value = int(colour.lstrip("#"), 16)
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


@pytest.mark.slow
def test_charts_render_in_headless_chromium(filled_store: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        missing_server(
            "chromium", "no Chromium: install the Debian package with `apt-get install -y chromium`"
        )
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--url", str(filled_store)]) == 0
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), f"no screenshot (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    width, height, channels, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (1200, 1600)
    counts: dict[tuple[int, int, int], int] = {}
    for i in range(0, len(pixels), channels):
        rgb = (pixels[i], pixels[i + 1], pixels[i + 2])
        counts[rgb] = counts.get(rgb, 0) + 1
    white = counts.get((255, 255, 255), 0)
    assert white < width * height * 0.97, "the page rendered (almost) blank"
    assert len(counts) > 20, "too few colours for text and charts"
    for chart, colour in CHART_COLOURS.items():
        found = counts.get(_rgb(colour), 0)
        assert found >= 150, f"the {chart} chart ({colour}) is not on screen: {found} pixels"
