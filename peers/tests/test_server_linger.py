"""The reference server's lingering close: a client still writing when the broker closes its connection reads the
broker's close frame and then the end of the stream, never a reset that destroys the close (RFC 1122 4.2.2.13)."""

from __future__ import annotations

import socket
import struct

from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    FRAME_TYPE_SASL,
    SASL_HEADER,
    FrameSplitter,
    described,
    encode_frame,
)
from amqp_conformance.peers.reference.server import LINGER_S, ReferenceServer
from proton import symbol

OVERSIZED = 1 << 20  # a frame header announcing 1 MiB: over any max-frame-size the broker offers (32768)


def _read_to_end(sock: socket.socket) -> tuple[bytes, str]:
    """Everything the broker sends until it closes, and how the stream ended ("eof" or the error)."""
    data = bytearray()
    sock.settimeout(LINGER_S + 3)
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError as exc:
            return bytes(data), type(exc).__name__
        if not chunk:
            return bytes(data), "eof"
        data += chunk


def test_a_client_still_writing_when_the_broker_closes_reads_the_close_and_then_eof():
    server = ReferenceServer().start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        init = encode_frame(described("sasl-init", mechanism=symbol("ANONYMOUS")), frame_type=FRAME_TYPE_SASL)
        sock.sendall(SASL_HEADER + init + AMQP_HEADER + encode_frame(described("open", container_id="linger")))
        # the header of a frame over the broker's max-frame-size, then its body: the broker closes the connection
        # with framing-error after the first 8 bytes, while the rest is still on its way
        try:
            sock.sendall(struct.pack(">IBBH", OVERSIZED, 2, 0, 0) + bytes(OVERSIZED - 8))
        except OSError:
            pass  # a reset while writing is what the lingering close prevents: the reads below show it
        data, end = _read_to_end(sock)
        frames = FrameSplitter("in").feed(data)
        close = next((f for f in frames if f.performative == "close"), None)
        assert close is not None, f"no close read (the stream ended with {end})"
        assert close.fields["error"]["condition"] == "amqp:connection:framing-error"
        assert end == "eof"
        sock.close()
    finally:
        server.stop()
