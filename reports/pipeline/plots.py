"""Inline SVG plots for the compliance report: no network, no plotting library, plain strings.

Each function takes plain rows (dicts, as :mod:`.load` collects them) and returns one ``<svg>`` element
with a ``<title>`` on every mark, so hovering shows the exact figure.
"""

from __future__ import annotations

import math
from collections import Counter
from html import escape

from amqp_conformance.reports.svg import text, text_width

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22", "#393b79", "#637939")
MAX_BROKERS = len(PALETTE)
MAX_LATENCY_ROWS = 30
BAR_FILL = "#5c6bc0"  # one colour for every broker's compliance bar: a hue per broker would read as good or bad


_text = text


def compliance_over_versions_svg(rows: list[dict], width: int = 760, height: int = 300) -> str:
    """% compliant per broker across its versions (rows: broker, broker_version, version_order,
    compliant_pct). When some broker has several versions: one coloured line a broker, at most
    :data:`MAX_BROKERS` brokers (the rest are named in a note), the x axis each broker's version index. When
    every broker has one version, a line would be a lone dot: then one bar a broker
    (:func:`compliance_per_broker_svg`), which says the same thing legibly."""
    if max(Counter(r["broker"] for r in rows).values(), default=0) <= 1:
        return compliance_per_broker_svg(rows)
    return _compliance_lines_svg(rows, width, height)


def compliance_per_broker_svg(rows: list[dict], bar_width: int = 420) -> str:
    """One horizontal bar a broker and version (rows: broker, broker_version, compliant_pct), its length the
    % compliant on a 0-100 axis, the figure written after it; labels sized from the longest, never cut."""
    data = sorted(rows, key=lambda r: (r["broker"], r.get("version_order") or 0))
    labels = [f"{r['broker']} {r['broker_version']}".strip() for r in data]
    label_w = max((text_width(lb, 12) for lb in labels), default=60) + 12
    note_w = text_width("100.0% compliant", 12) + 12
    row_h, top, axis_h = 24, 20, 22
    width = int(label_w + bar_width + note_w)
    height = top + row_h * max(len(data), 1) + axis_h
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="compliance per broker">',
             _text(label_w, 13, "one version per broker: % compliant (PASS or INFO of the cases judged)", size=11)]
    bottom = top + row_h * len(data)
    for pct in (0, 25, 50, 75, 100):
        x = label_w + bar_width * pct / 100
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>')
        parts.append(_text(x, bottom + 14, f"{pct}%", "middle", 11))
    if not data:
        parts.append(_text(label_w, top + 14, "no results", size=12))
    for i, (r, label) in enumerate(zip(data, labels, strict=True)):
        y = top + i * row_h
        pct = r.get("compliant_pct")
        parts.append(_text(label_w - 8, y + 16, label, "end", 12))
        if pct is not None:
            parts.append(f'<rect x="{label_w:.1f}" y="{y + 5}" width="{max(bar_width * pct / 100, 1):.1f}" '
                         f'height="14" fill="{BAR_FILL}" data-broker="{escape(r["broker"])}">'
                         f'<title>{escape(label)}: {pct}% compliant</title></rect>')
        parts.append(_text(label_w + bar_width + 8, y + 16, "nothing judged" if pct is None else
                           f"{pct:.1f}% compliant", size=12))
    parts.append("</svg>")
    return "".join(parts)


def _compliance_lines_svg(rows: list[dict], width: int, height: int) -> str:
    brokers = sorted({r["broker"] for r in rows})
    shown, hidden = brokers[:MAX_BROKERS], brokers[MAX_BROKERS:]
    legend_w = max((text_width(b, 11) for b in shown), default=0) + 40
    right = max(190, int(legend_w))
    left, top, bottom = 48, 24, 40
    width = max(width, right + left + 480)
    plot_w, plot_h = width - left - right, height - top - bottom
    top_order = max((r["version_order"] for r in rows), default=1)
    span = max(top_order - 1, 1)

    def xy(order: int, pct: float) -> tuple[float, float]:
        x = left + (plot_w / 2 if top_order == 1 else (order - 1) * plot_w / span)
        return x, top + plot_h * (1 - pct / 100)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="compliance over versions">']
    for pct in (0, 25, 50, 75, 100):
        _, y = xy(1, pct)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(_text(left - 6, y + 4, f"{pct}%", "end", 11))
    parts.append(_text(left + plot_w / 2, height - 8, "version (in version order, per broker)", "middle", 11))
    for index, broker in enumerate(shown):
        colour = PALETTE[index]
        points = sorted((r for r in rows if r["broker"] == broker and r["compliant_pct"] is not None),
                        key=lambda r: r["version_order"])
        coords = [xy(r["version_order"], r["compliant_pct"]) for r in points]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r, (x, y) in zip(points, coords, strict=True):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"><title>'
                         f'{escape(broker)} {escape(str(r["broker_version"]))}: {r["compliant_pct"]}% compliant'
                         f'</title></circle>')
            if len(points) <= 12 and len(shown) <= 4:  # few enough points to name each version
                # beside its point, kept inside the plot (a label above the top line would be cut)
                label = str(r["broker_version"])
                lx = min(x + 6, left + plot_w - text_width(label, 10))
                ly = min(max(y - 6 - 12 * index, 10), top + plot_h - 2)
                parts.append(_text(lx, ly, label, size=10, extra=f'fill="{colour}"'))
        ly = top + 14 + index * 16
        parts.append(f'<rect x="{width - right + 12}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        parts.append(_text(width - right + 28, ly, broker, size=11))
    if hidden:
        parts.append(_text(width - right + 12, top + 14 + len(shown) * 16,
                           f"+{len(hidden)} more brokers (see compliance.json)", size=10))
    parts.append("</svg>")
    return "".join(parts)


def latency_label(row: dict) -> str:
    """A latency group's label: ``broker · family · settle mode``, whole."""
    return f"{row['broker']} · {row['family']} · {row['settle_mode']}"


def latency_svg(rows: list[dict], plot_width: int = 420) -> str:
    """Settlement latency percentiles (rows: broker, settle_mode, family, settled, p50_ms, p95_ms, p99_ms,
    max_ms), one line a group on a log-scale millisecond axis: a bar from p50 to p99, marks at p50, p95,
    p99 and max. At most :data:`MAX_LATENCY_ROWS` groups, those with most settled deliveries first. Each
    label (:func:`latency_label`) is written whole: the label column is as wide as the longest needs."""
    data = [r for r in rows if r.get("p50_ms") is not None]
    data = sorted(data, key=lambda r: (-r["settled"], r["broker"], r["settle_mode"], r["family"]))[:MAX_LATENCY_ROWS]
    data.sort(key=lambda r: (r["broker"], r["family"], r["settle_mode"]))
    right, top, row_h = 40, 24, 18
    label_w = max([text_width(latency_label(r), 11) for r in data] + [120]) + 16
    plot_w = plot_width
    width = int(label_w + plot_w + right)
    height = top + row_h * max(len(data), 1) + 40
    values = [v for r in data for v in (r["p50_ms"], r["max_ms"]) if v is not None and v > 0]
    low = 10 ** math.floor(math.log10(min(values))) if values else 0.01
    high = 10 ** math.ceil(math.log10(max(values))) if values else 10
    high = max(high, low * 10)

    def x(ms: float) -> float:
        ms = min(max(ms, low), high)
        return label_w + plot_w * (math.log10(ms) - math.log10(low)) / (math.log10(high) - math.log10(low))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" aria-label="settlement latency percentiles">']
    decade = low
    while decade <= high * 1.0001:
        parts.append(f'<line x1="{x(decade):.1f}" y1="{top - 6}" x2="{x(decade):.1f}" '
                     f'y2="{top + row_h * len(data)}" stroke="#ddd"/>')
        parts.append(_text(x(decade), top + row_h * len(data) + 14, f"{decade:g} ms", "middle", 11))
        decade *= 10
    parts.append(_text(label_w, 14, "settlement latency: bar p50-p99, | p95, x max (log scale)", size=11))
    if not data:
        parts.append(_text(label_w, top + 12, "no settled deliveries in the frame records", size=12))
    for i, r in enumerate(data):
        y = top + i * row_h + row_h / 2
        parts.append(_text(label_w - 8, y + 4, latency_label(r), "end", 11))
        tip = (f"{r['broker']} {r['family']} {r['settle_mode']}: {r['settled']} settled; p50 {r['p50_ms']} ms, "
               f"p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms")
        parts.append(f'<g><title>{escape(tip)}</title>'
                     f'<rect x="{x(r["p50_ms"]):.1f}" y="{y - 5:.1f}" '
                     f'width="{max(x(r["p99_ms"]) - x(r["p50_ms"]), 2):.1f}" height="10" fill="#90caf9"/>'
                     f'<circle cx="{x(r["p50_ms"]):.1f}" cy="{y:.1f}" r="4" fill="#0d47a1"/>'
                     f'<line x1="{x(r["p95_ms"]):.1f}" y1="{y - 7:.1f}" x2="{x(r["p95_ms"]):.1f}" y2="{y + 7:.1f}" '
                     f'stroke="#e65100" stroke-width="2"/>'
                     f'<text x="{x(r["max_ms"]):.1f}" y="{y + 4:.1f}" font-size="12" text-anchor="middle" '
                     f'fill="#b71c1c">x</text></g>')
    parts.append("</svg>")
    return "".join(parts)
