"""Charts drawn on the server as inline SVG: no script, no CDN, nothing fetched by the browser.

    bar_chart(times, {"delivered": [...], "failed": [...]}, title="Throughput per minute")
    line_chart(times, {"p50": [...], "p95": [...], "p99": [...]}, title="Latency", unit="ms")

Every chart carries `data-points` (how many non-empty values it drew), so a browser test can
tell an empty chart from one with data.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 16, 26, 30
# Colour-blind-safe palette (Okabe-Ito), in series order.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
NAMED = {"delivered": "#009E73", "failed": "#D55E00", "permanent": "#D55E00", "retrying": "#E69F00"}
# Colour is never the only difference: each series also has its own dash and marker (lines) or fill
# pattern (bars), drawn the same way in the legend.
DASHES = ("", "7 4", "2 3", "10 3 2 3")
MARKERS = ("circle", "square", "triangle", "diamond")
HATCHES = ("", "hatch", "dots", "cross")


def _colour(name: str, index: int) -> str:
    return NAMED.get(name, PALETTE[index % len(PALETTE)])


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10.0 ** len(str(int(value))) / 10
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * factor:
            return step * factor
    return float(value)


def _frame(
    title: str, times: Sequence[datetime], top: float, unit: str, points: int, body: SafeString, defs: SafeString
) -> SafeString:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    grid = []
    for i in range(5):
        y = TOP + plot_h * i / 4
        label = top * (4 - i) / 4
        grid.append((LEFT, f"{y:.1f}", WIDTH - RIGHT, f"{y:.1f}", LEFT - 4, f"{y + 4:.1f}", f"{label:g}"))
    grid_html = format_html_join(
        "",
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="grid"/><text x="{}" y="{}" text-anchor="end">{}</text>',
        grid,
    )
    ticks = []
    if times:
        last = len(times) - 1
        for index in sorted({0, len(times) // 2, last}):
            x = LEFT + plot_w * (index + 0.5) / len(times)
            # The end ticks are anchored inwards, so no label is cut at the chart's edge.
            anchor = "start" if index == 0 and last else ("end" if index == last and last else "middle")
            ticks.append((f"{x:.1f}", HEIGHT - 8, anchor, times[index].strftime("%H:%M UTC")))
    tick_html = format_html_join("", '<text x="{}" y="{}" text-anchor="{}">{}</text>', ticks)
    empty = (
        ""
        if points
        else format_html('<text x="{}" y="{}" text-anchor="middle">no data yet</text>', WIDTH / 2, HEIGHT / 2)
    )
    heading = title if unit in title else f"{title} ({unit})"
    return format_html(
        '<svg class="weave-chart" role="img" aria-label="{}" data-points="{}" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">'
        '<title>{}</title><defs>{}</defs><text x="{}" y="16" class="title">{}</text>{}{}{}{}</svg>',
        f"{heading}: chart; the data table follows",
        points,
        WIDTH,
        HEIGHT,
        heading,
        defs,
        LEFT,
        heading,
        grid_html,
        tick_html,
        body,
        empty,
    )


def _marker(kind: str, x: float, y: float, colour: str, size: float = 3.5) -> SafeString:
    if kind == "square":
        return format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
            f"{x - size:.1f}",
            f"{y - size:.1f}",
            f"{2 * size:.1f}",
            f"{2 * size:.1f}",
            colour,
        )
    if kind == "triangle":
        pts = f"{x:.1f},{y - size - 1:.1f} {x - size - 1:.1f},{y + size:.1f} {x + size + 1:.1f},{y + size:.1f}"
        return format_html('<polygon points="{}" fill="none" stroke="{}" stroke-width="1.5"/>', pts, colour)
    if kind == "diamond":
        r = size + 1
        pts = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r:.1f} {x - r:.1f},{y:.1f}"
        return format_html('<polygon points="{}" fill="{}"/>', pts, colour)
    return format_html('<circle cx="{}" cy="{}" r="{}" fill="{}"/>', f"{x:.1f}", f"{y:.1f}", size, colour)


def _pattern_defs(names: Sequence[str], uid: str) -> SafeString:
    defs = []
    for index, name in enumerate(names):
        hatch, colour = HATCHES[index % len(HATCHES)], _colour(name, index)
        pid = f"{uid}-p{index}"
        if hatch == "hatch":
            shape = mark_safe('<path d="M0,6 L6,0" stroke="#fff" stroke-width="1.6"/>')
        elif hatch == "dots":
            shape = mark_safe('<circle cx="3" cy="3" r="1.3" fill="#fff"/>')
        elif hatch == "cross":
            shape = mark_safe('<path d="M0,0 L6,6 M6,0 L0,6" stroke="#fff" stroke-width="1.2"/>')
        else:
            shape = mark_safe("")
        defs.append(
            format_html(
                '<pattern id="{}" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" '
                'fill="{}"/>{}</pattern>',
                pid,
                colour,
                shape,
            )
        )
    return mark_safe("".join(defs))  # each part built by format_html


def _uid(title: str) -> str:
    return "c" + "".join(ch for ch in title.lower() if ch.isalnum())[:24]


def _legend(names: Sequence[str], *, kind: str, uid: str) -> SafeString:
    items = []
    for i, name in enumerate(names):
        colour = _colour(name, i)
        if kind == "bar":
            # The chart's own patterns: inline SVGs of one page share their ids.
            sample = format_html(
                '<svg width="16" height="12" aria-hidden="true"><rect width="16" height="12" fill="url(#{}-p{})" '
                'stroke="{}"/></svg>',
                uid,
                i,
                colour,
            )
        else:
            sample = format_html(
                '<svg width="30" height="12" aria-hidden="true"><line x1="1" y1="6" x2="29" y2="6" stroke="{}" '
                'stroke-width="2" stroke-dasharray="{}"/>{}</svg>',
                colour,
                DASHES[i % len(DASHES)],
                _marker(MARKERS[i % len(MARKERS)], 15, 6, colour),
            )
        style = "bars" if kind == "bar" else f"{_dash_word(i)} line, {MARKERS[i % len(MARKERS)]} markers"
        items.append(
            format_html(
                '<span class="weave-legend-item">{}{} <span class="weave-muted">({})</span></span>', sample, name, style
            )
        )
    return format_html('<div class="weave-legend">{}</div>', mark_safe("".join(items)))


def _dash_word(index: int) -> str:
    return ("solid", "dashed", "dotted", "dash-dot")[index % len(DASHES)]


def data_table(
    times: Sequence[datetime], series: Mapping[str, Sequence[float | None]], *, title: str, unit: str
) -> SafeString:
    """The chart's figures as a table (the text alternative): one row per minute that has data."""
    names = list(series)
    rows = [
        (times[i].strftime("%H:%M UTC"), *("—" if series[n][i] is None else f"{series[n][i]:g}" for n in names))
        for i in range(len(times))
        if any(series[n][i] for n in names)
    ]
    if not rows:
        return format_html('<p class="weave-chart-data weave-muted">{}: no data yet.</p>', title)
    head = format_html_join("", '<th scope="col">{}</th>', ((n,) for n in names))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (
                format_html(
                    '<th scope="row">{}</th>{}', row[0], format_html_join("", "<td>{}</td>", ((c,) for c in row[1:]))
                ),
            )
            for row in rows
        ),
    )
    return format_html(
        '<details class="weave-chart-data"><summary>Data table: {} ({} minute{} with data)</summary>'
        '<table class="weave-data"><caption>{} ({})</caption><thead><tr><th scope="col">minute</th>{}</tr></thead>'
        "<tbody>{}</tbody></table></details>",
        title,
        len(rows),
        "" if len(rows) == 1 else "s",
        title,
        unit,
        head,
        body,
    )


def bar_chart(
    times: Sequence[datetime], series: Mapping[str, Sequence[float]], *, title: str, unit: str = "per minute"
) -> SafeString:
    """Stacked bars, one per time bucket, each series in its own colour and fill pattern."""
    names = list(series)
    uid = _uid(title)
    totals = [sum(series[n][i] for n in names) for i in range(len(times))]
    top = _nice_max(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = plot_w / max(1, len(times))
    rects = []
    for i in range(len(times)):
        base = 0.0
        for index, name in enumerate(names):
            value = series[name][i]
            if not value:
                continue
            h = plot_h * value / top
            y = TOP + plot_h - plot_h * base / top - h
            x = LEFT + i * width + width * 0.1
            tip = f"{times[i]:%H:%M} UTC {name}: {value:g}"
            rects.append((f"{x:.1f}", f"{y:.1f}", f"{width * 0.8:.1f}", f"{h:.1f}", f"{uid}-p{index}", tip))
            base += value
    body = format_html_join(
        "", '<rect x="{}" y="{}" width="{}" height="{}" fill="url(#{})"><title>{}</title></rect>', rects
    )
    points = sum(1 for t in totals if t)
    return format_html(
        "{}{}{}",
        _frame(title, times, top, unit, points, body, _pattern_defs(names, uid)),
        _legend(names, kind="bar", uid=uid),
        data_table(times, series, title=title, unit=unit),
    )


def line_chart(
    times: Sequence[datetime], series: Mapping[str, Sequence[float | None]], *, title: str, unit: str
) -> SafeString:
    """One polyline per series, each with its own dash and marker; None leaves a gap (no samples then)."""
    names = list(series)
    uid = _uid(title)
    values = [v for n in names for v in series[n] if v is not None]
    top = _nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(times))
    parts = []
    for index, name in enumerate(names):
        segment: list[str] = []
        segments = [segment]
        dots = []
        colour = _colour(name, index)
        for i, value in enumerate(series[name]):
            if value is None:
                segment = []
                segments.append(segment)
                continue
            x, y = LEFT + step * (i + 0.5), TOP + plot_h - plot_h * value / top
            segment.append(f"{x:.1f},{y:.1f}")
            # Later series get larger, hollow-or-shaped markers, so equal values stay visible on top of each other.
            dots.append(_marker(MARKERS[index % len(MARKERS)], x, y, colour, size=2.5 + index))
        for seg in segments:
            if len(seg) > 1:
                parts.append(
                    format_html(
                        '<polyline points="{}" fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}"/>',
                        " ".join(seg),
                        colour,
                        DASHES[index % len(DASHES)],
                    )
                )
        parts += dots
    body = mark_safe("".join(parts))  # every part above was built by format_html
    return format_html(
        "{}{}{}",
        _frame(title, times, top, unit, len(values), body, mark_safe("")),
        _legend(names, kind="line", uid=uid),
        data_table(times, series, title=title, unit=unit),
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str = "none") -> SafeString:
    """A plain admin-styled table; `empty` is shown when there are no rows.

    Each cell carries its column's name (`data-label`): on a phone the rows become cards that label
    every value, so no column (a verdict, a reason) is pushed off the screen.
    """
    if not rows:
        return format_html('<p class="weave-empty">{}</p>', empty)
    head = format_html_join("", '<th scope="col">{}</th>', ((h,) for h in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", '<td data-label="{}">{}</td>', zip(headers, row, strict=False)),) for row in rows),
    )
    return format_html('<table class="weave-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)


def stats(items: Sequence[tuple[str, object] | tuple[str, object, str | None]]) -> SafeString:
    """Big figures with a label under each (the dashboard's headline numbers).

    An item may carry a third element, the URL of the rows it counts: the whole tile becomes that link.
    """
    cells = []
    for item in items:
        label, value = item[0], item[1]
        href = item[2] if len(item) > 2 else None
        inner = format_html('<span class="value">{}</span><span class="label">{}</span>', value, label)
        if href:
            cells.append(format_html('<a class="weave-stat" href="{}">{}</a>', href, inner))
        else:
            cells.append(format_html('<div class="weave-stat">{}</div>', inner))
    return format_html('<div class="weave-stats">{}</div>', mark_safe("".join(cells)))


def when(at: datetime | None) -> str:
    """A time with seconds and its zone, the way the console shows every time."""
    return "—" if at is None else at.strftime("%Y-%m-%d %H:%M:%S %Z")


def age(seconds: float | None) -> str:
    """A duration for people: 42 s, 3 min 5 s, 2 h 4 min."""
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
