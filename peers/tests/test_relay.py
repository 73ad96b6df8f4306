"""The interop harness's interposer (peers/relay.py): bytes pass unchanged both ways, every frame is captured per
connection and direction, ends and failures pass through and are recorded."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    SASL_HEADER,
    Frame,
    described,
    encode_frame,
    redact_frame,
)
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.relay import FrameRelay, RelayedConnection
from proton import Message, symbol
from proton.utils import BlockingConnection

Handler = Callable[[socket.socket, list[bytes]], None]


def echo(conn: socket.socket, received: list[bytes]) -> None:
    """Send back every byte, record it; at the client's end of stream, end ours."""
    while chunk := conn.recv(65536):
        received.append(chunk)
        conn.sendall(chunk)
    conn.shutdown(socket.SHUT_WR)


@contextmanager
def upstream(handler: Handler = echo) -> Iterator[tuple[int, list[list[bytes]]]]:
    """A TCP server on 127.0.0.1 that runs ``handler`` for each connection in a thread of its own; yields its
    port and, per connection in accept order, the chunks the handler recorded."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.02)
    received: list[list[bytes]] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def serve(conn: socket.socket, chunks: list[bytes]) -> None:
        with conn:
            conn.settimeout(5)
            try:
                handler(conn, chunks)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            received.append([])
            thread = threading.Thread(target=serve, args=(conn, received[-1]), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1], received
    finally:
        stop.set()
        acceptor.join(2)
        for thread in threads:
            thread.join(2)
        listener.close()


def connect(relay: FrameRelay) -> socket.socket:
    sock = socket.create_connection((relay.url_host, relay.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)


def read_chunks(sock: socket.socket) -> list[bytes]:
    """Every read of ``sock`` up to the end of stream, as the reads returned them."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return chunks


def performatives(record: RelayedConnection, direction: str) -> list[str]:
    return [f.performative for f in record.frames if f.direction == direction]


@pytest.fixture
def reference():
    server = ReferenceServer().start()
    yield server
    server.stop()


def test_a_proton_client_through_the_relay_sends_and_receives_and_every_frame_is_captured(reference):
    with FrameRelay("127.0.0.1", reference.port, "proton") as relay:
        connection = BlockingConnection(f"amqp://{relay.url_host}:{relay.port}", timeout=5,
                                        allowed_mechs="ANONYMOUS")
        connection.create_sender("relay.q").send(Message(body="through"))  # waits for the disposition
        receiver = connection.create_receiver("relay.q")
        assert receiver.receive(timeout=5).body == "through"
        receiver.accept()
        connection.close()
        assert relay.wait_closed(0, 5)
        [record] = relay.connections()

    out, into = performatives(record, "out"), performatives(record, "in")
    assert out[:3] == ["sasl-header", "sasl-init", "amqp-header"]
    for name in ("open", "begin", "attach", "transfer", "disposition", "close"):
        assert name in out, out
    for name in ("sasl-mechanisms", "sasl-outcome", "open", "begin", "attach", "flow", "transfer", "close"):
        assert name in into, into
    dispositions = [f for f in record.frames if f.direction == "in" and f.performative == "disposition"]
    assert dispositions[0].fields["state"]["@type"] == "accepted" and dispositions[0].fields["settled"] is True
    assert all(f.decoded is not None for f in record.frames if f.performative == "open")
    assert [f.t_ns for f in record.frames] == sorted(f.t_ns for f in record.frames)
    # after the close frames both ends close their sockets: which TCP end reaches the relay first is a race
    assert record.closed_by in ("client", "broker") and record.framing_error is None and record.error is None
    assert record.bytes_out == sum(len(f.raw) for f in record.frames if f.direction == "out")
    assert record.bytes_in == sum(len(f.raw) for f in record.frames if f.direction == "in")


def amqp_stream(rng: random.Random) -> bytes:
    """A well-framed stream: header, open, a 1 MB transfer payload, some small frames, a heartbeat."""
    frames = [AMQP_HEADER, encode_frame(described("open", container_id="relay-test"))]
    frames.append(encode_frame(described("transfer", handle=0, delivery_id=0, delivery_tag=b"t"),
                               payload=rng.randbytes(1_000_000)))
    frames += [encode_frame(described("flow", incoming_window=i, next_outgoing_id=0, outgoing_window=9))
               for i in range(50)]
    return b"".join(frames) + encode_frame(b"")


@pytest.mark.parametrize("seed", [1, 2])
def test_bytes_pass_unchanged_both_ways_in_random_chunks_and_frames_split_exactly(seed):
    rng = random.Random(seed)
    stream = amqp_stream(rng)
    with upstream() as (port, received), FrameRelay("127.0.0.1", port, "echo") as relay:
        sock = connect(relay)
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(read_to_end(sock)))
        reader.start()
        at = 0
        while at < len(stream):
            size = rng.choice([1, 3, 7, 8, 100, 4096, 65536, 300_000])
            sock.sendall(stream[at:at + size])
            at += size
        sock.shutdown(socket.SHUT_WR)
        reader.join(5)
        sock.close()
        assert relay.wait_closed(0, 5)
        [record] = relay.connections()

    assert b"".join(received[0]) == stream, "the broker got exactly what the client sent"
    assert got == [stream], "the client got exactly what the broker sent"
    for direction in ("out", "in"):
        frames = [f for f in record.frames if f.direction == direction]
        assert b"".join(f.raw for f in frames) == stream
        assert [f.performative for f in frames[:3]] == ["amqp-header", "open", "transfer"]
        assert frames[2].payload_len == 1_000_000 and frames[-1].performative == "empty"
    assert record.framing_error is None and record.closed_by == "client"


def test_drip_sends_the_first_bytes_of_each_broker_chunk_one_a_write_and_the_bytes_unchanged():
    def one_chunk(conn: socket.socket, received: list[bytes]) -> None:
        received.append(conn.recv(1))  # the client's go: then one write of 100 bytes
        conn.sendall(bytes(range(100)))
        conn.shutdown(socket.SHUT_WR)

    reads: dict[int, list[bytes]] = {}
    with upstream(one_chunk) as (port, _), FrameRelay("127.0.0.1", port, "drip") as relay:
        for drip in (0, 8):
            relay.drip_bytes = drip  # taken by the next connection
            sock = connect(relay)
            sock.sendall(b"g")
            with sock:
                reads[drip] = read_chunks(sock)
    assert reads[0] == [bytes(range(100))], "without drip the chunk goes in one write"
    assert b"".join(reads[8]) == bytes(range(100)), "dripped, the bytes are the same"
    assert len(reads[8]) >= 2 and len(reads[8][0]) < 8, f"the client's first read ends inside the header: {reads[8]}"


def test_drip_size_sends_every_byte_of_the_broker_some_bytes_a_write_and_the_bytes_unchanged():
    def two_chunks(conn: socket.socket, received: list[bytes]) -> None:
        received.append(conn.recv(1))  # the client's go: then two writes of 50 bytes
        conn.sendall(bytes(range(50)))
        time.sleep(0.01)
        conn.sendall(bytes(range(50, 100)))
        conn.shutdown(socket.SHUT_WR)

    with upstream(two_chunks) as (port, _), FrameRelay("127.0.0.1", port, "drip") as relay:
        relay.drip_bytes, relay.drip_size = 1 << 16, 7  # every byte of each chunk, 7 a write
        sock = connect(relay)
        sock.sendall(b"g")
        with sock:
            reads = read_chunks(sock)
    assert b"".join(reads) == bytes(range(100)), "dripped, the bytes are the same"
    assert 0 < len(reads[0]) <= 7, f"the client's first read is one 7-byte write at most: {reads}"
    assert len(reads) >= 100 // 14, f"the 100 bytes came in runs, not in the two chunks: {reads}"


def test_random_bytes_of_any_chunking_pass_unchanged():
    rng = random.Random(7)
    data = rng.randbytes(1 << 20)
    with upstream() as (port, received), FrameRelay("127.0.0.1", port, "noise") as relay:
        sock = connect(relay)
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(read_to_end(sock)))
        reader.start()
        view = memoryview(data)
        while view:
            size = rng.randint(1, 200_000)
            sock.sendall(view[:size])
            view = view[size:]
        sock.shutdown(socket.SHUT_WR)
        reader.join(5)
        sock.close()
        assert relay.wait_closed(0, 5)
    assert b"".join(received[0]) == data and got == [data]


def test_two_concurrent_connections_are_kept_apart(reference):
    with FrameRelay("127.0.0.1", reference.port, "two") as relay:
        first = BlockingConnection(f"amqp://127.0.0.1:{relay.port}", timeout=5, allowed_mechs="ANONYMOUS")
        second = BlockingConnection(f"amqp://127.0.0.1:{relay.port}", timeout=5, allowed_mechs="ANONYMOUS")
        senders = [first.create_sender("relay.a"), second.create_sender("relay.b")]
        for i in range(3):
            for sender, body in zip(senders, ("a", "b"), strict=True):
                sender.send(Message(body=f"{body}{i}"))
        first.close()
        second.close()
        assert relay.wait_closed(0, 5) and relay.wait_closed(1, 5)
        records = relay.connections()

    assert [r.index for r in records] == [0, 1] and records[0].client != records[1].client
    for record, address in zip(records, ("relay.a", "relay.b"), strict=True):
        attaches = [f for f in record.frames if f.performative == "attach" and f.direction == "out"]
        assert [f.fields["target"]["address"] for f in attaches] == [address]
        assert performatives(record, "out").count("transfer") == 3
        assert performatives(record, "in").count("disposition") == 3
        containers = {f.fields["container-id"] for f in record.frames if f.performative == "open"
                      and f.direction == "out"}
        assert len(containers) == 1
    assert len({next(f.fields["container-id"] for f in r.frames if f.performative == "open") for r in records}) == 2


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def test_upstream_refused_closes_the_client_at_once_and_names_the_address():
    port = free_port()
    with FrameRelay("127.0.0.1", port, "refused") as relay:
        sock = connect(relay)
        try:
            sock.sendall(AMQP_HEADER)
            assert sock.recv(64) == b""
        except ConnectionResetError:
            pass  # closed with our header unread: a reset, as good as an end
        finally:
            sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert record.closed_by == "relay"
    assert f"127.0.0.1:{port}" in record.error and "refused" in record.error.lower()
    assert record.frames == []


def hello_then_close(conn: socket.socket, received: list[bytes]) -> None:
    received.append(conn.recv(64))
    conn.sendall(AMQP_HEADER)


def test_the_broker_closing_reaches_the_client_as_an_end_of_stream():
    with upstream(hello_then_close) as (port, _), FrameRelay("127.0.0.1", port, "bye") as relay:
        sock = connect(relay)
        sock.sendall(AMQP_HEADER)
        assert read_to_end(sock) == AMQP_HEADER
        sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert record.closed_by == "broker" and record.error is None
    assert [(f.direction, f.performative) for f in record.frames] == [("out", "amqp-header"), ("in", "amqp-header")]
    # when the broker's end reached the relay, on the frames' clock: after its last frame, before the test's now
    assert record.frames[-1].t_ns <= record.closed_ns <= time.monotonic_ns()


def answer_after_end(conn: socket.socket, received: list[bytes]) -> None:
    received.append(read_to_end(conn))  # the client's end of stream arrives while we can still write
    conn.sendall(AMQP_HEADER + encode_frame(described("close")))


def test_a_half_close_passes_on_and_the_other_side_can_still_answer():
    with upstream(answer_after_end) as (port, received), FrameRelay("127.0.0.1", port, "half") as relay:
        sock = connect(relay)
        sock.sendall(AMQP_HEADER)
        sock.shutdown(socket.SHUT_WR)
        assert read_to_end(sock) == AMQP_HEADER + encode_frame(described("close"))
        sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert received[0] == [AMQP_HEADER]
    assert record.closed_by == "client"
    assert performatives(record, "in") == ["amqp-header", "close"]


def test_garbage_passes_unchanged_decoding_stops_and_relaying_goes_on():
    garbage = b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n"
    with upstream() as (port, received), FrameRelay("127.0.0.1", port, "garbage") as relay:
        sock = connect(relay)
        sock.sendall(AMQP_HEADER + garbage)
        echoed = bytearray()
        while len(echoed) < len(AMQP_HEADER + garbage):
            echoed += sock.recv(4096)
        later = AMQP_HEADER + bytes(range(256))  # after the break nothing is decoded, everything still passes
        sock.sendall(later)
        while len(echoed) < len(AMQP_HEADER + garbage + later):
            echoed += sock.recv(4096)
        sock.shutdown(socket.SHUT_WR)
        echoed += read_to_end(sock)
        sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert bytes(echoed) == AMQP_HEADER + garbage + later
    assert b"".join(received[0]) == AMQP_HEADER + garbage + later
    assert record.framing_error.startswith("out: invalid frame header") and "; in: invalid frame header" in \
        record.framing_error
    for direction in ("out", "in"):
        frames = [f for f in record.frames if f.direction == direction]
        assert [f.performative for f in frames] == ["amqp-header", "framing-error"]
        assert frames[1].raw.startswith(b"GET / ")
    assert record.bytes_out == record.bytes_in == len(AMQP_HEADER + garbage + later)


def test_a_sasl_plain_password_is_masked_in_the_capture_and_passed_unchanged():
    init = encode_frame(described("sasl-init", mechanism=symbol("PLAIN"), initial_response=b"\x00user\x00s3cret"),
                        frame_type=1)
    with upstream() as (port, received), FrameRelay("127.0.0.1", port, "sasl") as relay:
        sock = connect(relay)
        sock.sendall(SASL_HEADER + init)
        sock.shutdown(socket.SHUT_WR)
        assert read_to_end(sock) == SASL_HEADER + init
        sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert b"".join(received[0]) == SASL_HEADER + init
    inits = [f for f in record.frames if f.performative == "sasl-init"]
    assert len(inits) == 2 and all(b"s3cret" not in f.raw and b"******" in f.raw for f in inits)


def test_closing_the_relay_ends_open_connections():
    def hold(conn: socket.socket, received: list[bytes]) -> None:
        received.append(read_to_end(conn))

    with upstream(hold) as (port, _):
        relay = FrameRelay("127.0.0.1", port, "closing").start()
        sock = connect(relay)
        sock.sendall(AMQP_HEADER)
        assert relay.wait_quiet(0, 0.05, timeout=2)
        relay.close()
        assert sock.recv(64) == b""
        sock.close()
        [record] = relay.connections()
    assert record.ended and record.closed_by == "relay"
    assert performatives(record, "out") == ["amqp-header"]


def test_wait_quiet_returns_after_the_quiet_time_with_every_frame_decoded():
    with upstream() as (port, _), FrameRelay("127.0.0.1", port, "quiet") as relay:
        sock = connect(relay)
        sock.sendall(AMQP_HEADER + encode_frame(described("open", container_id="q")))
        assert relay.wait_quiet(0, 0.1, timeout=2)
        assert performatives(relay.connections()[0], "in") == ["amqp-header", "open"]
        assert not relay.wait_quiet(0, 1.0, timeout=0.05)  # bytes crossed less than a second ago
        sock.close()
        assert relay.wait_quiet(0, 10, timeout=2)  # it ended: no need to wait out the quiet time
        with pytest.raises(IndexError):
            relay.wait_quiet(1, 0.1, timeout=0)


def test_capture_merges_directions_in_the_order_read_sans_io():
    record = RelayedConnection(0, "c", "b")
    record.capture("out", AMQP_HEADER, 10)
    record.capture("out", encode_frame(described("open", container_id="x")), 30)
    # read after the open though stamped before it: it stays after it (nothing the client wrote before the loop read
    # this can have answered it), and takes the open's t_ns, so the frames are in t_ns order too
    record.capture("in", AMQP_HEADER, 20)
    assert [(f.direction, f.t_ns) for f in record.frames] == [("out", 10), ("out", 30), ("in", 30)]
    assert record.frames[1] == redact_frame(Frame("out", 0, 0, "open", {"container-id": "x"}, b"",
                                                  record.frames[1].raw, t_ns=30))


def test_the_clients_open_and_the_brokers_first_close_are_kept_as_they_pass_sans_io():
    record = RelayedConnection(0, "c", "b")
    assert record.client_open is None and record.broker_close is None
    record.capture("out", AMQP_HEADER + encode_frame(described("open", container_id="x")), 10)
    record.capture("in", AMQP_HEADER + encode_frame(described("open", container_id="broker")), 20)
    record.capture("out", encode_frame(described("close")), 30)  # the client's close is not the broker's
    assert record.client_open is record.frames[1] and record.broker_close is None
    record.capture("in", encode_frame(described("close")) + encode_frame(described("close")), 40)
    assert record.broker_close is record.frames[-2] and record.broker_close.direction == "in"


def test_capture_keeps_each_directions_frames_in_the_order_read_whatever_their_stamps_sans_io():
    record = RelayedConnection(0, "c", "b")
    record.capture("out", AMQP_HEADER, 10)
    record.capture("in", AMQP_HEADER, 20)
    record.capture("out", encode_frame(described("open", container_id="x")), 30)
    # the next chunk of the same socket stamped a little before the last: TCP order stands, it is not merged in
    # before the open (nor before the broker's header, read before it)
    record.capture("out", encode_frame(described("begin", next_outgoing_id=0)), 15)
    assert [(f.direction, f.performative, f.t_ns) for f in record.frames] == [
        ("out", "amqp-header", 10), ("in", "amqp-header", 20), ("out", "open", 30), ("out", "begin", 30)]


def hello_then_reset(conn: socket.socket, received: list[bytes]) -> None:
    received.append(conn.recv(64))
    conn.sendall(AMQP_HEADER)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends a reset


def test_a_reset_from_the_broker_reaches_the_client_after_the_bytes_before_it():
    with upstream(hello_then_reset) as (port, _), FrameRelay("127.0.0.1", port, "reset") as relay:
        sock = connect(relay)
        sock.sendall(AMQP_HEADER)
        assert read_to_end(sock) == AMQP_HEADER
        sock.close()
        assert relay.wait_closed(0, 2)
        [record] = relay.connections()
    assert record.closed_by == "broker" and "broker reset the connection" in record.error
    assert performatives(record, "in") == ["amqp-header"]


def test_an_upstream_that_never_answers_the_connect_is_given_up_after_the_connect_timeout():
    full = socket.create_server(("127.0.0.1", 0), backlog=0)  # never accepts: once its queue is full, SYNs drop
    port = full.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue: the first connect that hangs shows it is full
            try:
                fillers.append(socket.create_connection(("127.0.0.1", port), timeout=0.1))
            except TimeoutError:
                break
        else:
            pytest.skip("this kernel accepts every connect into a listener's queue")
        with FrameRelay("127.0.0.1", port, "silent", connect_timeout=0.2) as relay:
            sock = connect(relay)
            assert relay.wait_closed(0, 2)
            sock.close()
            [record] = relay.connections()
        assert record.closed_by == "relay"
        assert record.error == f"cannot connect to 127.0.0.1:{port}: no answer within 0.2 s"
    finally:
        for filler in fillers:
            filler.close()
        full.close()
