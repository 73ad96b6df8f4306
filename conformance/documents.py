"""The source documents the catalogue cites, by title, and the UM guide's rows as the guide labels them.

One place for what a table's ``[source] document`` names: the seed files are known by content hash
(``000_ce67ac77056e886e.txt``), which says nothing to a reader, so every page that shows a source shows
:func:`document_title` instead (the file name stays in the records, the CSV and tooltips). The UM 10.11 guide
numbers none of its table rows: a row is the values in its columns, so :func:`row_label` gives a UM row as
those values, verbatim, where the records carry only the row's position in its table.
"""

from __future__ import annotations

UM_GUIDE = "000_ce67ac77056e886e.txt"

DOCUMENT_TITLES: dict[str, str] = {
    UM_GUIDE: "Universal Messaging 10.11 AMQP Guide: Terminal Delivery States",
    "001_c5e7220407a77440.txt": "Qpid Dispatch Router: Message settlement and reliability",
    "002_6b3472e7d3b5cb32.txt": "AMQP message accepted: encoding on the wire (article)",
    "003_4ed93cfa28e5c8c6.txt": "Qpid Proton: Delivery guarantees",
    "004_deb5a6de984a83fd.txt": "Qpid Proton C API 0.38: Delivery",
    "AMQP 1.0 (OASIS)": "AMQP 1.0 specification (OASIS)",
}

_SUBSCRIPTION = ("Local Disposition State", "Remote Disposition State", "Delivery Settled", "Receiver Settle Mode",
                 "Source Durability")
_PUBLISHING = ("Partial Delivery", "Remote Disposition State", "UM Transformer Result", "Sender Settle Mode")
_REJECTED_SUBSCRIPTION = _SUBSCRIPTION[1:]  # the guide's second rejected-subscription row drops the first column

# (heading, row) -> the row's values in its table's columns, as the guide prints them (row = position in the table)
_UM_ROWS: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("Accepted: Subscription Mapping", "1"): (_SUBSCRIPTION, ("null", "null", "N/A", "N/A", "N/A")),
    ("Accepted: Subscription Mapping", "2"): (_SUBSCRIPTION, ("N/A", "accepted", "true", "N/A", "N/A")),
    ("Accepted: Subscription Mapping", "3"): (_SUBSCRIPTION, ("N/A", "accepted", "false", "ANY", "ANY")),
    ("Accepted: Subscription Mapping", "4"): (_SUBSCRIPTION,
                                              ("N/A", "accepted", "false", "ReceiverSettleMode.FIRST", "NONE")),
    ("Accepted: Subscription Mapping", "5"): (_SUBSCRIPTION, ("N/A", "accepted", "false", "ReceiverSettleMode.FIRST",
                                                              "CONFIGURATION OR UNSETTLED_STATE")),
    ("Accepted: Subscription Mapping", "6"): (_SUBSCRIPTION,
                                              ("N/A", "accepted", "false", "ReceiverSettleMode.SECOND", "NONE")),
    ("Accepted: Subscription Mapping", "7"): (_SUBSCRIPTION, ("N/A", "accepted", "false", "ReceiverSettleMode.SECOND",
                                                              "CONFIGURATION OR UNSETTLED_STATE")),
    ("Accepted: Subscription Mapping", "8"): (_SUBSCRIPTION, ("N/A", "transactional", "N/A", "N/A", "N/A")),
    ("Accepted: Publishing Mapping", "1"): (_PUBLISHING, ("true", "null", "N/A", "N/A")),
    ("Accepted: Publishing Mapping", "2"): (_PUBLISHING, ("false", "N/A", "null", "N/A")),
    ("Accepted: Publishing Mapping", "3"): (_PUBLISHING, ("false", "NOT transactional", "NOT null", "SETTLED")),
    ("Accepted: Publishing Mapping", "4"): (_PUBLISHING, ("false", "NOT transactional", "NOT null", "UNSETTLED")),
    ("Accepted: Publishing Mapping", "5"): (_PUBLISHING, ("false", "NOT transactional", "NOT null", "MIXED")),
    ("Accepted: Publishing Mapping", "6"): (_PUBLISHING, ("false", "transactional", "NOT null", "N/A")),
    ("Rejected: Subscription Mapping", "1"): (_SUBSCRIPTION, ("N/A", "accepted", "false", "ANY", "ANY")),
    ("Rejected: Subscription Mapping", "2"): (_REJECTED_SUBSCRIPTION, (
        "accepted", "false", "ReceiverSettleMode.FIRST OR ReceiverSettleMode.SECOND",
        "CONFIGURATION OR UNSETTLED_STATE")),
    ("Rejected: Publishing Mapping", "1"): (_PUBLISHING, ("true", "null", "N/A", "N/A")),
    ("Rejected: Publishing Mapping", "2"): (_PUBLISHING,
                                            ("false", "NOT transactional", "NOT null", "UNSETTLED OR SETTLED")),
    ("Rejected: Publishing Mapping", "3"): (_PUBLISHING, ("false", "transactional", "NOT null", "N/A")),
}


def document_title(document: str) -> str:
    """The title of a cited document; a document not listed in :data:`DOCUMENT_TITLES` (a profile's or a
    future table's own) is returned as it is, so the result is never empty when ``document`` is not."""
    return DOCUMENT_TITLES.get(document, document)


def source_title(document: str, heading: str) -> str:
    """A document's title and the heading cited in it, ``·``-joined; the heading left out when empty or
    when the title already says it (a document that is a single section)."""
    title = document_title(document)
    if not heading or heading.lower() in title.lower():
        return title
    return f"{title} · {heading}" if title else heading


def row_columns(document: str, heading: str, row: str) -> list[tuple[str, str]]:
    """A UM guide row as (column, value) pairs, verbatim from the guide, leaving out columns whose value is
    ``N/A``; an empty list for any other document, heading or row (those rows carry their own labels)."""
    if document != UM_GUIDE:
        return []
    found = _UM_ROWS.get((heading, str(row)))
    if found is None:
        return []
    columns, values = found
    return [(column, value) for column, value in zip(columns, values, strict=True) if value != "N/A"]


def row_label(document: str, heading: str, row: str) -> str:
    """How the source itself identifies a row: for the UM guide, the row's column values
    (``Remote Disposition State: accepted · Delivery Settled: false · ...``); for every other source the row as
    the table cites it (its section, clause or named column), unchanged."""
    pairs = row_columns(document, heading, row)
    if not pairs:
        return str(row)
    return " · ".join(f"{column}: {value}" for column, value in pairs)
