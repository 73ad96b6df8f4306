"""The reference broker decodes each inbound frame once, and parses a selector and decodes a stored message
once, while every frame stays captured in order on both sides."""

from __future__ import annotations

import pytest
from amqp_conformance.peers.engine import CapturingEngine
from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    Frame,
    FrameSplitter,
    described,
    encode_frame,
)
from amqp_conformance.peers.reference import selector as selector_module
from amqp_conformance.peers.reference import um_rules
from amqp_conformance.peers.reference.broker import Broker, BrokerConnection, Consumer
from amqp_conformance.peers.reference.guard import ProtocolGuard
from amqp_conformance.peers.reference.store import StoredMessage, Subscription
from amqp_conformance.peers.wire_types import frame_problems
from proton import Data, Endpoint, Message, uint


def pump(client: CapturingEngine, server: BrokerConnection, on_chunk=None) -> None:
    """Move bytes both ways until neither side has anything to write."""
    for _ in range(20):
        out = client.data_to_send()
        if out:
            if on_chunk is not None:
                on_chunk(out)
            else:
                server.receive_data(out)
        back = server.data_to_send()
        if back:
            client.receive_data(back)
        client.events()
        if not out and not back:
            return
    raise AssertionError("the exchange did not settle down")


def view(frame: Frame) -> tuple:
    return frame.channel, frame.frame_type, frame.performative, frame.fields, frame.payload, frame.raw


@pytest.fixture
def decodes(monkeypatch):
    """Counts proton.Data.decode calls while ``counting[0]`` is true."""
    calls = [0]
    counting = [False]
    original = Data.decode

    def counted(self, encoded):
        if counting[0]:
            calls[0] += 1
        return original(self, encoded)

    monkeypatch.setattr(Data, "decode", counted)
    return calls, counting


def test_each_inbound_frame_is_decoded_once_and_both_captures_agree(decodes):
    calls, counting = decodes
    server = Broker().accept("test")
    client = CapturingEngine(server=False)
    client.connection.container = "client"
    client.connection.open()
    session = client.connection.session()
    session.open()
    sender = session.sender("publisher")
    sender.target.address = "decode.once"
    sender.open()
    # (frames handled: the chunk's non-header frames plus the broker's answers taken while it acted on them,
    # Data.decode calls while handling the chunk): the broker acts on each frame before judging the next and
    # captures its answers then (each decoded once too)
    per_chunk: list[tuple[int, int]] = []

    def answers() -> int:
        return sum(1 for f in server.engine.frames if f.direction == "out" and not f.performative.endswith("-header"))

    def receive(chunk: bytes) -> None:
        frames = [f for f in FrameSplitter("in").feed(chunk) if not f.performative.endswith("-header")]
        answers_before = answers()
        calls[0] = 0
        counting[0] = True
        try:
            server.receive_data(chunk)
        finally:
            counting[0] = False
        answered = answers() - answers_before
        per_chunk.append((len(frames) + answered, calls[0]))

    pump(client, server, receive)
    assert sender.credit > 0
    sender.delivery(b"t1")
    sender.send(Message(body="once").encode())
    sender.advance()
    pump(client, server, receive)
    client.connection.close()
    pump(client, server, receive)

    assert all(decoded == frames for frames, decoded in per_chunk), per_chunk
    assert sum(frames for frames, _ in per_chunk) >= 5  # open, begin, attach, transfer, close at least
    broker_in = [f for f in server.engine.frames if f.direction == "in"]
    broker_out = [f for f in server.engine.frames if f.direction == "out"]
    client_in = [f for f in client.frames if f.direction == "in"]
    client_out = [f for f in client.frames if f.direction == "out"]
    assert [view(f) for f in broker_in] == [view(f) for f in client_out]
    assert [view(f) for f in broker_out] == [view(f) for f in client_in]
    assert [f.performative for f in broker_in][:2] == ["amqp-header", "open"]
    assert broker_in[0].fields == {"protocol-id": 0, "version": [1, 0, 0]}  # as a splitter names the header
    assert "transfer" in [f.performative for f in broker_in]
    assert "disposition" in [f.performative for f in broker_out]


def test_receive_frame_captures_the_frame_given_and_feeds_proton():
    engine = CapturingEngine(server=True)
    heard: list[Frame] = []
    engine.listeners.append(heard.append)
    frames = FrameSplitter("in").feed(AMQP_HEADER + encode_frame(described("open", container_id="c")))
    for frame in frames:
        engine.receive_frame(frame)
    assert engine.frames == frames and all(a is b for a, b in zip(engine.frames, frames, strict=True))
    assert heard == frames
    engine.events()
    assert engine.connection.state & Endpoint.REMOTE_ACTIVE
    assert engine.connection.remote_container == "c"


@pytest.mark.parametrize("body", [
    described("attach", name="l", handle=uint(0), role=False),
    described("attach", name="l", handle="zero", role=False),  # a wrong type: the guard's decode-error
    described("flow", incoming_window=uint(1), next_outgoing_id=uint(0), outgoing_window=uint(1)),
    described("open"),  # lacks its mandatory container-id
    described("detach"),
])
def test_the_value_kept_from_the_one_decode_is_what_a_second_decode_gives(body):
    raw = encode_frame(body)
    typed = FrameSplitter("in", keep_decoded=True).feed(raw)[0]
    plain = FrameSplitter("in").feed(raw)[0]
    assert plain.decoded is None
    assert typed.decoded == body and list(map(type, typed.decoded.value)) == list(map(type, body.value))
    assert frame_problems(typed) == frame_problems(plain)  # read from the kept value, or decoded again
    assert view(typed) == view(plain)  # the value is extra
    verdicts = []
    for frame in (typed, plain):
        guard = ProtocolGuard()
        guard.check(Frame("in", 0, -1, "amqp-header", {}, b"", AMQP_HEADER))
        verdicts.append(guard.check(frame))
    assert verdicts[0] == verdicts[1]


def test_wrong_field_type_is_caught_from_the_kept_value(monkeypatch):
    monkeypatch.setattr("amqp_conformance.peers.wire_types.body_problems",
                        lambda body: pytest.fail("the guard decoded the frame a second time"))
    guard = ProtocolGuard()
    guard.check(Frame("in", 0, -1, "amqp-header", {}, b"", AMQP_HEADER))
    frame = FrameSplitter("in", keep_decoded=True).feed(encode_frame(described("open", container_id=uint(7))))[0]
    violation = guard.check(frame)
    assert violation is not None and violation.condition == "amqp:decode-error"
    assert "container-id" in violation.description


def test_a_selector_text_is_parsed_once(monkeypatch):
    selector_module.parse_cached.cache_clear()
    parses: list[str] = []
    original = selector_module.parse
    monkeypatch.setattr(selector_module, "parse", lambda text: parses.append(text) or original(text))
    first = selector_module.parse_cached("colour = 'red'")
    again = selector_module.parse_cached("colour = 'red'")
    assert first is again and parses == ["colour = 'red'"]
    for _ in range(2):
        with pytest.raises(selector_module.SelectorError):
            selector_module.parse_cached("colour =")
    assert parses.count("colour =") == 2  # an error is not remembered


def _encoded(**properties) -> bytes:
    return Message(body="m", properties=properties).encode()


def test_take_for_decodes_a_stored_message_once_until_its_bytes_change(monkeypatch):
    envs: list[int] = []
    original = um_rules.message_env
    monkeypatch.setattr(um_rules, "message_env", lambda message: envs.append(1) or original(message))
    subscription = Subscription("(shared)", durable=False)
    blue = StoredMessage(1, _encoded(colour="blue"))
    subscription.pending.append(blue)
    consumer = Consumer(None, None, subscription, selector=selector_module.parse("colour = 'red'"))  # type: ignore[arg-type]
    broker = Broker()
    for _ in range(5):  # dispatch passes: the message is not selected, and decoded only the first time
        assert broker.take_for(consumer) is None
    assert len(envs) == 1
    blue.encoded = _encoded(colour="red")  # rewritten (as a redelivery does): decoded again, now selected
    assert broker.take_for(consumer) is blue
    assert len(envs) == 2
    assert subscription.outstanding == {1: blue} and not subscription.pending
