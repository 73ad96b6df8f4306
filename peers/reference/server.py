"""The reference broker's socket loop: a TCP server on 127.0.0.1 that only moves bytes.

:class:`ReferenceServer` runs :class:`Broker` over ``selectors``. ``start()`` runs the loop in one
background thread (embedded use: ephemeral port, ``stop()`` joins it); ``serve_forever()`` runs it in
the calling thread (``amqp-conformance serve``).

The server meters the bytes of every connection, so it can answer the idle probe (:mod:`..idle`): it has
nothing more to send once it has read and acted on every byte its clients wrote and they have read every
byte it wrote. Over TLS it meters the plaintext, as a client's TLS socket counts its own writes and reads
(:class:`..tls.TlsServerConnection` counts what it decrypts and encrypts). One pass of the loop (read, act,
dispatch, write) runs under the broker's lock, so the probe, which takes the same lock, never sees a pass half
done.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from ..idle import WireCount
from ..tls import TlsServerConnection
from .broker import Broker, BrokerConnection

READ_SIZE = 65536
MAX_METERS = 10_000
# how long a finished connection's socket is still read (and what comes discarded) before it is closed: closing a
# socket with unread input resets the connection (RFC 1122 4.2.2.13), and the reset can destroy the close frame the
# client has not read yet; so the server shuts its sending side and reads on to the client's EOF (a lingering close)
LINGER_S = 2.0
IDLE_PASS_S = 0.5  # the longest the loop waits for input before a pass of its own (proton's idle time-outs)


@dataclass
class _Meter:
    """What the server did on one accepted connection: bytes read and acted on, bytes written (the plaintext,
    over TLS), EOF seen."""

    read: int = 0
    written: int = 0
    eof: bool = False  # the client closed its sending side (or the connection failed)
    dropped: bool = False  # the server closed the connection
    tls: TlsServerConnection | None = None  # over TLS, the connection that counts the plaintext

    def count_read(self, received: int) -> None:
        """Count ``received`` bytes read and acted on (over TLS: the plaintext decrypted so far, whatever the
        record boundaries)."""
        self.read = self.tls.plain_read if self.tls else self.read + received

    def count_written(self, produced: int) -> None:
        """Count ``produced`` bytes written (over TLS: the plaintext encrypted so far)."""
        self.written = self.tls.plain_written if self.tls else self.written + produced


def _recv(sock: socket.socket) -> bytes | None:
    """What a ready socket has: its bytes, b"" at the end of the stream (or when it failed), None when nothing
    after all."""
    try:
        return sock.recv(READ_SIZE)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _timed(connection: BrokerConnection) -> bool:
    """True when proton will act on this connection by time (an idle time-out: heartbeats, or a close)."""
    transport = connection.engine.transport
    return bool(transport.idle_timeout or transport.remote_idle_timeout)


class ReferenceServer:
    """Listens on ``host:port`` (port 0 picks a free one; see :attr:`port`) and serves ``broker``."""

    def __init__(self, broker: Broker | None = None, host: str = "127.0.0.1", port: int = 0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.broker = broker or Broker()
        self.tls = tls  # amqps: every accepted connection runs TLS first (peers/tls.py)
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pending: dict[socket.socket, bytearray] = {}
        self._connections: dict[socket.socket, BrokerConnection] = {}
        self._meters: dict[socket.socket, _Meter] = {}
        self._meter_by_peer: dict[str, _Meter] = {}  # "host:port" of the client -> its latest connection
        self._lingering: dict[socket.socket, float] = {}  # finished connections read to EOF, until this deadline
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> ReferenceServer:
        """Run the loop in a background thread; returns at once, already listening."""
        self._thread = threading.Thread(target=self.serve_forever, name="reference-broker", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop, close every connection and the listener; waits for the loop thread."""
        self._stopping = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def alive(self) -> bool:
        """True while the loop started by :meth:`start` runs (False once it stopped or died)."""
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        """Make the loop run once (after an admin change from another thread)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def serve_forever(self) -> None:
        """Serve until :meth:`stop` is called."""
        due: float | None = None  # when the broker next acts by time, as the last pass left it
        try:
            while not self._stopping:
                ready = self._selector.select(timeout=IDLE_PASS_S if due is None else min(due, IDLE_PASS_S))
                with self.broker.lock:  # one whole pass: the idle probe never sees it half done
                    for key, _ in ready:
                        self._on_ready(key)
                    self.broker.dispatch()
                    self._flush_all(time.monotonic())
                    self._expire_lingering(time.monotonic())
                    due = self.broker.due_in()
        except SystemExit:  # a fault variant (faults.py) ending the loop as a crash would: the thread just ends
            pass
        finally:
            self._close_all()

    def _on_ready(self, key: selectors.SelectorKey) -> None:
        if key.data == "wake":
            try:
                self._wake_r.recv(4096)
            except BlockingIOError:
                pass
            return
        if key.fileobj is self._listener:
            try:
                sock, peer = self._listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = self.broker.accept(f"{peer[0]}:{peer[1]}")
            tls = TlsServerConnection(connection, self.tls) if self.tls else None
            self._connections[sock] = tls or connection
            self._pending[sock] = bytearray()
            self._meters[sock] = self._meter_by_peer[f"{peer[0]}:{peer[1]}"] = _Meter(tls=tls)
            self._selector.register(sock, selectors.EVENT_READ, "conn")
            return
        sock = key.fileobj
        assert isinstance(sock, socket.socket)
        if key.data == "linger":
            self._read_lingering(sock)
            return
        connection = self._connections.get(sock)
        if connection is None:
            return
        if key.events & selectors.EVENT_READ:
            data = _recv(sock)
            if data is None:
                return
            meter = self._meters[sock]
            if data:
                connection.receive_data(data)
                meter.count_read(len(data))
            else:
                meter.eof = True
                connection.receive_eof()
                self._drop(sock)

    def _flush_all(self, now: float) -> None:
        for sock, connection in list(self._connections.items()):
            connection.engine.tick(now)
            out = self._pending[sock]
            produced = connection.data_to_send()
            self._meters[sock].count_written(len(produced))
            out += produced
            while out:
                try:
                    sent = sock.send(out)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    out.clear()
                    self._meters[sock].eof = True
                    connection.receive_eof()
                    self._drop(sock)
                    break
                del out[:sent]
            if sock not in self._connections:
                continue
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
            self._selector.modify(sock, events, "conn")
            if connection.done and not out:
                self.broker.forget(getattr(connection, "inner", connection))
                self._linger(sock)

    def idle(self, asking: WireCount, wires: list[WireCount]) -> tuple[bool, list[WireCount]]:
        """The idle probe (:class:`..idle.IdleProbe`): has every byte of ``wires`` been read and acted on,
        and has ``asking`` read every byte written to it? Also the closed wires read to the end.

        Answers False (unsure) while the loop is not running or busy for more than 50 ms.
        """
        if not self.alive() or not self.broker.lock.acquire(timeout=0.05):
            return False, []
        try:
            finished, idle = [], True
            if self.broker.due_in() is not None:
                return False, []  # the broker acts by time, not input: not idle until it has
            for connection in self._connections.values():
                if getattr(connection, "hung", False) or _timed(connection):
                    return False, []  # a hung fault never finishes acting; idle time-outs act on time, not input
            for wire in wires:
                meter = self._meter_by_peer.get(wire.local)
                if meter is None:  # not accepted yet
                    idle = False
                elif meter.dropped or (wire.write_closed and meter.eof and meter.read == wire.written):
                    finished.append(wire)  # nothing more will be read from it
                elif meter.read != wire.written or meter.eof != wire.write_closed:
                    idle = False  # bytes (or a close) not read yet; an EOF of an older connection on this port
            meter = self._meter_by_peer.get(asking.local)
            if meter is None or meter.written != asking.read or (meter.dropped and not asking.eof):
                idle = False  # bytes, or the end of the stream, still on their way to the asking peer
            for wire in finished:  # the peer forgets these wires: the server may forget their meters
                if self._meter_by_peer.get(wire.local) is not None and self._meter_by_peer[wire.local].dropped:
                    del self._meter_by_peer[wire.local]
            return idle, finished
        finally:
            self.broker.lock.release()

    def _linger(self, sock: socket.socket) -> None:
        """A finished connection: shut our sending side (the client reads everything we wrote, then EOF) and read
        on, discarding, until the client closes or :data:`LINGER_S` passes, so what it still sends cannot make
        the socket's close a reset. The broker acts on nothing more from it: for the idle probe it is closed."""
        self._connections.pop(sock, None)
        self._pending.pop(sock, None)
        meter = self._meters.get(sock)
        if meter is not None:
            meter.dropped = True
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(sock)
            return
        self._lingering[sock] = time.monotonic() + LINGER_S
        self._selector.modify(sock, selectors.EVENT_READ, "linger")

    def _read_lingering(self, sock: socket.socket) -> None:
        if _recv(sock) == b"":  # the client's EOF (or the connection failed): nothing more can come
            self._drop(sock)

    def _expire_lingering(self, now: float) -> None:
        for sock, deadline in list(self._lingering.items()):
            if now >= deadline:
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._lingering.pop(sock, None)
        self._connections.pop(sock, None)
        self._pending.pop(sock, None)
        meter = self._meters.pop(sock, None)
        if meter is not None:
            meter.dropped = True
        if len(self._meter_by_peer) > MAX_METERS:  # no probe asks (``serve``): keep only live connections
            self._meter_by_peer = {peer: m for peer, m in self._meter_by_peer.items() if not m.dropped}
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def _close_all(self) -> None:
        for sock in [*self._connections, *self._lingering]:
            self._drop(sock)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._selector.close()
