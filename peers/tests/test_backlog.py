"""A wait does not run out while a broker on this host is still reading what the peer wrote (peers/backlog.py),
and ends as before when the broker stopped reading."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from amqp_conformance.peers import backlog
from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.peers.backlog import Reading, Unread, WaitBudget, unread_bytes
from amqp_conformance.peers.peer import PeerError, ScriptedPeer
from amqp_conformance.peers.rawpeer import RawSocket

TIMEOUT = 0.4


@contextmanager
def slow_reader(chunk: int, every: float, until_bytes: int | None, rcvbuf: int | None = None) -> Iterator[int]:
    """A TCP server on 127.0.0.1 (its port yielded) that takes one connection and reads ``chunk`` bytes every
    ``every`` seconds; once it has read ``until_bytes`` (never, if None) it closes the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    if rcvbuf is not None:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # accepted sockets inherit it
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        taken = 0
        while not stop.is_set() and (until_bytes is None or taken < until_bytes):
            if chunk:
                conn.settimeout(every)
                try:
                    taken += len(conn.recv(chunk))
                except TimeoutError:
                    pass
            time.sleep(every)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_unread_bytes_counts_what_the_peer_has_not_read():
    with slow_reader(0, 0.05, None) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"x" * 5000)
        deadline = time.monotonic() + 2
        while unread_bytes(sock) != Unread(0, 5000) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert unread_bytes(sock) == Unread(0, 5000)  # all sent, all in the server's receive queue


def test_unread_bytes_is_unknown_without_a_tcp_peer_in_this_hosts_table():
    left, right = socket.socketpair()  # a Unix socket: no TCP table
    assert unread_bytes(left) is None
    left.close()
    right.close()
    assert unread_bytes(None) is None
    closed = socket.socket()
    closed.close()
    assert unread_bytes(closed) is None


@pytest.mark.parametrize(("looks", "expected"), [
    ([(0, 5000)], [True]),  # a first look that finds bytes unread: look again
    ([(0, 5000), (0, 4000), (0, 100)], [True, True, True]),  # it keeps reading
    ([(3000, 2000), (3000, 2000), (3000, 2000)], [True, True, False]),  # it stopped reading: two looks tell
    ([(3000, 2000), (3000, 2000), (2000, 2000), (2000, 2000)], [True, True, True, True]),  # it reads in bursts
    ([(0, 5000), (1000, 5000), (1000, 5000)], [True, True, False]),  # more unread than before: not reading
    ([(3000, 2000), (3000, 0), (3000, 0)], [True, True, True]),  # it read all it was given: TCP sends the rest
    ([(0, 0)], [False]),  # it read everything: the time-out is the broker's own
    ([None], [False]),  # unknown (a broker elsewhere): by time, as always
    ([(0, 5000), (0, 0)], [True, False]),
])
def test_a_wait_goes_on_only_while_the_broker_reads(looks, expected):
    reading = Reading()
    assert [reading.goes_on(None if look is None else Unread(*look)) for look in looks] == expected


def test_more_time_is_a_time_out_or_the_floor_never_past_the_patience(monkeypatch):
    counts = iter([Unread(0, 5000), Unread(0, 4000), Unread(0, 3000), Unread(0, 2000)])
    monkeypatch.setattr("amqp_conformance.peers.backlog.unread_bytes", lambda sock: next(counts))
    reading = Reading()
    assert reading.more_time(None, 2.0, 2.0) == 2.0
    assert reading.more_time(None, 2.0, 4.0) == 2.0
    assert reading.more_time(None, 0.3, 0.3) == backlog.LOOK_FLOOR  # a short wait's next look: not before the floor
    assert reading.more_time(None, 2.0, backlog.READING_PATIENCE * 2.0) == 0.0


def test_a_poll_is_never_extended_nor_looked_at(monkeypatch):
    def looked(sock):
        raise AssertionError("a poll read the socket table")

    monkeypatch.setattr("amqp_conformance.peers.backlog.unread_bytes", looked)
    assert Reading().more_time(None, 0.0, 0.0) == 0.0
    assert Reading().more_time(None, backlog.SHORTEST_WAIT / 2, backlog.SHORTEST_WAIT / 2) == 0.0


def test_a_wait_budget_looks_only_once_its_time_out_has_come_and_never_after_the_stream_ended(monkeypatch):
    looks: list[object] = []

    def reading(sock):
        looks.append(sock)
        return Unread(0, 5000)

    monkeypatch.setattr("amqp_conformance.peers.backlog.unread_bytes", reading)
    wait = WaitBudget(0.2)
    assert 0.1 < wait.remaining("sock", ended=False) <= 0.2 and looks == []  # time left: no look
    time.sleep(0.25)
    assert wait.remaining("sock", ended=True) < 0 and looks == []  # an ended stream: over, no look
    assert wait.remaining("sock", ended=False) == backlog.LOOK_FLOOR and looks == ["sock"]  # reading: goes on
    assert 0.4 < wait.remaining("sock", ended=False) <= backlog.LOOK_FLOOR and looks == ["sock"]  # moved on
    assert WaitBudget(0.0).remaining("sock", ended=False) <= 0 and looks == ["sock"]  # a poll: never looked at


def _raw(port: int) -> RawSocket:
    return RawSocket(BrokerAddress("127.0.0.1", port), timeout=TIMEOUT)


def _scripted(port: int) -> ScriptedPeer:
    return ScriptedPeer.connect(BrokerAddress("127.0.0.1", port), timeout=TIMEOUT, quiet=TIMEOUT)


PEERS = {"raw socket": _raw, "scripted peer": _scripted}


@pytest.mark.parametrize("make", PEERS.values(), ids=list(PEERS))
def test_a_wait_outlasts_its_time_out_while_the_broker_reads(make):
    """1 MB read 32 KiB every 50 ms (about 1.6 s), then the server closes: the wait for its close, with a
    0.4 s time-out, sees it (before peers/backlog.py it ended at 0.4 s with the bytes half read)."""
    size = 1 << 20
    with slow_reader(32768, 0.05, size) as port:
        peer = make(port)
        peer.send_raw(b"\x00" * size)
        started = time.monotonic()
        assert peer.pump(lambda: peer.eof, TIMEOUT), "the wait ended while the server was still reading"
        assert time.monotonic() - started > TIMEOUT
        peer.close(graceful=False)


@pytest.mark.parametrize("make", PEERS.values(), ids=list(PEERS))
def test_a_wait_ends_by_its_time_out_when_the_broker_stopped_reading(make):
    """The server never reads: the wait ends at its time-out and the looks that tell it stopped, not later."""
    with slow_reader(0, 0.05, None) as port:
        peer = make(port)
        peer.send_raw(b"\x00" * 100_000)
        started = time.monotonic()
        assert not peer.pump(lambda: peer.eof, TIMEOUT)
        assert time.monotonic() - started < TIMEOUT + backlog.STALL_LOOKS * backlog.LOOK_FLOOR + 0.3
        peer.close(graceful=False)


@pytest.mark.parametrize("make", PEERS.values(), ids=list(PEERS))
def test_a_write_fails_only_after_a_time_out_with_nothing_taken(make):
    """8 MB to a server with a small receive buffer that reads 256 KiB every 50 ms: the write takes more than
    its 0.4 s time-out in all but the server keeps taking bytes, so it completes (before, PeerError); to a server
    that never reads, it fails once a time-out passes with nothing taken."""
    size = 8 << 20
    with slow_reader(262144, 0.05, size, rcvbuf=65536) as port:
        peer = make(port)
        started = time.monotonic()
        peer.send_raw(b"\x00" * size)
        assert time.monotonic() - started > TIMEOUT, "the write did not have to wait: the test proves nothing"
        assert peer.wire.written >= size
        peer.close(graceful=False)
    with slow_reader(0, 0.05, None, rcvbuf=65536) as port:
        peer = make(port)
        with pytest.raises(PeerError, match="stopped reading"):
            peer.send_raw(b"\x00" * size)
        peer.close(graceful=False)
