"""A message's sections as they crossed the wire (AMQP 1.0 3.2), decoded by ``proton.Data`` with their types.

Proton's ``Message`` API gives header fields as plain Python values (a delivery-count is an int whatever its
wire type); a row that constrains a type reads it here, from the transfer's payload.
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.sections import message_sections
from proton import uint


def message_fields(payload: bytes) -> dict[str, Any]:
    """What a row judges of a delivered message, typed as on the wire: the header's ``durable``,
    ``first-acquirer`` (absent: false) and ``delivery-count`` (absent: uint 0, the defaults of 3.2.1),
    ``priority``, ``annotations`` (message-annotations, keys and values typed: a key must be a symbol or a
    ulong, AMQP 1.0 3.2.10, and a row holds it to that with ``@symbol-keys``), ``properties`` (the fields the
    properties section carries, typed; absent: {}), ``application-properties`` (absent: {}), ``body`` (the
    amqp-value, or the data bytes) and ``body-section`` (which body section carried it). The sections are
    decoded by :func:`amqp_conformance.peers.sections.message_sections`."""
    found = message_sections(payload)
    header = found.get("header", {})
    annotations = found.get("message-annotations")
    return {
        "durable": header.get("durable", False),
        "first-acquirer": header.get("first-acquirer", False),
        "delivery-count": header.get("delivery-count", uint(0)),
        "priority": header.get("priority"),
        "annotations": dict(annotations) if isinstance(annotations, dict) else {},
        "properties": dict(found["properties"]) if isinstance(found.get("properties"), dict) else {},
        "application-properties": dict(found["application-properties"])
        if isinstance(found.get("application-properties"), dict) else {},
        "body": found.get("body"),
        "body-section": found.get("body-section"),
    }
