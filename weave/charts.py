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

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 24, 28
# Colour-blind-safe palette (Okabe-Ito), in series order.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
NAMED = {"delivered": "#009E73", "failed": "#D55E00", "permanent": "#D55E00", "temporary": "#E69F00"}


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


def _frame(title: str, times: Sequence[datetime], top: float, unit: str, points: int, body: SafeString) -> SafeString:
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
        for index in sorted({0, len(times) // 2, len(times) - 1}):
            x = LEFT + plot_w * (index + 0.5) / len(times)
            ticks.append((f"{x:.1f}", HEIGHT - 8, times[index].strftime("%H:%M UTC")))
    tick_html = format_html_join("", '<text x="{}" y="{}" text-anchor="middle">{}</text>', ticks)
    empty = (
        ""
        if points
        else format_html('<text x="{}" y="{}" text-anchor="middle">no data yet</text>', WIDTH / 2, HEIGHT / 2)
    )
    return format_html(
        '<svg class="weave-chart" role="img" aria-label="{}" data-points="{}" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">'
        '<title>{}</title><text x="{}" y="14" class="title">{} ({})</text>{}{}{}{}</svg>',
        title,
        points,
        WIDTH,
        HEIGHT,
        title,
        LEFT,
        title,
        unit,
        grid_html,
        tick_html,
        body,
        empty,
    )


def _legend(names: Sequence[str]) -> SafeString:
    items = format_html_join(
        "",
        '<span class="weave-legend-item"><span class="swatch" style="background:{}"></span>{}</span>',
        ((_colour(name, i), name) for i, name in enumerate(names)),
    )
    return format_html('<div class="weave-legend">{}</div>', items)


def bar_chart(
    times: Sequence[datetime], series: Mapping[str, Sequence[float]], *, title: str, unit: str = "per minute"
) -> SafeString:
    """Stacked bars, one per time bucket, one colour per series."""
    names = list(series)
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
            rects.append((f"{x:.1f}", f"{y:.1f}", f"{width * 0.8:.1f}", f"{h:.1f}", _colour(name, index), tip))
            base += value
    body = format_html_join("", '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>', rects)
    points = sum(1 for t in totals if t)
    return format_html("{}{}", _frame(title, times, top, unit, points, body), _legend(names))


def line_chart(
    times: Sequence[datetime], series: Mapping[str, Sequence[float | None]], *, title: str, unit: str
) -> SafeString:
    """One polyline per series; None leaves a gap (no samples in that bucket)."""
    names = list(series)
    values = [v for n in names for v in series[n] if v is not None]
    top = _nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(times))
    parts = []
    for index, name in enumerate(names):
        segment: list[str] = []
        segments = [segment]
        dots = []
        for i, value in enumerate(series[name]):
            if value is None:
                segment = []
                segments.append(segment)
                continue
            x, y = LEFT + step * (i + 0.5), TOP + plot_h - plot_h * value / top
            segment.append(f"{x:.1f},{y:.1f}")
            dots.append((f"{x:.1f}", f"{y:.1f}", _colour(name, index), f"{times[i]:%H:%M} UTC {name}: {value:.0f}"))
        colour = _colour(name, index)
        for seg in segments:
            if len(seg) > 1:
                parts.append(
                    format_html(
                        '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>', " ".join(seg), colour
                    )
                )
        parts.append(format_html_join("", '<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{}</title></circle>', dots))
    body = mark_safe("".join(parts))  # every part above was built by format_html
    return format_html("{}{}", _frame(title, times, top, unit, len(values), body), _legend(names))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str = "none") -> SafeString:
    """A plain admin-styled table; `empty` is shown when there are no rows."""
    if not rows:
        return format_html('<p class="weave-empty">{}</p>', empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows)
    )
    return format_html('<table class="weave-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)


def stats(items: Sequence[tuple[str, object]]) -> SafeString:
    """Big figures with a label under each (the dashboard's headline numbers)."""
    cells = format_html_join(
        "",
        '<div class="weave-stat"><div class="value">{}</div><div class="label">{}</div></div>',
        ((value, label) for label, value in items),
    )
    return format_html('<div class="weave-stats">{}</div>', cells)


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
