"""Raw mode over amqps: a TLS record that arrives in pieces is a wait, not the end of the stream.

Python's ``ssl`` raises ``SSLWantReadError`` (an ``OSError``) when the socket was readable but held only
part of a record. A proxy between the raw peer and the embedded reference broker (served with TLS, as in
fixtures/tests/test_self_security.py) hands the broker's bytes on a few at a time, so every record the raw
peer reads arrives split: the broker's answer to a raw ``begin`` must still be read, and no EOF seen.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from amqp_conformance.fixtures.testpki import make_test_pki
from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.peers.frames import described, encode_frame
from amqp_conformance.peers.rawpeer import RawModePeer
from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.tls import TlsFiles, server_context
from proton import uint

PIECE = 3  # bytes per write once trickling: less than a TLS record header (5 bytes)
PAUSE = 0.01  # seconds between pieces: each arrives on its own


class TrickleProxy:
    """One-connection TCP proxy to ``127.0.0.1:upstream``; broker-to-client bytes go in pieces once
    :attr:`trickle` is set (until then at once, so the TLS handshake and SASL stay fast)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.trickle = False
        self.pieces = 0  # how many trickled writes were made (the test checks trickling happened)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        broker = socket.create_connection(("127.0.0.1", self.upstream))
        for sock in (client, broker):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sockets += [client, broker]
        threading.Thread(target=self._pipe, args=(client, broker, False), daemon=True).start()
        self._pipe(broker, client, True)

    def _pipe(self, source: socket.socket, sink: socket.socket, from_broker: bool) -> None:
        try:
            while data := source.recv(65536):
                if not (from_broker and self.trickle):
                    sink.sendall(data)
                    continue
                for start in range(0, len(data), PIECE):
                    sink.sendall(data[start:start + PIECE])
                    self.pieces += 1
                    time.sleep(PAUSE)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def tls_reference(tmp_path):
    pki = make_test_pki(tmp_path / "pki")
    server = ReferenceServer(Broker(), tls=server_context(TlsFiles(None, str(pki.server_cert), str(pki.server_key))))
    server.start()
    proxy = TrickleProxy(server.port)
    yield pki, proxy
    proxy.close()
    server.stop()


def test_raw_mode_reads_a_tls_record_that_arrives_in_pieces(tls_reference):
    pki, proxy = tls_reference
    address = BrokerAddress("127.0.0.1", proxy.port, "amqps", tls=TlsFiles(str(pki.ca)))
    with RawModePeer.connect(address, timeout=10) as peer:
        peer.open()
        peer.go_raw()
        proxy.trickle = True
        since = peer.mark()
        peer.send_raw(encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(100),
                                             outgoing_window=uint(100)), channel=0))
        answered = peer.pump(lambda: peer.find("begin", since) is not None, timeout=10)
        assert not peer.eof, "a partial TLS record was taken for the end of the stream"
        assert answered, [f.performative for f in peer.frames[since:]]
        assert peer.find("begin", since).fields["remote-channel"] == 0
        assert proxy.pieces > 5  # the answer really came in pieces
