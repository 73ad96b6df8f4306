"""peers.wire_types: every field of every composite type in amqp_types is held to its type, at any depth."""

from __future__ import annotations

import pytest
from amqp_conformance.peers.amqp_types import ALLOWED_VALUES, BY_NAME, DESCRIBED_TYPES, FieldSpec
from amqp_conformance.peers.frames import FrameSplitter, described, encode_frame, encode_value
from amqp_conformance.peers.wire_types import ARCHETYPES, body_problems, broker_frame_problems, frame_problems
from proton import UNDESCRIBED, Array, Data, Described, symbol, timestamp, ubyte, uint, ulong, ushort

PRIMITIVE_VALUES = {
    "boolean": True, "ubyte": ubyte(0), "ushort": ushort(1), "uint": uint(1), "ulong": ulong(1), "string": "s",
    "symbol": symbol("s"), "binary": b"b", "map": {}, "fields": {symbol("k"): 1}, "filter-set": {},
    "timestamp": timestamp(1), "address": "a", "message-id": "m", "any": None,
}
# a value of another type than each field type (for an archetype: a described value that provides none)
WRONG_VALUES = {
    "boolean": ubyte(1), "ubyte": uint(0), "ushort": uint(1), "uint": ulong(1), "ulong": uint(1),
    "string": symbol("s"), "symbol": "s", "binary": "b", "map": [], "fields": [], "filter-set": "f",
    "timestamp": ulong(1), "address": symbol("a"), "message-id": 1.5,
}


def valid(spec: FieldSpec, owner: str) -> object:
    """A value of the type ``spec`` gives, one of its choices where it has some."""
    allowed = ALLOWED_VALUES.get((owner, spec.name))
    if allowed is not None:
        choice = min(allowed, key=str)
        if isinstance(choice, str):
            return symbol(choice)
        return {"ubyte": ubyte, "uint": uint}.get(spec.type, bool)(choice)
    if spec.type in ARCHETYPES:
        return composite(ARCHETYPES[spec.type][0])
    return PRIMITIVE_VALUES[spec.type]


def composite(type_name: str, /, **fields: object) -> Described:
    """A described ``type_name`` with its mandatory fields valid and ``fields`` as given."""
    kind = BY_NAME[type_name]
    values = {spec.name: valid(spec, type_name) for spec in kind.specs if spec.mandatory}
    values.update(fields)
    return Described(ulong(kind.code), [values.get(field) for field in kind.fields])


FIELDS = [(kind.name, spec) for kind in DESCRIBED_TYPES for spec in kind.specs]


@pytest.mark.parametrize(("owner", "spec"), FIELDS, ids=[f"{owner}.{spec.name}" for owner, spec in FIELDS])
def test_each_field_is_held_to_its_type(owner: str, spec: FieldSpec) -> None:
    """A valid value passes (a multiple one also as an array); a value of another type, and a list where a
    multiple field wants an array, is one problem naming the field's path and its section."""
    good = valid(spec, owner)
    assert body_problems(encode_value(composite(owner, **{spec.name: good}))) == []
    if spec.multiple:
        array = Array(UNDESCRIBED, Data.SYMBOL, good, symbol("t"))
        assert body_problems(encode_value(composite(owner, **{spec.name: array}))) == []
        for wrong in ([good], Array(UNDESCRIBED, Data.STRING, "s")):
            problems = body_problems(encode_value(composite(owner, **{spec.name: wrong})))
            assert len(problems) == 1 and problems[0].startswith(f"{owner}.{spec.name} is "), problems
    if spec.type == "any":
        return
    wrong = composite("header") if spec.type in ARCHETYPES else WRONG_VALUES[spec.type]
    problems = body_problems(encode_value(composite(owner, **{spec.name: wrong})))
    assert len(problems) == 1 and problems[0].startswith(f"{owner}.{spec.name} is "), problems
    assert problems[0].endswith(f"({BY_NAME[owner].section})"), problems


MANDATORY = [(owner, spec) for owner, spec in FIELDS if spec.mandatory]


@pytest.mark.parametrize(("owner", "spec"), MANDATORY, ids=[f"{owner}.{spec.name}" for owner, spec in MANDATORY])
def test_a_mandatory_field_must_not_be_null(owner: str, spec: FieldSpec) -> None:
    """A mandatory field encoded as null, or left off the end of the list, is a problem; no other field is."""
    kind = BY_NAME[owner]
    values = composite(owner, **{spec.name: None}).value
    assert body_problems(encode_value(Described(ulong(kind.code), values))) == \
        [f"{owner}.{spec.name} is mandatory but null ({kind.section})"]
    shortened = values[:kind.fields.index(spec.name)]
    assert f"{owner}.{spec.name} is mandatory but null ({kind.section})" in \
        body_problems(encode_value(Described(ulong(kind.code), shortened)))


# the restricted types with a value of their type outside their choices (a role's choices are both booleans)
RESTRICTED = [key for key in sorted(ALLOWED_VALUES) if ALLOWED_VALUES[key] != {False, True}]


@pytest.mark.parametrize(("owner", "field"), RESTRICTED)
def test_a_restricted_type_holds_one_of_its_choices(owner: str, field: str) -> None:
    """A value of the right type outside the choices (a settle mode of 9, an expiry policy "later") is a
    problem."""
    spec = BY_NAME[owner].specs[BY_NAME[owner].fields.index(field)]
    outside = {"ubyte": ubyte(9), "uint": uint(9), "symbol": symbol("later")}[spec.type]
    problems = body_problems(encode_value(composite(owner, **{field: outside})))
    assert len(problems) == 1 and "not one of its choices" in problems[0], problems


def test_nested_values_are_checked_at_any_depth() -> None:
    """A transactional-state's outcome's error's info, and a source's capabilities inside an attach, are
    reached; the path names each level."""
    bad_info = composite("error", info={"text-key": 1})
    state = composite("transactional-state", outcome=composite("rejected", error=bad_info))
    body = encode_value(composite("disposition", state=state))
    assert body_problems(body) == ["disposition.state.outcome.error.info has a string key 'text-key': a fields "
                                   "map's keys are symbols (2.8.14)"]
    source = composite("source", capabilities=[symbol("queue")])
    problems = body_problems(encode_value(composite("attach", source=source)))
    assert problems == ["attach.source.capabilities is a list, not symbol or an array of symbol (multiple, "
                        "1.6.5) (3.5.3)"]


def test_an_array_element_of_a_restricted_type_is_checked() -> None:
    """Each element of a multiple field's array is held to the type: an array of symbols is well typed."""
    array = Array(UNDESCRIBED, Data.SYMBOL, symbol("a"), symbol("b"))
    assert body_problems(encode_value(composite("open", **{"offered-capabilities": array}))) == []
    assert body_problems(encode_value(composite("open", **{"outgoing-locales": Array(UNDESCRIBED, Data.ULONG,
                                                                                     ulong(1))}))) == \
        ["open.outgoing-locales is an array of ulong, not of symbol (2.7.1)"]


def test_bodies_that_are_no_performative() -> None:
    """An empty body (a heartbeat) has no problem; an undecodable one, and a described value that is no
    composite type in the table, one each."""
    assert body_problems(b"") == []
    assert body_problems(b"\x00\x53")[0].startswith("the frame body does not decode")
    assert body_problems(encode_value(Described(ulong(0x99), []))) == \
        ["the frame body is a described value (ulong(153)), not a performative"]
    assert body_problems(encode_value("text")) == ["the frame body is a string, not a performative"]


def test_broker_frame_problems_reads_only_the_broker_s_frames_once_each() -> None:
    """Only frames the broker sent (direction "in") count; a problem in two frames is one line."""
    bad = encode_frame(described("flow", **{"incoming-window": uint(1), "next-outgoing-id": uint(0),
                                             "outgoing-window": ulong(1)}))
    inbound = FrameSplitter("in").feed(bad + bad)
    outbound = FrameSplitter("out").feed(bad)
    assert broker_frame_problems(outbound) == []
    assert broker_frame_problems(inbound) == ["flow.outgoing-window is a ulong, not uint (2.7.4)"]
    assert frame_problems(FrameSplitter("in").feed(b"AMQP\x00\x01\x00\x00")[0]) == []
