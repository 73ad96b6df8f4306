"""Tests for amqp_conformance.peers.frames: splitting, decoding, encoding and redaction of AMQP 1.0 frames.

Spec references are to the OASIS AMQP 1.0 specification (2012): part 2.2 version negotiation (protocol
headers), 2.3 framing, 2.7 performatives, 2.8 restricted types, 3.4 delivery states, 5.3 SASL.
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from amqp_conformance.peers.amqp_types import BY_NAME, DELIVERY_STATE_NAMES, type_of
from amqp_conformance.peers.engine import CapturingEngine
from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    FRAME_TYPE_AMQP,
    FRAME_TYPE_SASL,
    SASL_HEADER,
    Frame,
    FrameSplitter,
    FramingError,
    described,
    encode_frame,
    encode_value,
    first_frame,
    normalize,
    redact_frame,
    to_jsonable,
)
from proton import Array, Data, Described, symbol, ubyte, uint, ulong

# --- golden bytes (seed-002 disposition) -----------------------------------------------------------

# 2.3.1 frame header, then a 2.7.6 disposition performative.
SEED_002_DISPOSITION = bytes.fromhex(
    "00000016"  # size = 22
    "02"  # doff = 2 (8-byte header)
    "00"  # type = 0 (AMQP frame)
    "0000"  # channel = 0
    "005315"  # described, descriptor smallulong 0x15 = amqp:disposition:list
    "c00905"  # list8, size 9, count 5
    "41"  # role = true (receiver)
    "43"  # first = uint0 (0)
    "40"  # last = null
    "41"  # settled = true
    "005324"  # state = described, descriptor smallulong 0x24 = amqp:accepted:list
    "45"  # list0 (accepted has no fields)
)
# Decoded: disposition(role=receiver, first=0, last=null, settled=true, state=accepted)
SEED_002_FIELDS = {"role": "receiver", "first": 0, "last": None, "settled": True, "state": {"@type": "accepted"}}


def test_golden_disposition_decodes_to_named_fields():
    frames = FrameSplitter("in").feed(SEED_002_DISPOSITION)
    assert len(frames) == 1
    frame = frames[0]
    assert frame.direction == "in"
    assert frame.channel == 0
    assert frame.frame_type == FRAME_TYPE_AMQP
    assert frame.performative == "disposition"
    assert frame.fields == SEED_002_FIELDS
    assert frame.payload_len == 0
    assert frame.raw == SEED_002_DISPOSITION


def test_golden_disposition_round_trips_through_encode_frame():
    # proton picks its own list width (list32), so compare decoded fields, not bytes.
    rebuilt = encode_frame(described("disposition", role=True, first=uint(0), settled=True,
                                     state=described("accepted")))
    assert FrameSplitter("in").feed(rebuilt)[0].fields == SEED_002_FIELDS


@pytest.mark.parametrize("cut", range(1, len(SEED_002_DISPOSITION)))
def test_golden_disposition_split_at_every_boundary(cut):
    splitter = FrameSplitter("in")
    first = splitter.feed(SEED_002_DISPOSITION[:cut])
    assert first == []
    assert splitter.buffered == cut
    (frame,) = splitter.feed(SEED_002_DISPOSITION[cut:])
    assert frame.performative == "disposition"
    assert frame.fields == SEED_002_FIELDS
    assert frame.raw == SEED_002_DISPOSITION
    assert splitter.buffered == 0


def test_golden_disposition_byte_by_byte():
    splitter = FrameSplitter("in")
    frames = []
    for i in range(len(SEED_002_DISPOSITION)):
        frames += splitter.feed(SEED_002_DISPOSITION[i:i + 1])
    assert [(f.performative, f.fields, f.raw) for f in frames] == [
        ("disposition", SEED_002_FIELDS, SEED_002_DISPOSITION)
    ]


# --- a whole connection preamble: headers, SASL frames, AMQP frames, heartbeat ------------------------

EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # 2.4.5: a frame with no body is a heartbeat

# Literal frames
LITERAL_SASL_OUTCOME = bytes.fromhex(
    "00000010" "02" "01" "0000"  # size 16, doff 2, type 1 (SASL), channel 0
    "005344" "c00301" "5000"  # sasl-outcome (5.3.3.6): list8 size 3 count 1, code = ubyte 0 (ok)
)
LITERAL_OPEN = bytes.fromhex(
    "00000012" "02" "00" "0000"  # size 18, doff 2, type 0, channel 0
    "005310" "c00501" "a1026331"  # open (2.7.1): list8 size 5 count 1, container-id = str8 "c1"
)

ENCODED_SASL_INIT = encode_frame(described("sasl-init", mechanism=symbol("ANONYMOUS")), frame_type=FRAME_TYPE_SASL)
ENCODED_BEGIN = encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(100),
                                       outgoing_window=uint(100)), channel=1)

LITERAL_STREAM = SASL_HEADER + LITERAL_SASL_OUTCOME + AMQP_HEADER + LITERAL_OPEN + EMPTY_FRAME
ENCODED_STREAM = SASL_HEADER + ENCODED_SASL_INIT + AMQP_HEADER + ENCODED_BEGIN + EMPTY_FRAME

STREAMS = {
    "literal": (LITERAL_STREAM, ["sasl-header", "sasl-outcome", "amqp-header", "open", "empty"]),
    "encoded": (ENCODED_STREAM, ["sasl-header", "sasl-init", "amqp-header", "begin", "empty"]),
}


def _split(stream: bytes, cuts: list[int]) -> list:
    splitter = FrameSplitter("in")
    frames = []
    bounds = [0, *cuts, len(stream)]
    for start, end in pairwise(bounds):
        frames += splitter.feed(stream[start:end])
    assert splitter.buffered == 0
    return frames


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_stream_in_one_chunk(name):
    stream, expected = STREAMS[name]
    frames = _split(stream, [])
    assert [f.performative for f in frames] == expected
    assert b"".join(f.raw for f in frames) == stream


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_stream_split_at_every_boundary(name):
    stream, expected = STREAMS[name]
    for cut in range(1, len(stream)):
        frames = _split(stream, [cut])
        assert [f.performative for f in frames] == expected, f"cut at {cut}"
        assert b"".join(f.raw for f in frames) == stream, f"cut at {cut}"


@pytest.mark.parametrize("name", sorted(STREAMS))
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 8, 13])
def test_stream_fixed_chunk_sizes(name, chunk):
    stream, expected = STREAMS[name]
    frames = _split(stream, list(range(chunk, len(stream), chunk)))
    assert [f.performative for f in frames] == expected


def test_stream_frame_details():
    frames = _split(LITERAL_STREAM, [])
    sasl_header, outcome, amqp_header, open_, empty = frames
    assert sasl_header.fields == {"protocol-id": 3, "version": [1, 0, 0]}  # 5.3.2
    assert amqp_header.fields == {"protocol-id": 0, "version": [1, 0, 0]}  # 2.2
    assert outcome.frame_type == FRAME_TYPE_SASL and outcome.fields == {"code": 0}
    assert open_.frame_type == FRAME_TYPE_AMQP and open_.fields == {"container-id": "c1"}
    assert empty.fields == {} and empty.payload == b""

    begin = _split(ENCODED_STREAM, [])[3]
    assert begin.channel == 1
    assert begin.fields == {"remote-channel": None, "next-outgoing-id": 0, "incoming-window": 100,
                            "outgoing-window": 100}


def test_extended_header_is_skipped():
    # 2.3.1: doff counts 4-byte words; bytes between the 8-byte header and doff*4 are the extended header.
    raw = encode_frame(described("close"), doff=3)
    assert raw[8:12] == b"\x00\x00\x00\x00"
    (frame,) = FrameSplitter("in").feed(raw)
    assert frame.performative == "close"
    assert frame.raw == raw


# --- transfer with payload -------------------------------------------------------------------------

def test_transfer_payload_follows_performative():
    # 2.3.2: the payload (message sections) follows the performative in the frame body.
    raw = encode_frame(described("transfer", handle=0, delivery_id=5, delivery_tag=b"tag", more=True),
                       payload=b"xyz")
    (frame,) = FrameSplitter("in").feed(raw)
    assert frame.performative == "transfer"
    assert frame.fields["handle"] == 0
    assert frame.fields["delivery-id"] == 5
    assert frame.fields["delivery-tag"] == b"tag"
    assert isinstance(frame.fields["delivery-tag"], bytes)
    assert frame.fields["more"] is True
    assert frame.payload == b"xyz"
    assert frame.payload_len == 3
    assert "+3B payload" in frame.describe()


# --- invalid framing -------------------------------------------------------------------------------

BAD_HEADERS = [
    pytest.param(b"\x00\x00\x00\x04\x02\x00\x00\x00", 1024, id="size-below-8"),
    pytest.param(b"\x00\x00\x00\x00\x02\x00\x00\x00", 1024, id="size-zero"),
    pytest.param(b"\x00\x00\x00\x08\x01\x00\x00\x00", 1024, id="doff-1"),
    pytest.param(b"\x00\x00\x00\x08\x00\x00\x00\x00", 1024, id="doff-0"),
    pytest.param(b"\x00\x00\x00\x08\x03\x00\x00\x00", 1024, id="doff-beyond-size"),
    pytest.param(b"\x00\x00\x04\x01\x02\x00\x00\x00", 1024, id="size-above-limit"),
]


@pytest.mark.parametrize(("header", "limit"), BAD_HEADERS)
def test_invalid_frame_header_raises_with_offending_bytes(header, limit):
    # 2.3.1: SIZE >= 8 and DOFF >= 2; a frame above the limit is refused to bound buffering.
    splitter = FrameSplitter("in", size_limit=limit)
    with pytest.raises(FramingError) as info:
        splitter.feed(header)
    assert info.value.offending == header
    assert header.hex() in str(info.value)


@pytest.mark.parametrize(("header", "limit"), BAD_HEADERS)
def test_splitter_stays_broken_after_framing_error(header, limit):
    splitter = FrameSplitter("in", size_limit=limit)
    with pytest.raises(FramingError):
        splitter.feed(header)
    for later in (b"", EMPTY_FRAME, AMQP_HEADER, SEED_002_DISPOSITION):
        with pytest.raises(FramingError):
            splitter.feed(later)


def test_size_at_limit_is_accepted_and_one_above_is_not():
    frame = encode_frame(described("close"))
    assert FrameSplitter("in", size_limit=len(frame)).feed(frame)[0].performative == "close"
    with pytest.raises(FramingError):
        FrameSplitter("in", size_limit=len(frame) - 1).feed(frame)


def test_bad_frame_after_good_one_raises_on_feed():
    splitter = FrameSplitter("in")
    bad = b"\x00\x00\x00\x02\x02\x00\x00\x00"
    with pytest.raises(FramingError) as info:
        splitter.feed(SEED_002_DISPOSITION + bad)
    assert info.value.offending == bad


def test_framing_error_detected_before_whole_bad_frame_arrives():
    # The header alone is enough to know a 100-byte frame exceeds a 64-byte limit.
    splitter = FrameSplitter("in", size_limit=64)
    assert splitter.feed(b"\x00\x00\x00") == []
    with pytest.raises(FramingError):
        splitter.feed(b"\x64\x02\x00\x00\x00")


# --- undecodable bodies ----------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    pytest.param(b"\xff\xff", id="garbage"),
    pytest.param(b"\x40", id="null-not-described"),
    pytest.param(b"\x00\x53\x99\x45", id="unknown-descriptor"),
    pytest.param(b"\x00\x53\x10", id="truncated"),
])
def test_garbage_body_is_undecodable_not_an_exception(body):
    raw = encode_frame(body)
    (frame,) = FrameSplitter("in").feed(raw)
    assert frame.performative == "undecodable"
    assert "error" in frame.fields
    assert frame.raw == raw


def test_undecodable_frame_does_not_break_the_stream():
    stream = encode_frame(b"\xff\xff") + SEED_002_DISPOSITION
    assert [f.performative for f in FrameSplitter("in").feed(stream)] == ["undecodable", "disposition"]


# --- redaction -------------------------------------------------------------------------------------

def _sasl_init_plain(response: bytes) -> bytes:
    # 5.3.3.2 sasl-init; PLAIN's initial response is authzid NUL authcid NUL passwd (RFC 4616).
    return encode_frame(described("sasl-init", mechanism=symbol("PLAIN"), initial_response=response),
                        frame_type=FRAME_TYPE_SASL)


def test_redact_frame_masks_password_in_fields_and_raw():
    raw = _sasl_init_plain(b"\x00user\x00secret")
    (frame,) = FrameSplitter("in").feed(raw)
    assert b"secret" in frame.raw  # precondition
    redacted = redact_frame(frame)
    assert redacted.fields["initial-response"] == b"\x00user\x00******"
    assert redacted.fields["mechanism"] == "PLAIN"
    assert b"secret" not in redacted.raw
    assert len(redacted.raw) == len(frame.raw)
    # The masked raw bytes still decode as the same frame.
    (again,) = FrameSplitter("in").feed(redacted.raw)
    assert again.fields == redacted.fields


@pytest.mark.parametrize("frame_bytes", [
    pytest.param(SEED_002_DISPOSITION, id="not-sasl-init"),
    pytest.param(encode_frame(described("sasl-init", mechanism=symbol("ANONYMOUS")), frame_type=FRAME_TYPE_SASL),
                 id="no-response"),
    pytest.param(_sasl_init_plain(b"\x00user\x00"), id="empty-password"),
])
def test_redact_frame_leaves_frames_without_password_alone(frame_bytes):
    (frame,) = FrameSplitter("in").feed(frame_bytes)
    assert redact_frame(frame) == frame


def test_capturing_engine_capture_redacts():
    engine = CapturingEngine(server=True)
    seen = []
    engine.listeners.append(seen.append)
    (frame,) = FrameSplitter("in").feed(_sasl_init_plain(b"\x00user\x00secret"))
    engine.capture(frame)
    assert [f.fields["initial-response"] for f in engine.frames] == [b"\x00user\x00******"]
    assert b"secret" not in engine.frames[0].raw
    assert seen == engine.frames


def test_capturing_engine_receive_data_redacts():
    engine = CapturingEngine(server=True)
    engine.receive_data(SASL_HEADER + _sasl_init_plain(b"\x00user\x00secret"))
    assert [f.performative for f in engine.frames] == ["sasl-header", "sasl-init"]
    assert engine.frames[1].fields["initial-response"] == b"\x00user\x00******"
    assert all(b"secret" not in f.raw for f in engine.frames)


# --- described() and trailing nulls ----------------------------------------------------------------

def test_described_rejects_unknown_field_listing_valid_ones():
    with pytest.raises(KeyError) as info:
        described("detach", handle=0, colsed=True)
    message = str(info.value)
    assert "colsed" in message
    for name in ("handle", "closed", "error"):
        assert name in message


def test_described_unknown_type_raises_key_error():
    with pytest.raises(KeyError):
        described("no-such-performative")


# the codes and symbols as AMQP 1.0 assigns them (3.4, 4.5), written out here, not read from the table under test
@pytest.mark.parametrize(("name", "code", "symbol_name"), [
    ("received", 0x23, "amqp:received:list"), ("accepted", 0x24, "amqp:accepted:list"),
    ("rejected", 0x25, "amqp:rejected:list"), ("released", 0x26, "amqp:released:list"),
    ("modified", 0x27, "amqp:modified:list"), ("declare", 0x31, "amqp:declare:list"),
    ("discharge", 0x32, "amqp:discharge:list"), ("declared", 0x33, "amqp:declared:list"),
    ("transactional-state", 0x34, "amqp:transactional-state:list")])
def test_type_of_finds_the_type_by_the_code_and_by_the_symbol_the_specification_assigns(name, code, symbol_name):
    by_code, by_symbol = type_of(ulong(code)), type_of(symbol(symbol_name))
    assert by_code is not None and by_code.name == name
    assert by_symbol is by_code
    assert (by_code.code, by_code.symbol) == (code, symbol_name)


def test_delivery_state_names_are_the_five_states_of_section_3_4():
    assert sorted(BY_NAME[name].code for name in DELIVERY_STATE_NAMES) == [0x23, 0x24, 0x25, 0x26, 0x27]


@pytest.mark.parametrize("descriptor", [
    ulong(0x2a), symbol("amqp:acknowledged:list"), symbol("amqp:accepted"), None, b"amqp:accepted:list", 36.0])
def test_type_of_an_unknown_descriptor_or_one_of_neither_form_is_none(descriptor):
    assert type_of(descriptor) is None


def test_described_uses_descriptor_code_and_spec_order():
    value = described("detach", closed=True, handle=uint(3))
    assert isinstance(value, Described)
    assert value.descriptor == ulong(0x16)
    assert value.value == [uint(3), True]


def test_described_omits_trailing_nulls():
    # Part 1, 1.4: trailing null fields of a composite type may be omitted from the list.
    short = described("transfer", handle=uint(0), delivery_id=None, more=None)
    full = Described(ulong(0x14), [uint(0), None, None, None, None, None])
    assert short.value == [uint(0)]
    assert len(encode_value(short)) < len(encode_value(full))
    assert encode_value(short) == encode_value(described("transfer", handle=uint(0)))


def test_described_can_set_attach_name():
    # 2.7.3: the first (mandatory) field of attach is "name"; described() must accept it like any other field.
    value = described("attach", name="link-1", handle=uint(0), role=False)
    assert value.value == ["link-1", uint(0), False]


def test_described_keeps_leading_and_inner_nulls():
    value = described("disposition", first=uint(1), settled=True)
    assert value.value == [None, uint(1), None, True]


# --- normalize: restricted-type choices (2.8) ------------------------------------------------------

_ATTACH_FIELDS = ("role", "snd_settle_mode", "rcv_settle_mode", "source")


def _attach(**fields):
    # Built by hand rather than with described(): see test_described_can_set_attach_name.
    values = ["l", uint(0)] + [fields.get(k) for k in _ATTACH_FIELDS]
    while values[-1] is None:
        values.pop()
    (frame,) = FrameSplitter("in").feed(encode_frame(Described(ulong(0x12), values)))
    assert frame.performative == "attach"
    return frame.fields


@pytest.mark.parametrize(("fields", "key", "expected"), [
    ({"role": False}, "role", "sender"),  # 2.8.1
    ({"role": True}, "role", "receiver"),
    ({"role": False, "snd_settle_mode": ubyte(2)}, "snd-settle-mode", "mixed"),  # 2.8.2
    ({"role": False, "snd_settle_mode": ubyte(0)}, "snd-settle-mode", "unsettled"),
    ({"role": False, "rcv_settle_mode": ubyte(1)}, "rcv-settle-mode", "second"),  # 2.8.3
    ({"role": False, "rcv_settle_mode": ubyte(0)}, "rcv-settle-mode", "first"),
])
def test_normalize_attach_choices(fields, key, expected):
    assert _attach(**fields)[key] == expected


@pytest.mark.parametrize(("durable", "expected"), [(0, "none"), (1, "configuration"), (2, "unsettled-state")])
def test_normalize_source_durability(durable, expected):
    # 3.5.5 terminus-durability inside a 3.5.3 source.
    fields = _attach(role=True, source=described("source", address="q", durable=uint(durable)))
    assert fields["source"] == {"@type": "source", "address": "q", "durable": expected}


def test_normalize_leaves_unknown_choice_value_as_number():
    assert normalize(ubyte(7), "attach", "snd-settle-mode") == 7


def test_normalize_choice_only_applies_to_its_field():
    # "first" of a disposition is a sequence number, not a settle mode.
    assert normalize(uint(1), "disposition", "first") == 1


def test_normalize_plain_types():
    assert normalize(symbol("amqp:not-found")) == "amqp:not-found"
    # the AMQP type is kept (a symbol is not a string, a uint not a ulong), equal to the plain value
    assert type(normalize(symbol("x"))) is symbol
    assert type(normalize("x")) is str
    assert type(normalize(uint(1))) is uint and type(normalize(ulong(1))) is ulong
    assert type(normalize(bytearray(b"t"))) is bytes
    assert normalize(Array(Data.NULL, Data.SYMBOL, symbol("a"), symbol("b"))) == ["a", "b"]
    assert normalize(Described(symbol("amqp:accepted:list"), [])) == {"@type": "accepted"}
    assert normalize(Described(ulong(0x999), 5)) == {"@descriptor": 0x999, "@value": 5}


# --- to_jsonable -----------------------------------------------------------------------------------

def test_to_jsonable_bytes_rendering():
    assert to_jsonable(b"ab\x00") == "b'ab\\x00'"
    assert to_jsonable({"k": [b"x", 1, None, True]}) == {"k": ["b'x'", 1, None, True]}
    assert to_jsonable({b"key": 1}) == {"b'key'": 1}


def test_to_jsonable_decoded_open_frame_is_json_serialisable():
    raw = encode_frame(described(
        "open", container_id="c1", hostname="h", max_frame_size=uint(4096), channel_max=65535,
        offered_capabilities=Array(Data.NULL, Data.SYMBOL, symbol("ANONYMOUS-RELAY")),
        properties={symbol("product"): "x", symbol("blob"): b"\x01\x02"},
    ))
    (frame,) = FrameSplitter("in").feed(raw)
    assert frame.performative == "open"
    text = json.dumps(to_jsonable(frame.fields))
    back = json.loads(text)
    assert back["container-id"] == "c1"
    assert back["max-frame-size"] == 4096
    assert back["offered-capabilities"] == ["ANONYMOUS-RELAY"]
    assert back["properties"] == {"product": "x", "blob": "b'\\x01\\x02'"}


def test_first_frame_takes_the_earliest_match_by_performative_and_direction():
    """The first close each way and the first of either way; None where the log holds no such frame."""
    def frame(direction: str, performative: str, t_ns: int) -> Frame:
        return Frame(direction, 0, FRAME_TYPE_AMQP, performative, {}, b"", b"", t_ns)

    log = [frame("out", "open", 1), frame("in", "open", 2), frame("in", "close", 3), frame("out", "close", 4),
           frame("in", "close", 5)]
    assert first_frame(log, "close") is log[2]
    assert first_frame(log, "close", "in") is log[2]
    assert first_frame(log, "close", "out") is log[3]
    assert first_frame(log, "open", "in") is log[1]
    assert first_frame(log, "detach") is None
    assert first_frame(log[:2], "close", "out") is None
