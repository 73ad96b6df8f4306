"""Why brokers deviate: the NON-STRICT cells of the matrix grouped by the reason their profile gives.

A NON-STRICT verdict's reason is ``declared deviation: <the profile's reason> (<its reference>)``
(``fixtures/verdict.py``); cells that share a broker and a reason are one line, with the cases it excuses.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

PREFIX = "declared deviation: "
MAX_CASES_SHOWN = 8
MAX_REASONS_SHOWN = 10
HEADLINE_CHARS = 160


def _cuts(text: str, mark: str, after: int = 0) -> list[int]:
    """Where ``text`` may be cut at ``mark``: outside parentheses, not after an abbreviation (``e.g.``)."""
    found, at = [], text.find(mark, after)
    while at > 0:
        before = text[:at]
        if before.count("(") == before.count(")") and not before.endswith(("e.g", "i.e", "cf", "etc")):
            found.append(at)
        at = text.find(mark, at + 1)
    return found


def headline(reason: str) -> str:
    """The gist of a reason, to read at a glance: its first sentence; when that is longer than
    :data:`HEADLINE_CHARS`, up to its first colon or semicolon past the 20th character, else cut at a word
    with an ellipsis. Cuts fall outside parentheses. Never empty for a non-empty reason; the page shows the
    whole reason beside it on demand."""
    text = reason.strip()
    sentences = _cuts(text, ". ")
    first = text[:sentences[0]] if sentences else text.rstrip(".")
    if len(first) <= HEADLINE_CHARS:
        return first
    for mark in (": ", "; "):
        cuts = [at for at in _cuts(first, mark, 20) if at <= HEADLINE_CHARS]
        if cuts:
            return first[:cuts[0]]
    return first[:HEADLINE_CHARS].rsplit(" ", 1)[0] + "…"


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
    """The reasons as an HTML table (``#deviation-reasons``): broker, how many cells, the reason's
    :func:`headline` (the whole reason and its reference unfold under it, no script needed), the cases (the
    first :data:`MAX_CASES_SHOWN`, the rest counted). The :data:`MAX_REASONS_SHOWN` reasons that excuse most
    cells are shown; the others are one click away (``<details>``). A sentence when nothing deviates."""
    rows = deviation_reasons(cells)
    if not rows:
        return ('<p id="deviation-reasons" class="meta">No broker deviates as its profile declares '
                "(no NON-STRICT cell).</p>")
    head = ('<thead><tr><th>broker</th><th class="num">cells</th><th>reason the profile gives</th><th>cases</th>'
            "</tr></thead>")
    out = [f'<table id="deviation-reasons">{head}<tbody>']
    for index, row in enumerate(rows):
        if index == MAX_REASONS_SHOWN:
            out.append(f'</tbody></table><details id="more-deviation-reasons"><summary>{len(rows) - index} more '
                       f'reason(s), excusing fewer cells</summary><table class="more-reasons">{head}<tbody>')
        shown = row["cases"][:MAX_CASES_SHOWN]
        more = len(row["cases"]) - len(shown)
        cases = ", ".join(escape(c) for c in shown) + (f" and {more} more" if more else "")
        gist = headline(row["reason"])
        reason = escape(gist) if gist == row["reason"].strip().rstrip(".") else (
            f"<details><summary>{escape(gist)}</summary>{escape(row['reason'])}</details>")
        out.append(f'<tr data-broker="{escape(row["broker"])}"><th>{escape(row["broker"])} '
                   f'<span class="meta">{escape(", ".join(row["versions"]))}</span></th>'
                   f'<td class="num">{len(row["cases"])}</td><td class="reason">{reason}</td>'
                   f'<td class="cases">{cases}</td></tr>')
    out.append("</tbody></table>" + ("</details>" if len(rows) > MAX_REASONS_SHOWN else ""))
    return "".join(out)
