"""The sections of a transferred message, decoded by ``proton.Data`` with their AMQP types kept.

proton's ``Message`` API gives a message's fields as plain Python values (a ``delivery-count`` is an int,
an annotation key a str); a case that judges types reads the transfer payload instead. Each section is
a described value (AMQP 1.0 3.2); this module names them and normalizes their contents like a frame's
fields (:func:`.frames.normalize`), so a uint stays ``proton.uint`` and a symbol ``proton.symbol``.
"""

from __future__ import annotations

from typing import Any

from proton import Data, Described

from .frames import normalize

SECTIONS = {
    0x70: "header", 0x71: "delivery-annotations", 0x72: "message-annotations", 0x73: "properties",
    0x74: "application-properties", 0x75: "body", 0x76: "body", 0x77: "body", 0x78: "footer",
}
HEADER_FIELDS = ("durable", "priority", "ttl", "first-acquirer", "delivery-count")
BODY_SECTIONS = {0x75: "data", 0x76: "amqp-sequence", 0x77: "amqp-value"}


def message_sections(payload: bytes) -> dict[str, Any]:
    """The sections of an encoded message by name: ``header`` (a dict of its fields present on the wire),
    ``delivery-annotations``, ``message-annotations``, ``properties``, ``application-properties``,
    ``body`` (the value of an amqp-value or data section, the list of an amqp-sequence; ``body-section``
    names which) and ``footer``.

    A section the message does not carry is absent. Values keep their AMQP types. An undecodable tail
    (a message cut short) ends the walk with ``"(undecodable)"`` under ``error``.
    """
    data = Data()
    sections: dict[str, Any] = {}
    rest = bytes(payload)
    while rest:
        data.clear()
        try:
            consumed = data.decode(rest)
        except Exception:  # proton raises its own codec errors; a broken payload is an observation
            sections["error"] = "(undecodable)"
            return sections
        rest = rest[consumed:]
        data.rewind()
        data.next()
        value = data.get_object()
        if not isinstance(value, Described):
            sections.setdefault("error", "(a section that is not a described type)")
            continue
        name = SECTIONS.get(int(value.descriptor)) if isinstance(value.descriptor, int) else None
        if name is None:
            continue
        if name == "header":
            fields = list(value.value or [])
            sections[name] = {k: normalize(v) for k, v in zip(HEADER_FIELDS, fields, strict=False) if v is not None}
        elif name == "properties":
            named = normalize(value)
            sections[name] = {k: v for k, v in named.items() if k != "@type" and v is not None} \
                if isinstance(named, dict) else named
        elif name == "body" and "body" in sections:
            continue  # the first body section (a message may carry several data or sequence sections)
        else:
            sections[name] = normalize(value.value)
            if name == "body":
                sections["body-section"] = BODY_SECTIONS[int(value.descriptor)]
    return sections
