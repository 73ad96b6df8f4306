"""Why brokers deviate: the NON-STRICT cells of the matrix grouped by the reason their profile gives.

A NON-STRICT verdict's reason is ``declared deviation: <the profile's reason> (<its reference>)``
(``fixtures/verdict.py``); cells that share a broker and a reason are one line, with the cases it excuses.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

PREFIX = "declared deviation: "
MAX_CASES_SHOWN = 8


def deviation_reasons(cells: list[dict]) -> list[dict]:
    """One entry per broker and declared reason among the NON-STRICT ``cells``: ``broker``, ``reason`` (the
    profile's words, without the ``declared deviation:`` prefix), ``versions`` and ``cases`` (sorted ids with
    their expectation set); most cases first, then by broker and reason."""
    grouped: dict[tuple[str, str], dict] = defaultdict(lambda: {"versions": set(), "cases": set()})
    for cell in cells:
        if cell["verdict"] != "NON-STRICT":
            continue
        reason = (cell.get("reason") or "").strip().splitlines()
        text = reason[0] if reason else "(no reason recorded)"
        text = text[len(PREFIX):] if text.startswith(PREFIX) else text
        entry = grouped[(cell["broker"], text)]
        entry["versions"].add(cell["broker_version"])
        entry["cases"].add(f"{cell['case_id']} [{cell['expectation_set']}]")
    rows = [{"broker": broker, "reason": reason, "versions": sorted(entry["versions"]),
             "cases": sorted(entry["cases"])} for (broker, reason), entry in grouped.items()]
    return sorted(rows, key=lambda r: (-len(r["cases"]), r["broker"], r["reason"]))


def deviations_html(cells: list[dict]) -> str:
    """The reasons as an HTML table (``#deviation-reasons``): broker, how many cells, the reason, the cases
    (the first :data:`MAX_CASES_SHOWN`, the rest counted); a sentence when nothing deviates."""
    rows = deviation_reasons(cells)
    if not rows:
        return ('<p id="deviation-reasons" class="meta">No broker deviates as its profile declares '
                "(no NON-STRICT cell).</p>")
    out = ['<table id="deviation-reasons"><thead><tr><th>broker</th><th class="num">cells</th><th>reason the '
           "profile gives</th><th>cases</th></tr></thead><tbody>"]
    for row in rows:
        shown = row["cases"][:MAX_CASES_SHOWN]
        more = len(row["cases"]) - len(shown)
        cases = ", ".join(escape(c) for c in shown) + (f" and {more} more" if more else "")
        out.append(f'<tr data-broker="{escape(row["broker"])}"><th>{escape(row["broker"])} '
                   f'<span class="meta">{escape(", ".join(row["versions"]))}</span></th>'
                   f'<td class="num">{len(row["cases"])}</td><td class="reason">{escape(row["reason"])}</td>'
                   f'<td class="cases">{cases}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)
