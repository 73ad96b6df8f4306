"""The compliance matrix's client grid: for each grid row (scenario) and broker, the sending clients against
the receiving clients, one verdict a square (``amqp-conformance interop`` records; their case ids are
``<row id>[<sending client>><receiving client>]``, fixtures/interop.cell_id)."""

from __future__ import annotations

import re
from collections import defaultdict
from html import escape
from typing import Any

from .verdict_style import css_class

CELL_ID = re.compile(r"^(?P<row>[^\[\]]+)\[(?P<sender>[^>\]]+)>(?P<receiver>[^\]]+)\]$")


def grid_cell(case_id: str) -> tuple[str, str, str] | None:
    """(row id, sending client, receiving client) of a grid cell's case id; None for a catalogue case."""
    match = CELL_ID.match(case_id)
    return (match["row"], match["sender"], match["receiver"]) if match else None


def client_grid_html(cells: list[dict[str, Any]], columns: list[tuple[str, str]],
                     log_ids: dict[tuple[str, str, str, str], str]) -> str:
    """The "Client grid" section ("" when the runs hold no grid cell): per row and (broker, version) column a
    table of sending clients (rows) by receiving clients (columns), each square the cell's verdict, its
    reason on hover and a link to its frame log."""
    by_row: dict[tuple[str, str], dict[tuple[str, str, str, str], dict]] = defaultdict(dict)
    for cell in cells:
        parsed = grid_cell(cell["case_id"])
        if parsed is None:
            continue
        row, sender, receiver = parsed
        by_row[(row, cell["expectation_set"])][(cell["broker"], cell["broker_version"], sender, receiver)] = cell
    if not by_row:
        return ""
    out = ["<h2 id=\"client-grid\">Client grid</h2><p class=\"meta\">Real client libraries through each broker "
           "(amqp-conformance interop): rows are the sending client, columns the receiving client; click a "
           "verdict for the frame log of both connections.</p>"]
    for (row, expectation_set), found in sorted(by_row.items()):
        senders = sorted({k[2] for k in found})
        receivers = sorted({k[3] for k in found})
        out.append(f"<h3>{escape(row)} [{escape(expectation_set)}]</h3><div class=\"grids\">")
        for broker, version in columns:
            if not any(k[0] == broker and k[1] == version for k in found):
                continue
            out.append(f"<table class=\"grid client-grid\" data-row=\"{escape(row)}\" data-broker=\"{escape(broker)}\">"
                       f"<caption>{escape(broker)} {escape(version)}</caption><tr><th>sender \\ receiver</th>"
                       + "".join(f"<th>{escape(r)}</th>" for r in receivers) + "</tr>")
            for sender in senders:
                out.append(f"<tr><th>{escape(sender)}</th>")
                for receiver in receivers:
                    cell = found.get((broker, version, sender, receiver))
                    if cell is None:
                        out.append("<td class=\"none\">—</td>")
                        continue
                    verdict = cell["verdict"]
                    key = (broker, version, cell["case_id"], expectation_set)
                    tip = f"{verdict}: {sender} > {receiver} on {broker} {version}\n" + \
                        (cell.get("reason") or "").strip()[:300]
                    body = escape(verdict)
                    if key in log_ids:
                        body = f"<a href=\"#{log_ids[key]}\">{body}</a>"
                    out.append(f"<td class=\"v {css_class(verdict)}\" data-verdict=\"{escape(verdict)}\" "
                               f"title=\"{escape(tip)}\">{body}</td>")
                out.append("</tr>")
            out.append("</table>")
        out.append("</div>")
    return "\n".join(out)
