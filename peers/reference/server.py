"""The reference broker's socket loop: a TCP server on 127.0.0.1 that only moves bytes.

:class:`ReferenceServer` runs :class:`Broker` over ``selectors``. ``start()`` runs the loop in one
background thread (embedded use: ephemeral port, ``stop()`` joins it); ``serve_forever()`` runs it in
the calling thread (``amqp-conformance serve``).
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time

from ..tls import TlsServerConnection
from .broker import Broker, BrokerConnection

READ_SIZE = 65536


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
        try:
            while not self._stopping:
                for key, _ in self._selector.select(timeout=0.5):
                    with self.broker.lock:
                        self._on_ready(key)
                with self.broker.lock:
                    self.broker.dispatch()
                    self._flush_all(time.monotonic())
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
            self._connections[sock] = TlsServerConnection(connection, self.tls) if self.tls else connection
            self._pending[sock] = bytearray()
            self._selector.register(sock, selectors.EVENT_READ, "conn")
            return
        sock = key.fileobj
        assert isinstance(sock, socket.socket)
        connection = self._connections.get(sock)
        if connection is None:
            return
        if key.events & selectors.EVENT_READ:
            try:
                data = sock.recv(READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if data:
                connection.receive_data(data)
            else:
                connection.receive_eof()
                self._drop(sock)

    def _flush_all(self, now: float) -> None:
        for sock, connection in list(self._connections.items()):
            connection.engine.tick(now)
            out = self._pending[sock]
            out += connection.data_to_send()
            while out:
                try:
                    sent = sock.send(out)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    out.clear()
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
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._connections.pop(sock, None)
        self._pending.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def _close_all(self) -> None:
        for sock in list(self._connections):
            self._drop(sock)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._selector.close()
