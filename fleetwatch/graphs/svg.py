"""Series drawn as an inline SVG string: plain logic, no I/O, no JavaScript.

:func:`chart` takes series as ``(name, [(value or None, timestamp), ...])`` (what Graphite's
render API answers) and returns one ``<svg>`` element: a frame, the largest and smallest
value at the top and bottom of the value axis, three times (UTC) under the time axis, one
polyline per unbroken run of values (a ``None`` is a gap, a lone point a dot), and a legend
of the series' names with their last value. A graph may also draw ``levels`` (a rule's
warning and critical: a dashed line across at each value) and ``bands`` (spans of time
shaded, each set in a lane of its own: the pages a backtest would have paged, and those
that really paged), each said in the legend, each span's words on hover.

The same input gives the same bytes (coordinates to two decimals, a fixed palette). Every
text that came from outside (a title, a series name) is shown with its control characters
visible (:func:`fleetwatch.display.escape`), cut to :data:`MAX_LABEL` characters and
XML-escaped, in text nodes or quoted attributes only: a hostile metric name is text and
nothing else. The SVG has no scripts, event attributes, links or external references, so it
can go into a page as it is, under a Content-Security-Policy that forbids inline script.
"""

from __future__ import annotations

import html
import math
import time
from typing import Iterable, Sequence

from fleetwatch.display import escape

#: Okabe & Ito's colour-blind-safe palette (black left out: it is the axes' colour)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#999999")
#: longest title or legend label shown (characters, before escaping)
MAX_LABEL = 80
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 20, 22     # margins around the plot (pixels)
LEGEND_ROW = 16
#: the colours of a graph's levels (warning, then critical) and of its sets of bands
LEVEL_COLOURS = ("#E69F00", "#D55E00")
BAND_COLOURS = ("#D55E00", "#0072B2", "#009E73")

Point = tuple  # (value or None, timestamp)


def text(value) -> str:
    """Outside text made inert: controls visible, at most MAX_LABEL characters, escaped."""
    shown = escape(str(value))
    if len(shown) > MAX_LABEL:
        shown = shown[:MAX_LABEL - 1] + "…"
    return html.escape(shown, quote=True)


def number(value: float) -> str:
    """A value label: 3 significant digits, k M G T (or m u) for large (small) values."""
    if value == 0:
        return "0"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    if abs(value) >= 0.01:
        return f"{value:.3g}"
    if abs(value) >= 1e-6:
        return f"{value * 1e3:.3g}m" if abs(value) >= 1e-3 else f"{value * 1e6:.3g}u"
    return f"{value:.2e}"


def with_unit(value: float, unit: str) -> str:
    """A value with its unit: ``34.5 %``, ``1.2 MB/s`` (the scale joins a byte unit),
    ``12 /s``; the bare number without one."""
    shown = number(value)
    if not unit:
        return shown
    if shown[-1:] in ("k", "M", "G", "T", "m", "u") and unit[:1] == "B":
        return f"{shown[:-1]} {shown[-1].upper() if shown[-1] == 'k' else shown[-1]}{unit}"
    return f"{shown} {unit}"


def clock(ts: float, span: float) -> str:
    """A time label, UTC: hours and minutes (with the date when the range passes two days)."""
    fmt = "%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M"
    return time.strftime(fmt, time.gmtime(ts))


def runs(points: Iterable[Point]) -> list[list[tuple[float, int]]]:
    """Unbroken runs of (value, ts), in time order; a None or non-finite value breaks a run."""
    out: list[list[tuple[float, int]]] = []
    current: list[tuple[float, int]] = []
    for value, ts in sorted(points, key=lambda p: p[1]):
        if value is None or not math.isfinite(value):
            if current:
                out.append(current)
            current = []
        else:
            current.append((value, ts))
    if current:
        out.append(current)
    return out


def _fmt(x: float) -> str:
    return f"{x:.2f}"


#: time slices of a graph that say their values on hover (a ``<title>`` each)
HOVER_SLICES = 60


def chart(series: Sequence[tuple[str, Sequence[Point]]], *, title: str = "",
          width: int = 600, height: int = 160, start: float | None = None,
          end: float | None = None, unit: str = "",
          levels: Sequence[tuple[str, float]] = (),
          bands: Sequence[tuple[str, Sequence[tuple[float, float, str]]]] = ()) -> str:
    """One ``<svg>`` drawing ``series`` over ``start`` .. ``end`` (default: the points'
    first and last times); ``height`` is the plot's, the legend adds a row per series.
    With a ``unit`` the value axis says it (``%``, ``B/s``) and starts at 0 for values
    that are never negative. Hovering a slice of the plot shows its time and each series'
    value there (a ``<title>``: no script).

    ``levels``: (label, value) each drawn as a dashed line across the plot, within the
    value axis (:data:`LEVEL_COLOURS`); ``bands``: (label, spans) sets of spans of time
    ``(start, end, words)`` each shaded in a lane of its own (the first set at the top;
    a span cut to the graph's range, at least 2 pixels wide), its words on hover."""
    width, height = max(int(width), LEFT + RIGHT + 40), max(int(height), TOP + BOTTOM + 40)
    drawn = [(name, runs(points)) for name, points in series]
    values = [v for _, rs in drawn for run in rs for v, _ in run]
    levels = [(name, float(v)) for name, v in levels if math.isfinite(v)]
    stamps = [ts for _, points in series for _, ts in points]
    lo_t = start if start is not None else min(stamps, default=0)
    hi_t = end if end is not None else max(stamps, default=0)
    rows = len(series) + len(levels) + len(bands)
    total = height + LEGEND_ROW * rows + (4 if rows else 0)
    x0, x1, y0, y1 = LEFT, width - RIGHT, TOP, height - BOTTOM
    label = text(title) if title else "graph"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total}" '
           f'viewBox="0 0 {width} {total}" role="img" aria-label="{label}" '
           f'font-family="sans-serif" font-size="11">',
           f'<title>{label}</title>']
    if title:
        out.append(f'<text x="{x0}" y="13" font-weight="bold">{text(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" '
               f'fill="none" stroke="#444" stroke-width="1"/>')
    if not values:
        out.append(f'<text x="{(x0 + x1) / 2:.2f}" y="{(y0 + y1) / 2:.2f}" '
                   f'text-anchor="middle" fill="#666">no data</text>')
    else:
        lo = min(values + [v for _, v in levels])
        hi = max(values + [v for _, v in levels])
        if unit and lo >= 0:
            lo = 0.0                    # a quantity with a unit: its axis from zero
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        span_t = hi_t - lo_t

        def x(ts: float) -> float:
            return (x0 + x1) / 2 if span_t <= 0 else x0 + (ts - lo_t) / span_t * (x1 - x0)

        def y(v: float) -> float:
            return y1 - (v - lo) / (hi - lo) * (y1 - y0)
        out.append(f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">'
                   f'{text(with_unit(hi, unit))}</text>')
        out.append(f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">'
                   f'{text(with_unit(lo, unit))}</text>')
        for i, (_, rs) in enumerate(drawn):
            colour = PALETTE[i % len(PALETTE)]
            for run in rs:
                if len(run) == 1:
                    v, ts = run[0]
                    out.append(f'<circle cx="{_fmt(x(ts))}" cy="{_fmt(y(v))}" r="2" '
                               f'fill="{colour}"/>')
                    continue
                pts = " ".join(f"{_fmt(x(ts))},{_fmt(y(v))}" for v, ts in run)
                out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                           f'stroke-width="1.5"/>')
        for i, (name, value) in enumerate(levels):
            at = _fmt(y(value))
            out.append(f'<line x1="{x0}" y1="{at}" x2="{x1}" y2="{at}" '
                       f'stroke="{LEVEL_COLOURS[i % len(LEVEL_COLOURS)]}" stroke-width="1.5" '
                       f'stroke-dasharray="6 3"><title>{text(name)}</title></line>')
        out += _hover(drawn, [name for name, _ in series], lo_t, hi_t, x, y0, y1, unit)
    out += _bands(bands, lo_t, hi_t, x0, x1, y0, y1)
    if stamps or start is not None:
        span_t = hi_t - lo_t
        for ts, anchor, at in ((lo_t, "start", x0), ((lo_t + hi_t) / 2, "middle",
                                                      (x0 + x1) / 2), (hi_t, "end", x1)):
            zone = " UTC" if anchor == "end" else ""
            out.append(f'<text x="{_fmt(at)}" y="{y1 + 15}" text-anchor="{anchor}">'
                       f'{clock(ts, span_t)}{zone}</text>')
    for i, (name, rs) in enumerate(drawn):
        row = height + 4 + LEGEND_ROW * i
        colour = PALETTE[i % len(PALETTE)]
        last = f" (last {text(with_unit(rs[-1][-1][0], unit))})" if rs else " (no data)"
        out.append(f'<rect x="{x0}" y="{row}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x0 + 14}" y="{row + 9}">{text(name)}{last}</text>')
    for i, (name, _) in enumerate(levels):
        row = height + 4 + LEGEND_ROW * (len(series) + i)
        colour = LEVEL_COLOURS[i % len(LEVEL_COLOURS)]
        out.append(f'<line x1="{x0}" y1="{row + 5}" x2="{x0 + 10}" y2="{row + 5}" '
                   f'stroke="{colour}" stroke-width="2" stroke-dasharray="3 2"/>')
        out.append(f'<text x="{x0 + 14}" y="{row + 9}">{text(name)}</text>')
    for i, (name, spans) in enumerate(bands):
        row = height + 4 + LEGEND_ROW * (len(series) + len(levels) + i)
        colour = BAND_COLOURS[i % len(BAND_COLOURS)]
        out.append(f'<rect x="{x0}" y="{row}" width="10" height="10" fill="{colour}" '
                   f'fill-opacity="0.35"/>')
        out.append(f'<text x="{x0 + 14}" y="{row + 9}">{text(name)} ({len(spans)})</text>')
    out.append("</svg>")
    return "\n".join(out)


def _bands(bands, lo_t: float, hi_t: float, x0: float, x1: float, y0: float,
           y1: float) -> list[str]:
    """Each set of spans shaded in its lane of the plot (a rect each, its words on hover),
    the spans cut to ``lo_t`` .. ``hi_t``."""
    span = hi_t - lo_t
    if not bands or span <= 0:
        return []
    lane = (y1 - y0) / len(bands)
    out = []
    for i, (_, spans) in enumerate(bands):
        colour = BAND_COLOURS[i % len(BAND_COLOURS)]
        top = y0 + i * lane
        for begin, finish, words in spans:
            begin, finish = max(begin, lo_t), min(finish, hi_t)
            if finish < begin or not (math.isfinite(begin) and math.isfinite(finish)):
                continue
            left = x0 + (begin - lo_t) / span * (x1 - x0)
            wide = max(2.0, (finish - begin) / span * (x1 - x0))
            out.append(f'<rect x="{_fmt(left)}" y="{_fmt(top)}" width="{_fmt(wide)}" '
                       f'height="{_fmt(lane)}" fill="{colour}" fill-opacity="0.25">'
                       f'<title>{text(words)}</title></rect>')
    return out


def _hover(drawn, names: list[str], lo_t: float, hi_t: float, x, y0: float, y1: float,
           unit: str) -> list[str]:
    """Transparent slices over the plot, each titled with its time and every series'
    value nearest to its middle: what a pointer resting on the graph is told."""
    span = hi_t - lo_t
    if span <= 0:
        return []
    slices = max(1, min(HOVER_SLICES, int(span)))
    step = span / slices
    out = ['<g fill="transparent">']
    flat = [[p for run in rs for p in run] for _, rs in drawn]
    for k in range(slices):
        begin, middle = lo_t + k * step, lo_t + (k + 0.5) * step
        lines = []
        for name, points in zip(names, flat):
            near = [p for p in points if abs(p[1] - middle) <= step]
            if near:
                value = min(near, key=lambda p: abs(p[1] - middle))[0]
                lines.append(f"{name}: {with_unit(value, unit)}")
        if not lines:
            continue
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(middle))
        said = "&#10;".join(text(line) for line in [stamp, *lines])
        left = x(begin)
        out.append(f'<rect x="{_fmt(left)}" y="{y0}" width="{_fmt(x(begin + step) - left)}" '
                   f'height="{y1 - y0}"><title>{said}</title></rect>')
    out.append("</g>")
    return out
