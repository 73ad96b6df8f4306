"""The compliance picture drawn from the matrix cells: verdicts per broker column and per table.

Pure functions over the cells the matrix page already has (broker, broker_version, table, verdict): nothing
new is asked of the pipeline. Each chart says something with one broker at one version as with many: a bar
a broker column (stacked by verdict, with its % compliant), and a grid of tables x broker columns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from html import escape

from amqp_conformance.fixtures.verdict import VERDICT_NAMES as VERDICTS

from .svg import text, text_width
from .verdict_style import BAR_COLOURS, COMPLIANT

Column = tuple[str, str]  # (broker, broker_version)


def compliant_pct(counts: Counter[str]) -> float | None:
    """PASS or INFO among the judged cells (UNSUPPORTED left out), in percent rounded to 0.1; None when
    nothing was judged."""
    judged = sum(counts.values()) - counts["UNSUPPORTED"]
    if judged <= 0:
        return None
    return round(100.0 * sum(counts[v] for v in COMPLIANT) / judged, 1)


def verdicts_by(cells: Iterable[dict], *keys: str) -> dict[tuple, Counter[str]]:
    """Verdict counts of ``cells`` grouped by the values of ``keys`` (one cell = one case and set)."""
    grouped: dict[tuple, Counter[str]] = defaultdict(Counter)
    for cell in cells:
        grouped[tuple(cell[k] for k in keys)][cell["verdict"]] += 1
    return dict(grouped)


def column_label(column: Column) -> str:
    """A broker column as one line: ``broker version``."""
    return f"{column[0]} {column[1]}".strip()


def _pct_text(counts: Counter[str]) -> str:
    pct = compliant_pct(counts)
    judged = sum(counts.values()) - counts["UNSUPPORTED"]
    compliant = sum(counts[v] for v in COMPLIANT)
    return "nothing judged" if pct is None else f"{pct:.1f}% compliant ({compliant}/{judged})"


def _stacked_bar(x: float, y: float, width: float, height: float, counts: Counter[str], what: str) -> list[str]:
    total = sum(counts.values()) or 1
    parts, left = [], x
    for verdict in VERDICTS:
        if not counts[verdict]:
            continue
        w = width * counts[verdict] / total
        parts.append(f'<rect x="{left:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{height}" '
                     f'fill="{BAR_COLOURS[verdict]}" data-verdict="{verdict}"><title>{escape(what)}: '
                     f'{counts[verdict]} {verdict}</title></rect>')
        left += w
    return parts


def broker_bars_svg(columns: list[Column], cells: list[dict], bar_width: int = 420) -> str:
    """One horizontal bar per broker column, its length split by verdict (colour per verdict, every count
    in a hover title), labelled on the left with the broker and version and on the right with its %
    compliant. Label columns are sized from the longest label, so none is cut."""
    counts = verdicts_by(cells, "broker", "broker_version")
    labels = [column_label(c) for c in columns]
    notes = [_pct_text(counts.get(c, Counter())) for c in columns]
    label_w = max((text_width(lb, 12) for lb in labels), default=60) + 12
    note_w = max((text_width(n, 12) for n in notes), default=60) + 12
    row_h, top = 26, 8
    width = int(label_w + bar_width + note_w)
    height = top + row_h * max(len(columns), 1) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" id="chart-brokers" role="img" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" aria-label="verdicts per broker">']
    for i, (column, label, note) in enumerate(zip(columns, labels, notes, strict=True)):
        y = top + i * row_h
        parts.append(f'<g data-broker="{escape(column[0])}" data-version="{escape(column[1])}">')
        parts.append(text(label_w - 8, y + 15, label, "end", 12))
        parts += _stacked_bar(label_w, y + 3, bar_width, 16, counts.get(column, Counter()), label)
        parts.append(text(label_w + bar_width + 8, y + 15, note, size=12, extra='class="pct"'))
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _mini_bar(counts: Counter[str], what: str, width: int = 90) -> str:
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="10" viewBox="0 0 {width} 10" '
             f'role="img" aria-label="{escape(what)}">']
    parts += _stacked_bar(0, 0, width, 10, counts, what)
    parts.append("</svg>")
    return "".join(parts)


def table_grid_html(columns: list[Column], cells: list[dict], titles: dict[str, str] | None = None) -> str:
    """Tables (rows) x broker columns: in each cell the table's % compliant on that broker, its verdict
    counts as a small stacked bar and how many of its cases failed; ``—`` where the broker ran none of the
    table. ``titles`` names each table's source (shown under the table's id)."""
    counts = verdicts_by(cells, "table", "broker", "broker_version")
    tables = sorted({c["table"] for c in cells})
    out = ['<table id="chart-tables" class="grid"><thead><tr><th>table</th>']
    out += [f'<th data-broker="{escape(b)}" data-version="{escape(v)}">{escape(b).replace("~", "~<wbr>")}<br>'
            f'<span class="meta">{escape(v)}</span></th>' for b, v in columns]
    out.append("</tr></thead><tbody>")
    for table in tables:
        source = (titles or {}).get(table, "")
        out.append(f'<tr data-table="{escape(table)}"><th>{escape(table)}'
                   + (f'<br><span class="meta">{escape(source)}</span>' if source else "") + "</th>")
        for broker, version in columns:
            mine = counts.get((table, broker, version))
            if not mine:
                out.append('<td class="none">—</td>')
                continue
            pct = compliant_pct(mine)
            bad = mine["FAIL"] + mine["ERROR"]
            what = f"{table} on {broker} {version}: " + ", ".join(f"{mine[v]} {v}" for v in VERDICTS if mine[v])
            out.append(f'<td data-broker="{escape(broker)}" data-pct="{"" if pct is None else pct}" '
                       f'title="{escape(what)}"><b>{"—" if pct is None else f"{pct:.0f}%"}</b> '
                       f'<span class="meta">{sum(mine.values())} cells'
                       f'{f", {bad} failing" if bad else ""}</span><br>{_mini_bar(mine, what)}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)
