"""peers.message_types: a delivered message's sections held to the types and order 3.2 gives them."""

from __future__ import annotations

import pytest
from amqp_conformance.peers.frames import FrameSplitter, described, encode_frame, encode_value
from amqp_conformance.peers.message_types import delivered_message_problems, message_problems
from proton import Described, Message, symbol, timestamp, ubyte, uint, ulong


def section(code: int, value: object) -> bytes:
    return encode_value(Described(ulong(code), value))


HEADER = section(0x70, [True, ubyte(4), uint(1000)])
PROPERTIES = section(0x73, ["id-1", b"user", "queue", "subject", None, ulong(7), symbol("text/plain"), None,
                            timestamp(5), timestamp(6), "group", uint(1)])
APPLICATION = section(0x74, {"colour": "red", "n": 3})
ANNOTATIONS = section(0x72, {symbol("x-opt-a"): 1, ulong(9): "by number"})
VALUE = section(0x77, "body")


def test_a_message_proton_encodes_has_no_problem() -> None:
    message = Message(body="b", durable=True, priority=7, ttl=2.5, id="m1", subject="s", creation_time=1.5,
                      properties={"k": "v"}, annotations={symbol("x-opt-k"): 1}, instructions={symbol("i"): 2})
    assert message_problems(message.encode()) == []
    assert message_problems(HEADER + ANNOTATIONS + PROPERTIES + APPLICATION + VALUE) == []
    assert message_problems(section(0x75, b"a") + section(0x75, b"b") + section(0x78, {symbol("f"): 1})) == []


@pytest.mark.parametrize(("payload", "problem"), [
    (section(0x70, [ubyte(1)]) + VALUE, "message.header.durable is a ubyte, not boolean (3.2.1)"),
    (section(0x70, [None, uint(4)]) + VALUE, "message.header.priority is a uint, not ubyte (3.2.1)"),
    (section(0x73, [1.5]) + VALUE, "message.properties.message-id is a double, not message-id (3.2.4)"),
    (section(0x73, [None] * 8 + [ulong(5)]) + VALUE,
     "message.properties.absolute-expiry-time is a ulong, not timestamp (3.2.4)"),
    (section(0x72, {"x-opt-a": 1}) + VALUE,
     "message.message-annotations has a string key 'x-opt-a': annotations' keys are symbols or ulongs (3.2.10)"),
    (section(0x74, {symbol("k"): 1}) + VALUE,
     "message.application-properties has a symbol key symbol('k'): its keys are strings (3.2.5)"),
    (section(0x74, {"k": [1]}) + VALUE, "message.application-properties['k'] is a list, not of a simple type (3.2.5)"),
    (section(0x75, "text"), "message.data is a string, not binary (3.2.6)"),
    (section(0x76, "text"), "message.amqp-sequence is a string, not a list (3.2.7)"),
    (PROPERTIES + HEADER + VALUE, "message.header comes after message.properties, out of the order 3.2 gives the "
                                  "sections (each once, the body as data sections, amqp-sequence sections or one "
                                  "amqp-value)"),
    (VALUE + VALUE, "message.amqp-value comes after message.amqp-value, out of the order"),
    (section(0x75, b"a") + section(0x76, [1]), "message.amqp-sequence comes after message.data, out of the order"),
    (HEADER + HEADER + VALUE, "message.header comes after message.header, out of the order"),
])
def test_each_section_is_held_to_its_type_and_place(payload: bytes, problem: str) -> None:
    found = message_problems(payload)
    assert len(found) == 1 and found[0].startswith(problem), found


def test_a_value_that_is_no_section_ends_the_walk() -> None:
    """Bytes that are no section (a value in the middle of a body, say) are one problem, not one per value."""
    assert message_problems(HEADER + encode_value(uint(7)) * 50) == [
        "message: a section is a uint, not one of the described sections (3.2)"]
    assert message_problems(HEADER + VALUE[:-2])[0].startswith("message: its sections stop decoding")


def transfers(*specs: tuple[dict, bytes], direction: str = "in") -> list:
    splitter = FrameSplitter(direction)
    return [frame for fields, payload in specs
            for frame in splitter.feed(encode_frame(described("transfer", handle=uint(0), **fields), payload=payload))]


BAD = section(0x70, [ubyte(1)]) + VALUE
FIRST = {"delivery-id": uint(0), "delivery-tag": b"t", "more": True}


def test_a_whole_delivered_message_is_judged_once_reassembled() -> None:
    """The message's bytes split over transfers are judged as one message; a delivery cut short, aborted, of
    another message format, or sent by us, is not judged."""
    split = transfers((FIRST, BAD[:3]), ({"more": True}, BAD[3:9]), ({}, BAD[9:]))
    assert delivered_message_problems(split) == ["message.header.durable is a ubyte, not boolean (3.2.1)"]
    assert delivered_message_problems(transfers((FIRST, HEADER[:3]), ({}, HEADER[3:] + VALUE))) == []
    assert delivered_message_problems(transfers((FIRST, BAD[:3]))) == []  # cut short
    assert delivered_message_problems(transfers((FIRST, BAD[:3]), ({"aborted": True}, b""))) == []
    other_format = {"delivery-id": uint(0), "delivery-tag": b"t", "message-format": uint(1)}
    assert delivered_message_problems(transfers((other_format, BAD))) == []
    assert delivered_message_problems(transfers(({"delivery-id": uint(0), "delivery-tag": b"t"}, BAD),
                                                direction="out")) == []
