"""Reports on a store: ``stats --prometheus`` and ``report --html FILE``.

The HTML report is one self-contained file: inline CSS and SVG charts, no script, no fonts, no
network access, so it can be mailed, attached to a CI run or opened on an air-gapped cluster.
It is built from what the store keeps: persistent counters (per framework, function and level),
the run and miss history, and a scan of the entries (sizes, ages).
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from compilecache import explain, history
from compilecache.config import format_size
from compilecache.stores.base import Store

# Chart colours (the screenshot test looks for them).
SAVED_COLOUR = "#1f77b4"
HIT_RATE_COLOUR = "#2ca02c"
COMPILE_COLOUR = "#ff7f0e"
SIZE_COLOUR = "#9467bd"
AGE_COLOUR = "#d62728"
MAX_RUNS = 40
MAX_FUNCTIONS = 15
MAX_MISSES = 50

# -- Prometheus --------------------------------------------------------------------------------

# counter -> (metric suffix, help); counters are *_total, seconds and bytes say so in the name.
_PROM_COUNTERS = {
    "hits": ("hits_total", "Cache hits."),
    "misses": ("misses_total", "Cache misses."),
    "writes": ("writes_total", "Entries written."),
    "errors": ("errors_total", "Storage errors (each also counted as a miss or a failed write)."),
    "corrupt": ("corrupt_total", "Corrupt entries found and removed."),
    "skipped": ("skipped_total", "Compiles not stored (read-only, too fast, host callbacks)."),
    "bytes_read": ("read_bytes_total", "Bytes read on hits."),
    "bytes_written": ("written_bytes_total", "Bytes written."),
    "compile_time_s": ("compile_seconds_total", "Compile time of the compiles that missed."),
    "compile_time_saved_s": ("compile_saved_seconds_total", "Compile time saved by hits."),
    "load_time_s": ("load_seconds_total", "Time spent loading hits."),
    "waited": ("waited_total", "Hits received by waiting for another process's compile."),
    "wait_time_s": ("wait_seconds_total", "Time spent waiting for other processes' compiles."),
    "lease_takeovers": ("lease_takeovers_total", "Compiles taken over from an expired lease."),
    "wait_timeouts": ("wait_timeouts_total", "Waits that gave up and compiled anyway."),
    "unwritten_skips": (
        "unwritten_skips_total",
        "Compiles run without a lease because the last one wrote nothing.",
    ),
}
_PROM_FUNCTION = ("hits", "misses", "writes", "compile_time_s", "compile_time_saved_s")
_PROM_LEVEL = {
    "hits": "hits_total",
    "misses": "misses_total",
    "errors": "errors_total",
    "skipped": "skipped_total",
    "writes": "writes_total",
    "write_errors": "write_errors_total",
    "backfills": "backfills_total",
    "timeouts": "timeouts_total",
    "outages": "outages_total",
    "recoveries": "recoveries_total",
}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def prometheus(report: Mapping[str, Any], prefix: str = "compilecache") -> str:
    """The ``stats --json`` report in the Prometheus text exposition format (version 0.0.4), for
    the node exporter's textfile collector or a Pushgateway."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        if not samples:
            return
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

    store = _label(str(report.get("url", "")))
    frameworks: Mapping[str, Mapping[str, float]] = report.get("frameworks", {})
    functions: Mapping[str, Mapping[str, Any]] = report.get("functions", {})
    levels: Mapping[str, Mapping[str, float]] = report.get("levels", {})
    for counter, (suffix, help_text) in _PROM_COUNTERS.items():
        family(
            f"{prefix}_{suffix}",
            "counter",
            help_text,
            [(f'{{store="{store}"}}', float(report.get(counter, 0.0)))],
        )
        family(
            f"{prefix}_framework_{suffix}",
            "counter",
            f"{help_text} Per framework.",
            [
                (f'{{store="{store}",framework="{_label(fw)}"}}', float(values[counter]))
                for fw, values in sorted(frameworks.items())
                if counter in values
            ],
        )
    for counter in _PROM_FUNCTION:
        suffix, help_text = _PROM_COUNTERS[counter]
        family(
            f"{prefix}_function_{suffix}",
            "counter",
            f"{help_text} Per function.",
            [
                (
                    f'{{store="{store}",framework="{_label(str(fn.get("framework", "")))}",'
                    f'function="{_label(str(fn.get("name", "")))}"}}',
                    float(fn.get(counter, 0.0)),
                )
                for _, fn in sorted(functions.items())
            ],
        )
    for counter, suffix in _PROM_LEVEL.items():
        family(
            f"{prefix}_level_{suffix}",
            "counter",
            f"Per store level: {counter.replace('_', ' ')}.",
            [
                (f'{{store="{store}",level="{_label(url)}"}}', float(values[counter]))
                for url, values in sorted(levels.items())
                if counter in values
            ],
        )
    family(
        f"{prefix}_entries",
        "gauge",
        "Entries in the store.",
        [(f'{{store="{store}"}}', float(report.get("entries", 0)))]
        + [
            (f'{{store="{store}",framework="{_label(fw)}"}}', float(values.get("entries", 0)))
            for fw, values in sorted(frameworks.items())
            if "entries" in values
        ],
    )
    family(
        f"{prefix}_size_bytes",
        "gauge",
        "Bytes held by the store's entries.",
        [(f'{{store="{store}"}}', float(report.get("size_bytes", 0)))],
    )
    family(
        f"{prefix}_hit_ratio",
        "gauge",
        "Hits / (hits + misses) since the counters were last zeroed.",
        [(f'{{store="{store}"}}', float(report.get("hit_rate", 0.0)))],
    )
    return "\n".join(lines) + "\n"


# -- SVG charts --------------------------------------------------------------------------------


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value:.1f}s" if abs(value) < 100 else f"{value:.0f}s"
    if unit == "B":
        return format_size(value)
    return f"{value:g}"


def bar_chart(
    points: Sequence[tuple[str, float]],
    *,
    colour: str,
    unit: str = "",
    width: int = 520,
    height: int = 220,
    top: float | None = None,
) -> str:
    """Vertical bars with a baseline, a maximum label and one label per bar (when they fit)."""
    if not points:
        return '<p class="empty">No data yet.</p>'
    left, bottom, pad = 56, 36, 10
    plot_w, plot_h = width - left - pad, height - bottom - pad
    highest = top if top is not None else max((v for _, v in points), default=0.0)
    highest = highest if highest > 0 else 1.0
    step = plot_w / len(points)
    bar_w = max(step * 0.7, 2.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f'<line x1="{left}" y1="{pad + plot_h}" x2="{width - pad}" y2="{pad + plot_h}" '
        'stroke="#888"/>',
        f'<text x="{left - 6}" y="{pad + 10}" text-anchor="end" class="axis">'
        f"{_esc(_fmt(highest, unit))}</text>",
        f'<text x="{left - 6}" y="{pad + plot_h}" text-anchor="end" class="axis">0</text>',
    ]
    every = max(1, math.ceil(len(points) / 8))
    for i, (label, value) in enumerate(points):
        h = max(0.0, min(value, highest)) / highest * plot_h
        x = left + i * step + (step - bar_w) / 2
        y = pad + plot_h - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
            f'fill="{colour}"><title>{_esc(label)}: {_esc(_fmt(value, unit))}</title></rect>'
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - 14}" text-anchor="middle" '
                f'class="axis">{_esc(label[:12])}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def hbar_chart(
    rows: Sequence[tuple[str, float]],
    *,
    colour: str,
    unit: str = "",
    width: int = 520,
    row_height: int = 22,
) -> str:
    """Horizontal bars, one row per label (top functions)."""
    if not rows:
        return '<p class="empty">No data yet.</p>'
    label_w, pad = 200, 8
    plot_w = width - label_w - 80
    highest = max((v for _, v in rows), default=0.0) or 1.0
    height = len(rows) * row_height + 2 * pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">'
    ]
    for i, (label, value) in enumerate(rows):
        y = pad + i * row_height
        w = max(value, 0.0) / highest * plot_w
        parts.append(
            f'<text x="{label_w - 6}" y="{y + row_height * 0.7:.1f}" text-anchor="end" '
            f'class="label">{_esc(label[:32])}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{max(w, 1.0):.1f}" '
            f'height="{row_height - 6}" fill="{colour}"><title>{_esc(label)}</title></rect>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + row_height * 0.7:.1f}" class="axis">'
            f"{_esc(_fmt(value, unit))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


# -- the HTML report ---------------------------------------------------------------------------

_AGE_BUCKETS = (
    ("< 1h", 3600.0),
    ("< 1d", 86400.0),
    ("< 7d", 7 * 86400.0),
    ("< 30d", 30 * 86400.0),
    ("older", math.inf),
)

_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 16px; margin: 0 0 8px 0; }
.sub { color: #666; font-size: 13px; margin-bottom: 18px; }
.grid { display: flex; flex-wrap: wrap; gap: 18px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 12px 14px; }
.numbers { display: flex; gap: 28px; flex-wrap: wrap; margin-bottom: 18px; }
.numbers div { font-size: 13px; color: #666; }
.numbers b { display: block; font-size: 22px; color: #222; }
.axis { font-size: 10px; fill: #555; }
.label { font-size: 11px; fill: #222; }
.empty { color: #999; font-style: italic; }
table { border-collapse: collapse; font-size: 12px; width: 100%; }
td, th { border-bottom: 1px solid #eee; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f6f6f6; }
"""


def _runs(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run records grouped by run id (the processes of one ``compilecache run``), oldest first."""
    grouped: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: float(r.get("time", 0.0) or 0.0)):
        run = str(r.get("run", "")) or f"{r.get('host')}:{r.get('pid')}"
        into = grouped.setdefault(
            run,
            {"run": run, "time": 0.0, "hits": 0.0, "misses": 0.0, "compile_time_saved_s": 0.0},
        )
        into["time"] = max(float(into["time"]), float(r.get("time", 0.0) or 0.0))
        for name in ("hits", "misses", "compile_time_saved_s"):
            into[name] = float(into[name]) + float(r.get(name, 0.0) or 0.0)
    return sorted(grouped.values(), key=lambda r: float(r["time"]))[-MAX_RUNS:]


def _when(t: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(t)) if t else "?"


def build_html(store: Store, *, now: float | None = None) -> str:
    """The report as one HTML document."""
    from compilecache.cli import stats_report

    now = time.time() if now is None else now
    report = stats_report(store)
    runs = _runs(history.read(store, history.RUN))
    misses = history.read(store, history.MISS, MAX_MISSES)
    infos = list(store.scan())

    saved = [(_when(float(r["time"])), float(r["compile_time_saved_s"])) for r in runs]
    rates = []
    for r in runs:
        lookups = float(r["hits"]) + float(r["misses"])
        rates.append((_when(float(r["time"])), float(r["hits"]) / lookups if lookups else 0.0))

    functions = sorted(
        report.get("functions", {}).values(),
        key=lambda f: -float(f.get("compile_time_s", 0.0)),
    )[:MAX_FUNCTIONS]
    top = [
        (f"{f['name']} ({f['framework']})", float(f.get("compile_time_s", 0.0)))
        for f in functions
        if float(f.get("compile_time_s", 0.0)) > 0
    ]
    if not top:  # no per-function counters yet: the stored entries' compile times
        per_name: dict[str, float] = {}
        for info in infos:
            label = f"{info.name or info.key} ({info.framework})"
            per_name[label] = per_name.get(label, 0.0) + info.compile_time_s
        top = sorted(per_name.items(), key=lambda kv: -kv[1])[:MAX_FUNCTIONS]

    sizes: dict[str, float] = {}
    for info in infos:
        sizes[info.framework or "other"] = sizes.get(info.framework or "other", 0.0) + info.size
    ages = dict.fromkeys((label for label, _ in _AGE_BUCKETS), 0.0)
    for info in infos:
        age = now - info.created
        label = next(label for label, limit in _AGE_BUCKETS if age < limit)
        ages[label] += 1

    numbers = [
        ("entries", str(report["entries"])),
        ("size", format_size(report["size_bytes"])),
        ("hits", str(report["hits"])),
        ("misses", str(report["misses"])),
        ("hit rate", f"{report['hit_rate']:.0%}"),
        ("compile time saved", f"{report['compile_time_saved_s']:.1f} s"),
    ]
    miss_rows = "".join(
        "<tr>"
        f"<td>{_esc(_when(float(m.get('time', 0.0) or 0.0)))}</td>"
        f"<td>{_esc(m.get('framework', ''))}</td>"
        f"<td>{_esc(m.get('name', ''))}</td>"
        f"<td>{_esc(explain.describe_record(m).split(': ', 1)[-1])}</td>"
        f"<td>{_esc(_fmt(float(m.get('compile_time_s', 0.0) or 0.0), 's'))}</td>"
        "</tr>"
        for m in misses
    )
    misses_html = (
        "<table><tr><th>when</th><th>framework</th><th>function</th><th>why it missed</th>"
        f"<th>compile</th></tr>{miss_rows}</table>"
        if misses
        else '<p class="empty">No misses recorded yet.</p>'
    )

    def card(title: str, body: str) -> str:
        return f'<div class="card"><h2>{_esc(title)}</h2>{body}</div>'

    charts = [
        card(
            "Compile time saved per run",
            bar_chart(saved, colour=SAVED_COLOUR, unit="s"),
        ),
        card("Hit rate per run", bar_chart(rates, colour=HIT_RATE_COLOUR, unit="%", top=1.0)),
        card(
            "Top functions by compile time",
            hbar_chart(top, colour=COMPILE_COLOUR, unit="s"),
        ),
        card(
            "Store size by framework",
            bar_chart(sorted(sizes.items()), colour=SIZE_COLOUR, unit="B"),
        ),
        card(
            "Entry age (since written)",
            bar_chart(list(ages.items()) if infos else [], colour=AGE_COLOUR),
        ),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>compilecache report: {_esc(report['url'])}</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>compilecache report</h1>"
        f'<div class="sub">{_esc(report["url"])}, generated '
        f"{_esc(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now)))}</div>"
        '<div class="numbers">'
        + "".join(f"<div><b>{_esc(v)}</b>{_esc(k)}</div>" for k, v in numbers)
        + "</div>"
        + f'<div class="grid">{"".join(charts)}</div>'
        + f'<div class="card" style="margin-top:18px"><h2>Recent misses</h2>{misses_html}</div>'
        + "</body></html>\n"
    )
