"""Whether each client's API told its caller the broker's open and attach as the wire carries them (sans-I/O):
their properties, offered- and desired-capabilities, and an attach's max-message-size (AMQP 1.0 2.7.1, 2.7.3).

A shim reports them in its ``connect`` reply (of the broker's open) and its ``attach`` reply (of the broker's
attach answering it), as its library's API gives them: null where the API told nothing, left out where the API
has no accessor for the field (peers/shims/README.md). A value told is held to the frame whatever the client's
profile claims; a client that claims ``remote-endpoint-fields`` is also held to telling each field its reply
carries (a null where the frame carries one is a line).

A shim's JSON cannot carry every AMQP type exactly, so a value is compared only where JSON can: text (symbols
too), booleans, integers JSON numbers hold exactly (below 2**53), floats, and maps (text keys) and lists of them;
a map's keys are always compared, a value of another type (binary, a described value, a uuid, a timestamp, a char,
a decimal) only for its presence. A field the frame leaves out, an empty map or list,
and a max-message-size of 0 (2.7.3: no limit) all mean none, and so do a null, an empty map or list and a 0 told.
Capabilities are a set of symbols sent as one symbol or an array (1.6.5 multiple): compared as sets.
"""

from __future__ import annotations

from typing import Any

import proton
from amqp_conformance.peers.frames import Frame, first_frame

from .interop_observe import CellFrames
from .interop_told import ApiClaims

# what a reply reports of the broker's frame: the reply's field and the frame's
OPEN_FIELDS = (("remote_properties", "properties"), ("remote_offered_capabilities", "offered-capabilities"),
               ("remote_desired_capabilities", "desired-capabilities"))
ATTACH_FIELDS = (*OPEN_FIELDS, ("remote_max_message_size", "max-message-size"))
CAPABILITY_FIELDS = ("offered-capabilities", "desired-capabilities")
EXACT_JSON_INTEGER = 2 ** 53  # JSON numbers hold integers exactly below this (IEEE 754 doubles)


def _none(value: Any, frame_field: str) -> bool:
    """Whether ``value`` (of the frame, or told) means the field is not there: left out, empty, or (for
    max-message-size) 0, no limit."""
    if value is None or value == {} or value == []:
        return True
    return frame_field == "max-message-size" and not isinstance(value, bool) and value == 0


# proton's scalars that subclass str or int but no API gives as that JSON value: a char (a code point), a
# timestamp (a date), the decimals (their IEEE 754 bits)
NOT_AS_JSON = (proton.char, proton.timestamp, proton.decimal32, proton.decimal64)
DESCRIBED_KEYS = ("@type", "@descriptor")  # how frames.normalize writes a described value: a map with one of these


def _comparable_scalar(value: Any) -> bool:
    """Whether a JSON reply can tell ``value`` exactly: text, a boolean, a float, an integer JSON holds exactly
    (not a char, a timestamp or a decimal: :data:`NOT_AS_JSON`)."""
    if isinstance(value, NOT_AS_JSON):
        return False
    if isinstance(value, bool | str | float):
        return True
    return isinstance(value, int) and abs(value) < EXACT_JSON_INTEGER


def agrees(wire: Any, told: Any) -> bool:
    """Whether ``told`` (a shim's JSON) tells the decoded frame value ``wire``: maps by their text keys, each
    value agreeing; lists element by element; a scalar JSON holds exactly by its value (a boolean only by a
    boolean); any other value (binary, described, uuid, timestamp, an integer past 2**53) by its presence alone."""
    if isinstance(wire, dict) and any(key in wire for key in DESCRIBED_KEYS):
        return True  # a described value: no API gives it as JSON the same way
    if isinstance(wire, dict):
        if not isinstance(told, dict) or {str(key) for key in wire} != set(told):
            return False
        return all(agrees(value, told[str(key)]) for key, value in wire.items())
    if isinstance(wire, list):
        return isinstance(told, list) and len(told) == len(wire) and all(map(agrees, wire, told))
    if not _comparable_scalar(wire):
        return True
    if isinstance(wire, bool) or isinstance(told, bool):
        return isinstance(wire, bool) and isinstance(told, bool) and wire == told
    return type(told) in (str, int, float) and isinstance(told, str) == isinstance(wire, str) and told == wire


def _listed(value: Any) -> list[Any]:
    """A multiple field's value as a list: one value or a list of them (1.6.5)."""
    return value if isinstance(value, list) else [value]


def field_agrees(frame_field: str, wire: Any, told: Any) -> bool:
    """Whether ``told`` tells the frame's ``frame_field`` ``wire``: both none (:func:`_none`), or the same
    capabilities as sets, or :func:`agrees`."""
    wire_none, told_none = _none(wire, frame_field), _none(told, frame_field)
    if wire_none or told_none:
        return wire_none and told_none
    if frame_field in CAPABILITY_FIELDS:
        told_set = _listed(told)
        return all(isinstance(item, str) for item in told_set) and \
            sorted(str(item) for item in _listed(wire)) == sorted(told_set)
    return agrees(wire, told)


def _shown(value: Any) -> str:
    """A frame value as a line shows it: plain text and numbers (a symbol as its text)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_shown(key)}: {_shown(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    if isinstance(value, bytes):
        return f"binary {value.hex()}"
    if isinstance(value, str):
        return repr(str(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    return repr(float(value)) if isinstance(value, float) else repr(value)


def _fields_disagreements(client: str, frame: Frame, reply: dict[str, Any], fields: tuple[tuple[str, str], ...],
                          claimed: bool) -> list[str]:
    """The lines where ``reply`` tells ``frame``'s fields otherwise (or, when ``claimed``, not at all)."""
    lines = []
    kind = frame.performative
    for reported, frame_field in fields:
        if reported not in reply:
            continue  # the API has no accessor for it: the shim leaves it out
        told, wire = reply[reported], frame.fields.get(frame_field)
        if told is None and not _none(wire, frame_field):
            if claimed:
                lines.append(f"{client}: its API did not tell the broker's {kind} {frame_field} (null; the broker's "
                             f"{kind} says {_shown(wire)}; its profile claims remote-endpoint-fields)")
        elif told is not None and not field_agrees(frame_field, wire, told):
            said = "none" if _none(wire, frame_field) else _shown(wire)
            lines.append(f"{client}: its API reported the broker's {kind} {frame_field} {told!r}, the broker's "
                         f"{kind} says {said}")
    return lines


def endpoint_disagreements(cell: CellFrames, connect_replies: dict[str, dict[str, Any]],
                           attach_replies: dict[str, dict[str, Any]], claims: ApiClaims) -> list[str]:
    """Where a client's connect or attach reply tells the broker's open or attach otherwise than the wire, one
    line each (module docstring). ``connect_replies``, ``attach_replies``: per role ("sender", "receiver"), the
    shim's successful reply; ``claims``: what each client's profile claims (here ``remote-endpoint-fields``)."""
    lines = []
    for role, client in (("sender", "sending client"), ("receiver", "receiving client")):
        connection = cell.by_role[role]
        claimed = bool(claims.remote_endpoint_fields.get(role))
        broker_open, reply = first_frame(connection.frames, "open", "in"), connect_replies.get(role)
        if broker_open is not None and reply is not None:
            lines += _fields_disagreements(client, broker_open, reply, OPEN_FIELDS, claimed)
        attach, reply = connection.attach, attach_replies.get(role)
        if attach is not None and reply is not None:
            lines += _fields_disagreements(client, attach, reply, ATTACH_FIELDS, claimed)
    return lines
