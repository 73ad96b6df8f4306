"""Sans-I/O tests of the reference broker's protocol guard, its policed input and frames written as data.

Sections cited are those of the OASIS AMQP 1.0 specification (2012): 2.2 version negotiation, 2.3.1 frame
layout, 2.4 connections, 2.5 sessions, 2.6.7 flow control, 2.7 performatives, 2.8.15-2.8.18 errors.
"""

from __future__ import annotations

import pytest
from amqp_conformance.peers.frames import AMQP_HEADER, SASL_HEADER, Frame, FrameSplitter, described, encode_frame
from amqp_conformance.peers.rawframes import FrameSpecError, RawContext, check_spec, frame_bytes
from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.guard import ProtocolGuard, field_problem
from amqp_conformance.peers.reference.sasl import SaslServer
from proton import uint

BEGIN = {"performative": "begin", "fields": {"next-outgoing-id": 0, "incoming-window": 100, "outgoing-window": 100}}
ATTACH_SENDER = {"performative": "attach", "fields": {"name": "s", "handle": 0, "role": "sender",
                                                      "target": {"@type": "target", "address": "q"}}}


def frames_of(spec: dict, direction: str = "in", ctx: RawContext | None = None) -> list[Frame]:
    return FrameSplitter(direction).feed(frame_bytes(spec, ctx or RawContext()))


def guard_after(*inbound: dict, outbound: tuple[dict, ...] = ()) -> ProtocolGuard:
    """A guard that saw the AMQP header, our open, and then the given frames (all judged good)."""
    guard = ProtocolGuard()
    assert guard.check(Frame("in", 0, -1, "amqp-header", {}, b"", AMQP_HEADER)) is None
    for frame in frames_of({"performative": "open", "fields": {"container-id": "broker", "channel-max": 9,
                                                               "max-frame-size": 1024}}, "out"):
        guard.outbound(frame)
    assert guard.check(frames_of({"performative": "open", "fields": {"container-id": "c"}})[0]) is None
    for spec in inbound:
        for frame in frames_of(spec):
            assert guard.check(frame) is None, spec
    for spec in outbound:
        for frame in frames_of(spec, "out"):
            guard.outbound(frame)
    return guard


def violation(guard: ProtocolGuard, spec: dict):
    found = guard.check(frames_of(spec)[0])
    assert found is not None, f"no violation for {spec}"
    return found.scope, found.condition


OUR_BEGIN = {"performative": "begin", "fields": {"remote-channel": 0, "next-outgoing-id": 0, "incoming-window": 100,
                                                 "outgoing-window": 100, "handle-max": 7}}
OUR_ATTACH = {"performative": "attach", "fields": {"name": "s", "handle": 0, "role": "receiver"}}

CASES = [
    # (what, frames before, our frames, the bad frame, scope, condition)
    ("2.7.1 channel above channel-max", (), (), dict(BEGIN, channel=10), "connection", "amqp:connection:framing-error"),
    ("2.4.1 a second open", (), (), {"performative": "open", "fields": {"container-id": "x"}},
     "connection", "amqp:illegal-state"),
    ("2.5.1 attach on a channel with no session", (), (), dict(ATTACH_SENDER, channel=3),
     "connection", "amqp:illegal-state"),
    ("2.7.2 handle above handle-max", (BEGIN,), (OUR_BEGIN,),
     {"performative": "attach", "fields": {"name": "h", "handle": 8, "role": "sender"}},
     "connection", "amqp:connection:framing-error"),
    ("2.7.3 handle in use", (BEGIN, ATTACH_SENDER), (OUR_BEGIN,), dict(ATTACH_SENDER, fields=dict(
        ATTACH_SENDER["fields"], name="t")), "connection", "amqp:session:handle-in-use"),
    ("2.7.4 flow on an unattached handle", (BEGIN,), (OUR_BEGIN,),
     {"performative": "flow", "fields": {"incoming-window": 1, "next-outgoing-id": 0, "outgoing-window": 1,
                                         "handle": 5}}, "session", "amqp:session:unattached-handle"),
    ("2.7.4 a sender's flow without delivery-count", (BEGIN, ATTACH_SENDER), (OUR_BEGIN, OUR_ATTACH),
     {"performative": "flow", "fields": {"incoming-window": 1, "next-outgoing-id": 0, "outgoing-window": 1,
                                         "handle": 0, "link-credit": 0}}, "link", "amqp:invalid-field"),
    ("2.6.7 a transfer with no credit", (BEGIN, ATTACH_SENDER), (OUR_BEGIN, OUR_ATTACH),
     {"performative": "transfer", "fields": {"handle": 0, "delivery-id": 0, "delivery-tag": "t"}},
     "link", "amqp:link:transfer-limit-exceeded"),
    ("2.7.5 a first transfer without a tag", (BEGIN, ATTACH_SENDER), (OUR_BEGIN, OUR_ATTACH),
     {"performative": "transfer", "fields": {"handle": 0, "delivery-id": 0}}, "link", "amqp:invalid-field"),
    ("2.8.15 a mandatory field missing", (), (), {"performative": "begin", "fields": {"next-outgoing-id": 0}},
     "connection", "amqp:decode-error"),
    ("3.4.5 a modified outcome whose message-annotations is a list", (BEGIN, ATTACH_SENDER), (OUR_BEGIN, OUR_ATTACH),
     {"performative": "disposition", "fields": {"role": "receiver", "first": 0, "settled": True, "state": {
         "@type": "modified", "delivery-failed": True, "message-annotations": {"@as": "list", "value": ["k", "v"]}}}},
     "connection", "amqp:decode-error"),
    ("3.4.1 a received state whose section-number is a string", (BEGIN, ATTACH_SENDER), (OUR_BEGIN, OUR_ATTACH),
     {"performative": "disposition", "fields": {"role": "receiver", "first": 0, "state": {
         "@type": "received", "section-number": {"@as": "string", "value": "0"}, "section-offset": 0}}},
     "connection", "amqp:decode-error"),
    ("2.8.15 an ill-typed field", (), (), {"performative": "begin", "fields": {
        "next-outgoing-id": {"@as": "string", "value": "0"}, "incoming-window": 1, "outgoing-window": 1}},
     "connection", "amqp:decode-error"),
    ("3.4 a disposition with an unknown state", (BEGIN,), (OUR_BEGIN,),
     {"performative": "disposition", "fields": {"role": "receiver", "first": 0,
                                                "state": {"@described": 153, "value": []}}},
     "connection", "amqp:decode-error"),
]


@pytest.mark.parametrize("what, before, ours, bad, scope, condition", CASES, ids=[c[0] for c in CASES])
def test_guard_names_the_specified_error(what, before, ours, bad, scope, condition):
    guard = guard_after(*before, outbound=ours)
    assert violation(guard, bad) == (scope, condition)


def test_credit_granted_in_our_flow_allows_exactly_that_many_transfers():
    flow = {"performative": "flow", "fields": {"incoming-window": 10, "next-outgoing-id": 0, "outgoing-window": 10,
                                               "handle": 0, "delivery-count": 0, "link-credit": 2}}
    guard = guard_after(BEGIN, ATTACH_SENDER, outbound=(OUR_BEGIN, OUR_ATTACH, flow))
    for tag in ("a", "b"):
        spec = {"performative": "transfer", "fields": {"handle": 0, "delivery-id": 0, "delivery-tag": tag,
                                                       "settled": True}}
        assert guard.check(frames_of(spec)[0]) is None
    third = {"performative": "transfer", "fields": {"handle": 0, "delivery-id": 2, "delivery-tag": "c"}}
    assert violation(guard, third) == ("link", "amqp:link:transfer-limit-exceeded")


def test_credit_reaches_the_link_of_its_direction_when_two_links_share_a_name():
    """2.6.1: a name is unique per direction only. The peer's receiving link "s" (our handle 0, we send) is
    attached first, then its sending link "s" (our handle 1): our flow on handle 1 is credit for the second."""
    receiving = {"performative": "attach", "fields": {"name": "s", "handle": 0, "role": "receiver",
                                                      "source": {"@type": "source", "address": "q"}}}
    sending = dict(ATTACH_SENDER, fields=dict(ATTACH_SENDER["fields"], handle=1))
    ours = ({"performative": "attach", "fields": {"name": "s", "handle": 0, "role": "sender"}},
            {"performative": "attach", "fields": {"name": "s", "handle": 1, "role": "receiver"}},
            {"performative": "flow", "fields": {"incoming-window": 10, "next-outgoing-id": 0, "outgoing-window": 10,
                                                "handle": 1, "delivery-count": 0, "link-credit": 1}})
    guard = guard_after(BEGIN, receiving, sending, outbound=(OUR_BEGIN, *ours))
    transfer = {"performative": "transfer", "fields": {"handle": 1, "delivery-id": 0, "delivery-tag": "a"}}
    assert guard.check(frames_of(transfer)[0]) is None


def test_input_for_a_link_detached_with_an_error_is_errant():
    error = {"@type": "error", "condition": "amqp:link:transfer-limit-exceeded"}
    our_detach = {"performative": "detach", "fields": {"handle": 0, "closed": True, "error": error}}
    guard = guard_after(BEGIN, ATTACH_SENDER, outbound=(OUR_BEGIN, OUR_ATTACH, our_detach))
    spec = {"performative": "transfer", "fields": {"handle": 0, "delivery-id": 0, "delivery-tag": "t"}}
    assert violation(guard, spec) == ("session", "amqp:session:errant-link")


def test_a_heartbeat_is_always_good():
    guard = guard_after()
    assert guard.check(FrameSplitter("in").feed(bytes.fromhex("0000000802000000"))[0]) is None


# -- the policed input inside a broker connection, in memory ------------------------------------------


def broker_frames(data: bytes) -> list[Frame]:
    return FrameSplitter("in").feed(data)


def opened_connection():
    connection = Broker().accept("test")
    connection.receive_data(AMQP_HEADER + encode_frame(described("open", container_id="c")))
    answer = broker_frames(connection.data_to_send())
    assert [f.performative for f in answer] == ["amqp-header", "open"]
    return connection


def test_a_frame_over_max_frame_size_closes_with_framing_error():
    connection = opened_connection()
    connection.receive_data(encode_frame(b"\x00" * 40000))
    closes = [f for f in broker_frames(connection.data_to_send()) if f.performative == "close"]
    assert closes[0].fields["error"]["condition"] == "amqp:connection:framing-error"
    assert connection.done


def test_an_unattached_handle_ends_only_the_session():
    connection = opened_connection()
    connection.receive_data(encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(9),
                                                   outgoing_window=uint(9))))
    connection.broker.handle(connection)
    connection.data_to_send()
    connection.receive_data(encode_frame(described("detach", handle=uint(4), closed=True)))
    sent = broker_frames(connection.data_to_send())
    assert [f.performative for f in sent] == ["end"]
    assert sent[0].fields["error"]["condition"] == "amqp:session:unattached-handle"
    assert not connection.done


def test_begin_before_open_gets_open_then_close():
    connection = Broker().accept("test")
    connection.receive_data(AMQP_HEADER + encode_frame(described("begin", next_outgoing_id=uint(0),
                                                                 incoming_window=uint(9), outgoing_window=uint(9))))
    sent = broker_frames(connection.data_to_send())
    assert [f.performative for f in sent] == ["amqp-header", "open", "close"]
    assert sent[-1].fields["error"]["condition"] == "amqp:illegal-state"


@pytest.mark.parametrize("header", [b"AMQX\x00\x01\x00\x00", b"AMQP\x00\x02\x00\x00", bytes(8)])
def test_sasl_layer_answers_an_unsupported_header_with_its_own_then_closes(header):
    result = SaslServer().receive_data(header)
    assert result.to_send == SASL_HEADER
    assert result.close


# -- frames as data ------------------------------------------------------------------------------------


def test_fields_get_their_specification_types():
    frame = frames_of({"performative": "transfer", "fields": {"handle": 1, "delivery-id": 2, "delivery-tag": "t",
                                                              "settled": True, "state": {"@type": "accepted"}}})[0]
    assert {k: v for k, v in frame.fields.items() if v is not None} == {
        "handle": 1, "delivery-id": 2, "delivery-tag": b"t", "settled": True, "state": {"@type": "accepted"}}
    assert frame.raw[8:11] == bytes.fromhex("005314")
    assert field_problem(frame) is None  # every field is encoded with the type 2.7.5 gives it


def test_placeholders_and_lies_about_size():
    ctx = RawContext(channel=3, handle=4, limits={"max-frame-size": 600})
    padded = frame_bytes(dict(BEGIN, pad_to="$max-frame-size+1"), ctx)
    assert len(padded) == 601 and int.from_bytes(padded[:4], "big") == 601
    assert padded[6:8] == b"\x00\x03"
    lying = frame_bytes(dict(BEGIN, size_delta=20), ctx)
    assert int.from_bytes(lying[:4], "big") == len(lying) + 20
    ids = [frames_of({"performative": "transfer", "fields": {"handle": "$handle", "delivery-id": "$delivery-id"}},
                     ctx=ctx)[0].fields["delivery-id"] for _ in range(2)]
    assert ids == [0, 1]


def test_bad_frame_specifications_are_explained():
    assert "exactly one" in check_spec({"raw": "00", "body": "00"})
    assert "unknown frame key" in check_spec({"raw": "00", "colour": 1})
    assert "no field" in check_spec({"performative": "begin", "fields": {"nonsense": 1}})
    with pytest.raises(FrameSpecError, match="unknown placeholder"):
        frame_bytes({"performative": "begin", "fields": {"handle-max": "$nope"}}, RawContext())
    attach = {"performative": "attach", "fields": {"name": "$link-name", "handle": 1, "role": "receiver"}}
    assert frames_of(attach, ctx=RawContext(link_name="x"))[0].fields["name"] == "x"
    with pytest.raises(FrameSpecError, match="unknown placeholder '\\$link-name'"):
        frame_bytes(attach, RawContext())  # a set-up without a link: no name, not an empty one


def test_random_frame_bodies_never_crash_the_broker():
    import random

    rng = random.Random(7)
    pieces = [bytes.fromhex(h) for h in ("005310", "005312", "005314", "005315", "005316", "005318", "45", "c0",
                                         "d0", "40", "41", "43", "52", "70", "a1", "a3", "00", "53", "24", "ff")]
    for _ in range(300):
        connection = Broker().accept("fuzz")
        connection.receive_data(AMQP_HEADER + encode_frame(described("open", container_id="c")))
        connection.receive_data(encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(9),
                                                       outgoing_window=uint(9))))
        for _ in range(rng.randint(1, 4)):
            body = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
            connection.receive_data(encode_frame(body, channel=rng.choice((0, 0, 1, 5))))
            assert isinstance(connection.data_to_send(), bytes)
        connection.receive_eof()
        connection.data_to_send()


def test_nested_fields_are_held_to_their_types_but_a_txn_id_is_the_coordinator_s():
    """A source's capabilities as a list, or a rejected state's error condition as a string, is the guard's
    decode-error; a transactional state without its txn-id is left to the coordinator (a missing txn-id names no
    transaction: um.transactions.subscribe/8-null-txn-id)."""
    def frame(performative: str, /, **fields: object) -> Frame:
        return FrameSplitter("in").feed(encode_frame(described(performative, **fields)))[0]

    listed = described("source", address="q", capabilities=["queue"])
    problem = field_problem(frame("attach", name="l", handle=uint(0), role=True, source=listed))
    assert problem == ("amqp:decode-error", "attach.source.capabilities is a list, not symbol or an array of symbol "
                                            "(multiple, 1.6.5) (3.5.3); 2.8.15")
    text_condition = described("rejected", error=described("error", condition="amqp:internal-error"))
    assert field_problem(frame("disposition", role=True, first=uint(0), state=text_condition))[1].startswith(
        "disposition.state.error.condition is a string, not symbol (2.8.14)")
    no_txn = described("transactional-state", outcome=described("accepted"))
    assert field_problem(frame("disposition", role=True, first=uint(0), state=no_txn)) is None
