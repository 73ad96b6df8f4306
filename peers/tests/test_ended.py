"""Absence proved by protocol state (peers/ended.py): after the broker's end, a wait for that session's frames
ends at once, with the reason; before it, and for the connection's frames, nothing is cut short."""

from __future__ import annotations

import time

import pytest
from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.peers.ended import ANY_SESSION, nothing_more
from amqp_conformance.peers.frames import described, encode_frame
from amqp_conformance.peers.peer import ExpectationFailed, ScriptedPeer
from amqp_conformance.peers.reference.server import ReferenceServer
from proton import Message, symbol, uint

WAIT = 8.0  # long enough that a wait ending by time would be plain


@pytest.fixture
def server():
    """A reference server that offers no idle probe: waits end by time or by protocol state only."""
    running = ReferenceServer().start()
    yield running
    running.stop()


def _unattached_transfer(channel: int = 0) -> bytes:
    """A transfer on a handle nobody attached: the broker ends the session (2.7.5, unattached-handle)."""
    transfer = described("transfer", handle=uint(77), delivery_id=uint(0), delivery_tag=b"x", message_format=uint(0),
                         settled=True)
    return encode_frame(transfer, channel=channel, payload=Message(body="m").encode())


def _peer(server: ReferenceServer) -> ScriptedPeer:
    peer = ScriptedPeer.connect(BrokerAddress("127.0.0.1", server.port), timeout=WAIT, quiet=WAIT)
    peer.open()
    return peer


def test_a_receive_on_a_session_the_broker_ended_fails_at_once_saying_why(server):
    with _peer(server) as peer:
        session = peer.begin()
        receiver, _ = peer.attach_receiver(session, "q.ended", credit=0)
        assert nothing_more(receiver, peer.connection) is None
        peer.send_raw(_unattached_transfer())
        assert peer.expect("end").fields["error"]["condition"] == symbol("amqp:session:unattached-handle")
        assert nothing_more(receiver, peer.connection) == "the broker had ended the session"
        started = time.monotonic()
        receiver.flow(1)
        with pytest.raises(ExpectationFailed, match=r"no message arrived .*\(the broker had ended the session\)"):
            peer.receive(receiver, timeout=WAIT)
        assert time.monotonic() - started < 1.0
        assert peer.wait_for_disposition(0, 0, WAIT, role="sender") is None
        assert time.monotonic() - started < 1.0


def test_any_session_holds_only_when_every_session_is_ended(server):
    with _peer(server) as peer:
        first = peer.begin()
        second = peer.begin()
        peer.send_raw(_unattached_transfer(channel=0))
        peer.expect("end")
        assert nothing_more(first, peer.connection) is not None
        assert nothing_more(second, peer.connection) is None
        assert nothing_more(ANY_SESSION, peer.connection) is None
        started = time.monotonic()
        assert peer.wait_for_disposition(0, 0, 0.5, role="sender") is None
        assert time.monotonic() - started >= 0.5, "a live session can still carry the disposition: wait it out"


def test_a_wait_for_the_connections_frames_is_not_cut_short(server):
    with _peer(server) as peer:
        session = peer.begin()
        peer.send_raw(_unattached_transfer())
        peer.expect("end")
        started = time.monotonic()
        assert peer.pump(lambda: peer.find("close") is not None, 0.5) is False  # no on=: nothing to prove by
        assert time.monotonic() - started >= 0.5
        assert peer.cut_short is None
        assert peer.pump(timeout=0.5, on=session) is False
        assert peer.cut_short == "the broker had ended the session"


def test_a_link_the_broker_detached_carries_no_more_transfers(server):
    with _peer(server) as peer:
        session = peer.begin()
        receiver, attach = peer.attach_receiver(session, "q.detached", credit=0)
        broker_handle = attach.fields["handle"]
        detach = described("detach", handle=uint(peer.handle_of(receiver)), closed=True)
        peer.send_raw(encode_frame(detach))  # our detach, unknown to proton: the broker answers with its own
        peer.expect("detach", handle=broker_handle)
        assert nothing_more(receiver, peer.connection) == f"the broker had detached link {receiver.name}"
        assert nothing_more(session, peer.connection) is None
