"""``compilecache report --html``: a self-contained page whose charts render in Chromium.

The screenshot test needs the Debian ``chromium`` package (``apt-get install -y chromium``); it
is skipped, saying so, where no Chromium binary is installed.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from compilecache import history, report
from compilecache.cache import Cache
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.stats import Stats
from compilecache.stores.local import LocalStore

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
    store.add_stats(cache.stats.snapshot())
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
    assert main(["report", "--html", str(out), "--url", str(tmp_path / "empty")]) == 0
    page = out.read_text()
    assert "No data yet." in page and "No misses recorded yet." in page


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
        pytest.skip("no Chromium: install the Debian package with `apt-get install -y chromium`")
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
