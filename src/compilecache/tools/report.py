"""Reports on a store: ``stats --prometheus`` and ``report --html FILE``.

Both show the :class:`~compilecache.tools.store_stats.StatsReport` record that ``stats`` prints.
The HTML report is one self-contained file: inline CSS and SVG charts, no script, no fonts, no
network access, so it can be mailed, attached to a CI run or opened on an air-gapped cluster.
It is built from what the store keeps: persistent counters (per framework, function and level),
the run and miss history, and a scan of the entries (sizes, ages). It is written for people:
durations in the unit that fits (``35 ms``, ``1.2 s``), repeated misses of a function for one
reason grouped into one row, runs numbered so that two in the same minute can be told apart.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compilecache.config import format_size
from compilecache.entry import INTERNAL
from compilecache.frameworks import is_internal
from compilecache.redaction import redact
from compilecache.runtime import explain, history
from compilecache.runtime.transfer import is_job_list
from compilecache.stores.base import Store
from compilecache.tools.store_stats import StatsReport

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
# A counter of stats.COUNTERS missing here is exported under a derived name (see _prom_counter).
_PROM_COUNTERS = {
    "hits": ("hits_total", "Cache hits."),
    "misses": ("misses_total", "Cache misses."),
    "writes": ("writes_total", "Entries written."),
    "errors": ("errors_total", "Storage errors (each also counted as a miss or a failed write)."),
    "corrupt": ("corrupt_total", "Corrupt entries found and removed."),
    "foreign": ("foreign_total", "Entries signed with another key: misses, left in place."),
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


def _prom_counter(counter: str) -> tuple[str, str]:
    """(metric suffix, help) of a counter: from the table, else from its name (``x_time_s`` and
    ``x_s`` are in seconds, ``bytes_x`` in bytes)."""
    if counter in _PROM_COUNTERS:
        return _PROM_COUNTERS[counter]
    if counter.endswith("_s"):  # probe_time_s -> probe_seconds_total, like compile_time_s
        stem = counter.removesuffix("_s").removesuffix("_time")
        return f"{stem}_seconds_total", f"Seconds: {counter[:-2].replace('_', ' ')}."
    if counter.startswith("bytes_"):
        return f"{counter[6:]}_bytes_total", f"Bytes {counter[6:].replace('_', ' ')}."
    return f"{counter}_total", f"Count of {counter.replace('_', ' ')}."


def _label(value: str) -> str:
    return redact(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def prometheus(report: StatsReport, prefix: str = "compilecache") -> str:
    """The ``stats`` report in the Prometheus text exposition format (version 0.0.4), for the
    node exporter's textfile collector or a Pushgateway: every counter of ``stats.COUNTERS``."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        if not samples:
            return
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

    store = _label(report.url)
    frameworks = report.frameworks
    levels = report.levels
    for counter, total in report.counters.items():
        suffix, help_text = _prom_counter(counter)
        family(
            f"{prefix}_{suffix}",
            "counter",
            help_text,
            [(f'{{store="{store}"}}', float(total))],
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
    functions = [fn.to_json() for _, fn in sorted(report.functions.items())]
    for counter in _PROM_FUNCTION:
        suffix, help_text = _prom_counter(counter)
        family(
            f"{prefix}_function_{suffix}",
            "counter",
            f"{help_text} Per function.",
            [
                (
                    f'{{store="{store}",framework="{_label(fn["framework"])}",'
                    f'function="{_label(fn["name"])}"}}',
                    float(fn[counter]),
                )
                for fn in functions
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
        [(f'{{store="{store}"}}', float(report.entries))]
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
        [(f'{{store="{store}"}}', float(report.size_bytes))],
    )
    family(
        f"{prefix}_hit_ratio",
        "gauge",
        "Hits / (hits + misses) since the counters were last zeroed.",
        [(f'{{store="{store}"}}', report.hit_rate)],
    )
    return "\n".join(lines) + "\n"


# -- SVG charts --------------------------------------------------------------------------------


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def duration(seconds: float) -> str:
    """A duration for people, in the unit that fits: ``0 s``, ``0.4 ms``, ``35 ms``, ``1.2 s``,
    ``250 s``, ``12.5 min``, ``3.2 h`` (``0.0s`` would hide hundreds of small compiles)."""
    size = abs(seconds)
    if size == 0:
        return "0 s"
    if size < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if size < 1:
        return f"{seconds * 1000:.0f} ms"
    if size < 100:
        return f"{seconds:.1f} s"
    if size < 600:
        return f"{seconds:.0f} s"
    if size < 6 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return duration(value)
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
    titles: Sequence[str] | None = None,
) -> str:
    """Vertical bars with a baseline, a maximum label and one label per bar (when they fit).

    A label may hold two lines (``"#12\\n06:03:15"``); ``titles``, when given, are the bars'
    tooltips instead of their labels."""
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
        title = titles[i] if titles is not None else label.replace("\n", " ")
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
            f'fill="{colour}"><title>{_esc(title)}: {_esc(_fmt(value, unit))}</title></rect>'
        )
        if i % every == 0:
            lines = label.split("\n")[:2]
            first_y = height - 14 - 11 * (len(lines) - 1)
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{first_y}" text-anchor="middle" class="axis">'
                + "".join(
                    f'<tspan x="{x + bar_w / 2:.1f}" dy="{0 if n == 0 else 11}">'
                    f"{_esc(line[:12])}</tspan>"
                    for n, line in enumerate(lines)
                )
                + "</text>"
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


@dataclass(frozen=True)
class Run:
    """One run on the charts: the processes of one ``compilecache run`` (one run id), numbered
    from the oldest run the store remembers, so that two runs in the same minute differ."""

    number: int
    run: str
    time: float
    hits: float
    misses: float
    compile_time_saved_s: float

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def label(self, now: float) -> str:
        """Two axis lines: the number, then the time (with seconds on the report's day)."""
        same_day = time.localtime(self.time)[:3] == time.localtime(now)[:3]
        return f"#{self.number}\n{_when(self.time, '%H:%M:%S' if same_day else '%m-%d %H:%M')}"

    def title(self) -> str:
        return f"run #{self.number} ({self.run}), {_when(self.time, '%Y-%m-%d %H:%M:%S')}"


def _runs(records: Sequence[Mapping[str, Any]]) -> list[Run]:
    """Run records grouped by run id (the processes of one ``compilecache run``), oldest first:
    the newest :data:`MAX_RUNS`."""
    grouped: dict[str, dict[str, float]] = {}
    for r in sorted(records, key=lambda r: float(r.get("time", 0.0) or 0.0)):
        run = str(r.get("run", "")) or f"{r.get('host')}:{r.get('pid')}"
        into = grouped.setdefault(run, dict.fromkeys(("time", *_RUN_SUMS), 0.0))
        into["time"] = max(into["time"], float(r.get("time", 0.0) or 0.0))
        for name in _RUN_SUMS:
            into[name] += float(r.get(name, 0.0) or 0.0)
    ordered = sorted(grouped.items(), key=lambda kv: kv[1]["time"])
    runs = [Run(n, run, **values) for n, (run, values) in enumerate(ordered, start=1)]
    return runs[-MAX_RUNS:]


_RUN_SUMS = ("hits", "misses", "compile_time_saved_s")


@dataclass
class MissGroup:
    """The misses of one function for one reason: how many, the first and the last."""

    framework: str
    name: str
    why: str
    count: int
    first: float
    last: float
    compile_time_s: float  # in all of them


def group_misses(records: Sequence[Mapping[str, Any]]) -> list[MissGroup]:
    """Misses grouped by (framework, function, explanation), the most recent group first."""
    groups: dict[tuple[str, str, str], MissGroup] = {}
    for m in records:
        if m.get(INTERNAL):
            continue  # a framework's part (a kernel, a probe answer): not a function of the program
        framework, name = str(m.get("framework", "")), str(m.get("name", ""))
        why = explain.describe_record(m).split(": ", 1)[-1]
        t = float(m.get("time", 0.0) or 0.0)
        seconds = float(m.get("compile_time_s", 0.0) or 0.0)
        group = groups.get((framework, name, why))
        if group is None:
            groups[(framework, name, why)] = MissGroup(framework, name, why, 1, t, t, seconds)
            continue
        group.count += 1
        group.first, group.last = min(group.first, t), max(group.last, t)
        group.compile_time_s += seconds
    return sorted(groups.values(), key=lambda g: -g.last)


def _when(t: float, form: str = "%m-%d %H:%M:%S") -> str:
    return time.strftime(form, time.localtime(t)) if t else "?"


def _misses_table(groups: Sequence[MissGroup]) -> str:
    if not groups:
        return '<p class="empty">No misses recorded yet.</p>'
    rows = "".join(
        '<tr class="miss">'
        f"<td>{_esc(g.framework)}</td>"
        f"<td>{_esc(g.name)}</td>"
        f"<td>{_esc(g.why)}</td>"
        f'<td class="count">{g.count}</td>'
        f'<td class="first">{_esc(_when(g.first))}</td>'
        f'<td class="last">{_esc(_when(g.last))}</td>'
        f'<td class="compile">{_esc(duration(g.compile_time_s))}</td>'
        "</tr>"
        for g in groups[:MAX_MISSES]
    )
    more = (
        f'<p class="empty">... and {len(groups) - MAX_MISSES} more (compilecache explain '
        "lists them)</p>"
        if len(groups) > MAX_MISSES
        else ""
    )
    return (
        "<table><tr><th>framework</th><th>function</th><th>why it missed</th><th>misses</th>"
        "<th>first</th><th>last</th><th>compile time (all)</th></tr>"
        f"{rows}</table>{more}"
    )


def build_html(store: Store, *, now: float | None = None) -> str:
    """The report as one HTML document."""
    now = time.time() if now is None else now
    scanned = list(store.scan())
    counters = store.counters.read() if store.counters is not None else {}
    report = StatsReport.build(store.url, counters, scanned)
    # Entries only, as every command counts them: a job's lookup list is not a framework's.
    infos = [info for info in scanned if not is_job_list(info.key)]
    runs = _runs(history.read(store, history.RUN))
    # The whole capped log: a group's count and first time need every miss, not the newest 50.
    misses = group_misses(history.read(store, history.MISS))

    labels = [r.label(now) for r in runs]
    titles = [r.title() for r in runs]
    saved = [(label, r.compile_time_saved_s) for label, r in zip(labels, runs, strict=True)]
    rates = [(label, r.hit_rate) for label, r in zip(labels, runs, strict=True)]

    functions = sorted(report.functions.values(), key=lambda f: -f.compile_time_s)
    top = [
        (f"{f.name} ({f.framework})", f.compile_time_s)
        for f in functions[:MAX_FUNCTIONS]
        if f.compile_time_s > 0
    ]
    if not top:  # no per-function counters yet: the stored entries' compile times
        per_name: dict[str, float] = {}
        for info in infos:
            if is_internal(info.key):
                continue
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
        ("entries", str(report.entries)),
        ("size", format_size(report.size_bytes)),
        ("hits", str(report.hits)),
        ("misses", str(report.misses)),
        ("hit rate", f"{report.hit_rate:.0%}"),
        ("compile time saved", duration(report.compile_time_saved_s)),
    ]
    misses_html = _misses_table(misses)

    def card(title: str, body: str) -> str:
        return f'<div class="card"><h2>{_esc(title)}</h2>{body}</div>'

    charts = [
        card(
            "Compile time saved per run",
            bar_chart(saved, colour=SAVED_COLOUR, unit="s", titles=titles),
        ),
        card(
            "Hit rate per run",
            bar_chart(rates, colour=HIT_RATE_COLOUR, unit="%", top=1.0, titles=titles),
        ),
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
        f"<title>compilecache report: {_esc(redact(report.url))}</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>compilecache report</h1>"
        f'<div class="sub">{_esc(redact(report.url))}, generated '
        f"{_esc(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now)))}</div>"
        '<div class="numbers">'
        + "".join(f"<div><b>{_esc(v)}</b>{_esc(k)}</div>" for k, v in numbers)
        + "</div>"
        + f'<div class="grid">{"".join(charts)}</div>'
        + f'<div class="card" style="margin-top:18px"><h2>Recent misses</h2>{misses_html}</div>'
        + "</body></html>\n"
    )
