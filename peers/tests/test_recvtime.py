"""Frame times are when the bytes arrived (peers/recvtime.py), not when the single-threaded loop read them."""

from __future__ import annotations

import socket
import time

from amqp_conformance.peers import recvtime
from amqp_conformance.peers.frames import FrameSplitter

EMPTY_FRAME = bytes.fromhex("0000000802000000")


def _until_the_kernel_stamps(server: socket.socket, client: socket.socket) -> None:
    """Linux turns receive stamping on for the whole stack in a deferred work item when the first socket
    asks (net_enable_timestamp), so packets that arrive before it runs carry no stamp and are timed when
    read: wait until one read 20 ms late carries the time it arrived."""
    for _ in range(100):
        server.sendall(EMPTY_FRAME)
        time.sleep(0.02)
        _, arrived = recvtime.recv_stamped(client, 64)
        if time.monotonic_ns() - arrived >= 15_000_000:
            return
    raise AssertionError("the kernel never stamped a received packet within 2 s")


def test_bytes_read_late_carry_the_time_they_arrived():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        assert recvtime.enable(client)
        _until_the_kernel_stamps(server, client)
        server.sendall(EMPTY_FRAME)
        sent = time.monotonic_ns()
        time.sleep(1.0)  # the loop is busy elsewhere: the bytes wait in the kernel
        data, arrived = recvtime.recv_stamped(client, 64)
        read = time.monotonic_ns()
        assert data == EMPTY_FRAME
        # a loaded machine may stamp the packet late (its receive work deferred), never at the read a second on
        assert read - arrived > 500_000_000, "stamped when read, not when it arrived"
        assert abs(arrived - sent) < 500_000_000
    finally:
        for sock in (client, server, listener):
            sock.close()


def test_without_a_kernel_stamp_the_time_is_when_recv_returned():
    left, right = socket.socketpair()
    try:
        right.sendall(b"x")
        before = time.monotonic_ns()
        data, arrived = recvtime.recv_stamped(left, 8)  # not enabled: no stamp asked for
        assert data == b"x" and before <= arrived <= time.monotonic_ns()
    finally:
        left.close()
        right.close()


def test_every_frame_a_chunk_completes_carries_the_chunks_arrival_time():
    splitter = FrameSplitter("in")
    assert splitter.feed(EMPTY_FRAME[:5], t_ns=100) == []
    frames = splitter.feed(EMPTY_FRAME[5:] + EMPTY_FRAME, t_ns=200)
    assert [f.t_ns for f in frames] == [200, 200]  # a frame's time is the arrival of its last byte
