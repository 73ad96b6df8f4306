"""Whether a transferred message carries its sections as 3.2 types them, sans-I/O.

A message of format 0 (2.7.5, 3.2) is a sequence of described sections, in this order, each at most once but the
body: header, delivery-annotations, message-annotations, properties, application-properties, the body (one or more
data sections, one or more amqp-sequence sections, or one amqp-value), footer. The header's and properties'
fields are held to their types as a frame's are (:func:`.wire_types.composite_problems`: a durable that is no
boolean, a creation-time that is no timestamp, a message-id of none of its four types); annotations maps have
symbol or ulong keys (3.2.10), application-properties string keys and simple values (3.2.5), a data section is
binary (3.2.6), an amqp-sequence a list (3.2.7). Values are decoded by ``proton.Data``; nothing here decodes bytes
by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proton import Array, Data, Described, symbol, ulong

from .amqp_types import BY_NAME
from .frames import Frame
from .sections import BODY_SECTIONS, SECTIONS
from .transfers import deliveries, payload_of
from .wire_types import composite_problems, describe, field_path_problem

# 3.2: the sections in the order a message carries them (every body section is "body")
ORDER = ("header", "delivery-annotations", "message-annotations", "properties", "application-properties", "body",
         "footer")
# the section each descriptor names, by code (sections.py's names, a body section by its kind) or by symbol
CODES = {code: BODY_SECTIONS.get(code, name) for code, name in SECTIONS.items()}
SYMBOLS = {"amqp:header:list": 0x70, "amqp:delivery-annotations:map": 0x71, "amqp:message-annotations:map": 0x72,
           "amqp:properties:list": 0x73, "amqp:application-properties:map": 0x74, "amqp:data:binary": 0x75,
           "amqp:amqp-sequence:list": 0x76, "amqp:amqp-value:*": 0x77, "amqp:footer:map": 0x78}
SECTION_OF_CODE = {0x70: "3.2.1", 0x71: "3.2.2", 0x72: "3.2.3", 0x73: "3.2.4", 0x74: "3.2.5", 0x75: "3.2.6",
                   0x76: "3.2.7", 0x77: "3.2.8", 0x78: "3.2.9"}
ANNOTATIONS = ("delivery-annotations", "message-annotations", "footer")
# 3.2.5: an application property's value is a simple type: no map, list or array (nor a described value)
NOT_SIMPLE = (dict, list, Array, Described)


def message_problems(payload: bytes) -> list[str]:
    """Why the encoded message ``payload`` (of format 0) does not carry its sections as 3.2 types them, one line a
    problem, each naming the section (``message.header.durable``) and the section of the specification; []
    when it does. A payload that stops decoding, or holds a value that is no section, is one problem after those
    of the sections before it, and the walk ends there."""
    data = Data()
    found: list[str] = []
    rest = bytes(payload)
    last, previous = -1, ""  # the place in ORDER of the section before, and its kind
    while rest:
        data.clear()
        try:
            consumed = data.decode(rest)
            data.rewind()
            data.next()
            value = data.get_object()
        except Exception as exc:  # proton raises its own codec errors on bad input
            return [*found, f"message: its sections stop decoding: {type(exc).__name__}: {exc}"]
        rest = rest[consumed:]
        code = _section_code(value)
        if code is None:  # what follows cannot be told apart from the rest of a value: the walk ends here
            return [*found, f"message: a section is {describe(value)}, not one of the described sections (3.2)"]
        kind = CODES[code]
        name = "body" if code in (0x75, 0x76, 0x77) else kind
        place = ORDER.index(name)
        if place < last or (place == last and (name != "body" or kind != previous or kind == "amqp-value")):
            found.append(f"message.{kind} comes after message.{previous}, out of the order 3.2 gives the sections "
                         f"(each once, the body as data sections, amqp-sequence sections or one amqp-value)")
        last, previous = place, kind
        found += _section_problems(value.value, kind, code)
    return found


def _section_code(value: Any) -> int | None:
    if not isinstance(value, Described):
        return None
    descriptor = value.descriptor
    if isinstance(descriptor, symbol):
        return SYMBOLS.get(str(descriptor))
    if isinstance(descriptor, int) and int(descriptor) in CODES:
        return int(descriptor)
    return None


def _section_problems(value: Any, kind: str, code: int) -> list[str]:
    path, where = f"message.{kind}", f"({SECTION_OF_CODE[code]})"
    if kind in ("header", "properties"):
        return composite_problems(Described(ulong(code), value), BY_NAME[kind], path)
    if kind in ANNOTATIONS:
        if not isinstance(value, dict):
            return [f"{path} is {describe(value)}, not annotations (a map) {where}"]
        return [f"{path} has {describe(key)} key {key!r}: annotations' keys are symbols or ulongs (3.2.10)"
                for key in value if type(key) not in (symbol, ulong)][:1]
    if kind == "application-properties":
        if not isinstance(value, dict):
            return [f"{path} is {describe(value)}, not a map {where}"]
        keys = [key for key in value if type(key) is not str]
        values = [key for key, item in value.items() if isinstance(item, NOT_SIMPLE)]
        return ([f"{path} has {describe(keys[0])} key {keys[0]!r}: its keys are strings {where}"] if keys else []) + \
            ([f"{path}[{values[0]!r}] is {describe(value[values[0]])}, not of a simple type {where}"] if values else [])
    if kind == "data" and not isinstance(value, (bytes, memoryview)):
        return [f"{path} is {describe(value)}, not binary {where}"]
    if kind == "amqp-sequence" and not isinstance(value, list):
        return [f"{path} is {describe(value)}, not a list {where}"]
    return []


def delivered_message_problems(frames: Iterable[Frame]) -> list[str]:
    """:func:`message_problems` of every whole message of format 0 the broker delivered on one connection
    (``frames``, its capture: the transfers in direction ``in``), each distinct line once; a delivery cut short or
    aborted is no whole message and is not judged."""
    seen: dict[str, None] = {}
    for transfers in deliveries(frames, "in"):
        last, first = transfers[-1].fields, transfers[0].fields
        if last.get("more") or last.get("aborted") or first.get("message-format") not in (None, 0):
            continue
        seen.update(dict.fromkeys(message_problems(payload_of(transfers))))
    return list(seen)


def path_problem(path: str) -> str | None:
    """Why ``path`` names no field of a frame (:func:`.wire_types.field_path_problem`) nor a part of a message: the
    message (``message``), one of its sections (``message.properties``, ``message.data``) or a field of its header
    or properties (``message.header.durable``); None when it names one. The problem lists what could come next."""
    first, *rest = path.split(".")
    if first != "message":
        return field_path_problem(path)
    kinds = list(CODES.values())
    if rest and rest[0] not in kinds:
        return f"message has no section {rest[0]!r} (it has: {', '.join(kinds)})"
    if len(rest) > 1 and rest[0] not in ("header", "properties"):
        return f"message.{rest[0]} has no fields to name (only message.header and message.properties have)"
    if len(rest) > 1 and rest[1] not in BY_NAME[rest[0]].fields:
        return f"message.{rest[0]} has no field {rest[1]!r} (it has: {', '.join(BY_NAME[rest[0]].fields)})"
    if len(rest) > 2:
        return f"message.{rest[0]}.{rest[1]} has no fields"
    return None
