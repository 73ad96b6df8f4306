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


def test_a_stream_s_frames_are_stamped_in_the_order_they_came():
    """A chunk stamped before the chunk before it (two kernel stamps microseconds apart, turned to the monotonic
    clock each with its own offset error) gets the earlier chunk's time, so that a case's frames merged by time
    keep each stream's order (CI, 7 Dec 2026: a message's last transfer shown before two of its middle ones)."""
    splitter = FrameSplitter("in")
    assert [f.t_ns for f in splitter.feed(EMPTY_FRAME, t_ns=375)] == [375]
    assert [f.t_ns for f in splitter.feed(EMPTY_FRAME + EMPTY_FRAME, t_ns=360)] == [375, 375]
    assert [f.t_ns for f in splitter.feed(EMPTY_FRAME, t_ns=400)] == [400]


def _clocks(monkeypatch, real: list[int], mono: list[int]) -> None:
    """Script the clocks recvtime reads: each call takes the next value."""
    real_values, mono_values = iter(real), iter(mono)
    monkeypatch.setattr(recvtime.time, "time_ns", lambda: next(real_values))
    monkeypatch.setattr(recvtime.time, "monotonic_ns", lambda: next(mono_values))


def test_a_preempted_clock_pair_is_read_again_and_the_tightest_kept(monkeypatch):
    # true offset: real = mono + 1_000_000_000. The first bracket was preempted 3 ms after the monotonic
    # read (as a loaded machine does); a single mono-then-real pair there would be 3 ms off
    _clocks(monkeypatch, real=[1_000_005_000, 1_003_005_100, 1_003_010_000, 1_003_010_200],
            mono=[5_050, 3_010_100])
    offset, mono = recvtime.real_minus_monotonic()
    assert abs(offset - 1_000_000_000) <= 100 and mono == 3_010_100


def test_when_every_bracket_is_wide_the_least_preempted_is_kept(monkeypatch):
    widths = [4_000_000, 90_000, 2_000_000, 300_000]
    real, mono, t = [], [], 0
    for width in widths:
        real += [1_000_000_000 + t, 1_000_000_000 + t + width]
        mono.append(t + width // 2)  # each bracket centred on its monotonic read: the offset is exact
        t += 10_000_000
    _clocks(monkeypatch, real, mono)
    offset, mono_at = recvtime.real_minus_monotonic()
    assert offset == 1_000_000_000 and mono_at == 10_000_000 + 45_000  # the 90 us bracket, the second


def test_a_real_clock_stepped_back_inside_a_bracket_is_not_taken_as_tight(monkeypatch):
    # the real clock is stepped back 1 s between the first pair's reads: width -1 s, not "tight"
    _clocks(monkeypatch, real=[2_000_000_000, 1_000_000_000, 1_000_001_000, 1_000_001_100],
            mono=[500, 1_050])
    offset, _ = recvtime.real_minus_monotonic()
    assert offset == 1_000_000_000
