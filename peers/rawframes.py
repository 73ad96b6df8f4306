"""Frames written as data: turn a case table's frame specification into the bytes to write in raw mode.

A negative case must be able to send anything, also what proton would never produce, yet read like the
specification. A frame specification is a dict (a TOML inline table):

- ``raw = "hex"``: these bytes, verbatim (a protocol header, half a frame, garbage);
- ``performative = "transfer"`` with ``fields = {...}``: the performative, encoded by ``proton.Data`` via
  :func:`frames.described`. Each plain value is given the type the specification gives that field
  (``handle = 7`` is a uint, ``delivery-tag = "t1"`` a binary, ``role = "receiver"`` the boolean true);
  a table with ``"@type"`` is a described type (``state = { "@type" = "accepted" }``);
  ``{ "@as" = "string", value = 7 }`` forces an encoding (an ill-typed field on purpose);
  ``{ "@described" = 153, value = [] }`` is a described value with any numeric descriptor;
- ``body = "hex"`` instead of a performative: the frame body bytes verbatim;
- ``payload = { message = "m1" }`` (an encoded AMQP message with that body) or ``payload = "hex"``;
- ``channel`` (default ``"$channel"``), ``type`` (0 AMQP, 1 SASL, or anything), ``doff``, ``size_delta``
  (added to the true size, to make the size field lie), ``truncate_body`` (keep only that many body
  bytes), ``pad_to`` (zero bytes after the body until the frame has that size), ``repeat`` (send it that
  many times), ``subject`` (the field names this frame breaks on purpose: every other field is well-formed,
  checked by ``peers/tests/test_raw_wellformed.py``).

Strings starting with ``$`` are placeholders resolved from a :class:`RawContext` (``$channel``, ``$handle``,
``$delivery-id``: the next delivery-id of the session, taken once per use, ``$tag``: a fresh delivery tag,
``$credit``: the link credit the broker granted, ``$link-name``: the name of the set-up's link (a second link
may share it, one each way), ``$node``: the case's node address, ``$container-id``: a
container-id of the case's own (a second open's, say: unique to the case run like its node, so cases side by
side never present one container-id twice; ActiveMQ Classic refuses one that is already connected), ``$max-frame-size``,
``$channel-max``, ``$handle-max``; ``$<number>+1``: one more, e.g. ``$handle+1``). Nothing here is a codec: every
value is encoded by ``proton.Data``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from proton import Described, Message, symbol, ubyte, uint, ulong, ushort

from .amqp_types import BY_NAME, CHOICE_FIELDS, DESCRIBED_TYPES, choice_value
from .frames import FRAME_TYPE_AMQP, encode_frame, encode_value
from .turns import shared

MAX_PAD = 16 * 1024 * 1024


class FrameSpecError(ValueError):
    """A frame specification that cannot be turned into bytes; the message names the key."""


class BeyondLimit(FrameSpecError):
    """A row asks for one above a limit the broker announced, and the limit is already the largest value its
    field can carry (``channel-max`` 65535, ``handle-max`` 2^32-1): no such frame exists, so the condition
    the row is about cannot arise with this broker."""


# The largest value each announced limit's field can carry (2.7.1 open, 2.7.2 begin: ushort, uint, uint).
LIMIT_MAXIMA = {"channel-max": 0xFFFF, "handle-max": 0xFFFFFFFF, "max-frame-size": 0xFFFFFFFF}


# The encoding a plain value of each field is given (2.7, 2.8, 3.4, 3.5): its type in amqp_types, a field whose
# type is an archetype ("described") taken as the table gives it (``{ "@type" = ... }``).
_ENCODING = {"boolean": "bool", "address": "string", "filter-set": "fields", "delivery-state": "described",
             "outcome": "described", "error": "described", "source": "described", "target": "described"}
FIELD_TYPES: dict[str, str] = {spec.name: _ENCODING.get(spec.type, spec.type)
                               for kind in DESCRIBED_TYPES
                               if kind.section[0] in "23" and not kind.section.startswith("3.2.")  # not a message's
                               for spec in kind.specs}


def _coerce(kind: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        if kind == "uint":
            return uint(value)
        if kind == "ulong":
            return ulong(value)
        if kind == "ushort":
            return ushort(value)
        if kind == "ubyte":
            return ubyte(value)
        if kind in ("int", "long"):
            from proton import int32

            return int32(value) if kind == "int" else int(value)
        if kind == "bool":
            return bool(value) if isinstance(value, bool) else value
        if kind == "symbol":
            return [symbol(v) for v in value] if isinstance(value, list) else symbol(str(value))
        if kind == "string":
            return str(value)
        if kind == "binary":
            return value if isinstance(value, bytes) else str(value).encode("utf-8")
        if kind == "fields":
            return {symbol(k): v for k, v in dict(value).items()}
        if kind in ("map", "list", "described", "null"):
            return None if kind == "null" else value
    except (TypeError, ValueError, AssertionError) as exc:
        raise FrameSpecError(f"cannot encode {value!r} as {kind}: {exc}") from None
    raise FrameSpecError(f"unknown encoding {kind!r} (known: bool, ubyte, ushort, uint, ulong, int, long, "
                         f"symbol, string, binary, fields, map, list, null)")


@dataclass
class RawContext:
    """What placeholders resolve to on one connection: our channel, link handle, credit and limits."""

    channel: int = 0
    handle: int = 0
    credit: int = 0
    next_delivery_id: int = 0
    node: str = ""  # the case's node address (a target or source address)
    link_name: str = ""  # the name of the link the set-up attached, if any (a second link may share it: 2.6.1)
    limits: dict[str, int] = field(default_factory=dict)  # "max-frame-size", "channel-max", "handle-max"
    _tags: itertools.count = field(default_factory=lambda: itertools.count(1))

    def resolve(self, name: str) -> Any:
        """The value of placeholder ``name`` (``$delivery-id`` and ``$tag`` advance on each use; ``$<name>+1`` is
        one more than a numeric placeholder, e.g. ``$handle+1`` for a second link, ``$channel-max+1``)."""
        key = name[1:]
        if key == "delivery-id":
            value = self.next_delivery_id
            self.next_delivery_id += 1
            return value
        if key == "tag":
            return f"raw-{next(self._tags)}".encode()
        plain: dict[str, Any] = {"channel": self.channel, "handle": self.handle, "credit": self.credit,
                                 "node": self.node, "container-id": f"{self.node}.again", **self.limits}
        if self.link_name:  # a set-up without a link has no name to give: $link-name is then unknown, not ""
            plain["link-name"] = self.link_name
        if key in plain:
            return plain[key]
        base = key.removesuffix("+1")
        if base != key and isinstance(plain.get(base), int):
            if base in self.limits and plain[base] >= LIMIT_MAXIMA.get(base, plain[base] + 1):
                raise BeyondLimit(f"the broker announced {base} {int(plain[base])}, the largest value the field can "
                                  f"carry: nothing is above it, so {name} cannot be sent")
            return plain[base] + 1
        raise FrameSpecError(f"unknown placeholder {name!r} (known: $delivery-id, $tag, "
                             f"{', '.join('$' + k for k in plain)}, and $<number>+1)")


def _value(value: Any, ctx: RawContext, field_name: str | None = None, owner: str | None = None) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        value = ctx.resolve(value)
    if isinstance(value, dict):
        if "@as" in value:
            return _coerce(value["@as"], _value(value.get("value"), ctx))
        if "@described" in value:
            return Described(ulong(int(value["@described"])), _value(value.get("value"), ctx))
        if "@hex" in value:
            return bytes.fromhex(value["@hex"])
        if "@type" in value:
            return _described(value["@type"], {k: v for k, v in value.items() if k != "@type"}, ctx)
        return {symbol(k) if isinstance(k, str) else k: _value(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(v, ctx) for v in value]
    if owner is not None and field_name is not None and (owner, field_name) in CHOICE_FIELDS \
            and isinstance(value, str):
        value = choice_value(owner, field_name, value)
    if field_name in FIELD_TYPES and not isinstance(value, bytes):
        return _coerce(FIELD_TYPES[field_name], value)
    return value


def _described(type_name: str, fields: dict[str, Any], ctx: RawContext) -> Described:
    if type_name not in BY_NAME:
        raise FrameSpecError(f"unknown described type {type_name!r}")
    spec = BY_NAME[type_name]
    unknown = set(fields) - set(spec.fields)
    if unknown:
        raise FrameSpecError(f"{type_name} has no field(s) {sorted(unknown)}; fields: {list(spec.fields)}")
    values = [_value(fields.get(name), ctx, name, type_name) for name in spec.fields]
    while values and values[-1] is None:
        values.pop()
    return Described(ulong(spec.code), values)


def frame_bytes(spec: dict[str, Any], ctx: RawContext) -> bytes:
    """The bytes of one frame specification (``repeat`` included), placeholders resolved from ``ctx``."""
    return b"".join(frames_of(spec, ctx))


def frames_of(spec: dict[str, Any], ctx: RawContext) -> list[bytes]:
    """Each frame one frame specification makes (one per ``repeat``), in order, placeholders resolved from
    ``ctx`` (``$delivery-id`` and ``$tag`` advancing from one to the next)."""
    times = spec.get("repeat", 1)
    times = ctx.resolve(times) if isinstance(times, str) else int(times)
    payload = _payload(spec)  # encoded once: every repeat carries the same bytes (a credit can be 65536)
    return [_one_frame(spec, ctx, payload) for _ in shared(range(times))]


def _payload(spec: dict[str, Any]) -> bytes:
    payload = spec.get("payload", b"")
    if isinstance(payload, dict):
        return Message(body=payload.get("message")).encode()
    return bytes.fromhex(payload) if isinstance(payload, str) else payload


def _one_frame(spec: dict[str, Any], ctx: RawContext, payload: bytes) -> bytes:
    if "raw" in spec:
        return bytes.fromhex(spec["raw"])
    if "body" in spec:
        body = bytes.fromhex(spec["body"])
    elif "performative" in spec:
        body = encode_value(_described(spec["performative"], dict(spec.get("fields", {})), ctx))
    else:
        raise FrameSpecError("a frame needs 'raw', 'body' or 'performative'")
    if "truncate_body" in spec:
        body = body[: int(spec["truncate_body"])]
    channel = _value(spec.get("channel", "$channel"), ctx)
    frame = encode_frame(body, channel=int(channel), frame_type=int(spec.get("type", FRAME_TYPE_AMQP)),
                         payload=payload, doff=int(spec.get("doff", 2)))
    if "pad_to" in spec:  # zero bytes after the performative until the frame is exactly this size
        target = ctx.resolve(spec["pad_to"]) if isinstance(spec["pad_to"], str) else int(spec["pad_to"])
        if target > MAX_PAD:
            raise FrameSpecError(f"pad_to {target} is beyond what a case sends ({MAX_PAD} bytes)")
        frame += b"\x00" * max(0, target - len(frame))
        frame = len(frame).to_bytes(4, "big") + frame[4:]
    if "size_delta" in spec:
        size = len(frame) + int(spec["size_delta"])
        frame = size.to_bytes(4, "big") + frame[4:]
    return frame


def check_spec(spec: Any) -> str | None:
    """Why ``spec`` is not a usable frame specification, or None (used when tables load)."""
    known = {"raw", "body", "performative", "fields", "payload", "channel", "type", "doff", "size_delta",
             "truncate_body", "repeat", "note", "pad_to", "subject"}
    if not isinstance(spec, dict):
        return "a frame must be a table"
    unknown = set(spec) - known
    if unknown:
        return f"unknown frame key(s) {sorted(unknown)} (known: {', '.join(sorted(known))})"
    if sum(k in spec for k in ("raw", "body", "performative")) != 1:
        return "a frame needs exactly one of 'raw', 'body', 'performative'"
    if "performative" in spec and spec["performative"] not in BY_NAME:
        return f"unknown performative {spec['performative']!r}"
    try:
        frame_bytes(spec, RawContext(limits={"max-frame-size": 512, "channel-max": 0, "handle-max": 0}, credit=1,
                                     link_name="link"))
    except (FrameSpecError, KeyError, ValueError, TypeError) as exc:
        return str(exc)
    return None
