"""A scripted peer that can hand its socket over to raw mode, and a bare socket for protocol headers.

:class:`RawModePeer` is set up with proton like any :class:`~.peer.ScriptedPeer` (SASL, open, begin,
attach), then :meth:`RawModePeer.go_raw` cuts proton off: from then on bytes written are exactly the
raw frames a case gives, and bytes read are only captured and decoded, never given to proton (which
would answer frames it never asked for). :class:`RawSocket` is the same without proton at all, for cases
that start before any protocol header.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from . import recvtime
from .address import BrokerAddress
from .backlog import WaitBudget
from .frames import Frame, FrameSplitter, FramingError, redact_frame
from .peer import (
    BrokerUnreachable,
    PeerError,
    ScriptedPeer,
    ensure_writable,
    read_once,
    wait_readable,
    watch_socket,
    write_all,
)
from .tls import TlsSetupError, client_context
from .turns import shared


class _RawInput:
    """Captures inbound bytes as frames (a stream that loses its framing is captured as raw bytes)."""

    def __init__(self, capture: Callable[[Frame], None]) -> None:
        self._splitter = FrameSplitter("in", keep_decoded=True)  # the type check of every case reads it
        self._capture = capture
        self._broken = False

    def feed(self, data: bytes, t_ns: int | None = None) -> None:
        if self._broken:
            return
        try:
            for frame in self._splitter.feed(data, t_ns):
                self._capture(frame)
        except FramingError as exc:
            self._broken = True
            self._capture(Frame("in", 0, -1, "raw-bytes", {"error": str(exc)}, b"", exc.offending,
                                t_ns=t_ns if t_ns is not None else time.monotonic_ns()))


def _shutdown_write(sock: socket.socket | None) -> None:
    """Half-close TCP. Over TLS too, below the TLS layer: ``SSLSocket.shutdown`` would drop the TLS state,
    and every byte read afterwards would be ciphertext (so the broker's answer could never be seen)."""
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_WR)
        except OSError:
            pass


class RawModePeer(ScriptedPeer):
    """A scripted peer whose socket can be taken away from proton for raw frames (see module docstring)."""

    raw = False

    def go_raw(self) -> None:
        """Write what proton has queued, then stop proton reading or writing on this socket."""
        self._flush()
        self.raw = True
        self._raw_input = _RawInput(self.engine.capture)

    def _flush(self) -> None:
        if not self.raw:
            super()._flush()

    def _received(self, data: bytes, arrived: int) -> None:
        """In raw mode, capture the bytes read as frames without proton seeing them (and proton never learns
        of the stream's end); otherwise hand them to proton."""
        if not self.raw:
            super()._received(data, arrived)
        elif data:
            self._raw_input.feed(data, arrived)

    def shutdown_write(self) -> None:
        """Close our sending side of the TCP connection (the broker reads EOF; we can still read)."""
        _shutdown_write(self._sock)
        self.wire.write_closed = True

    def close(self, graceful: bool = True) -> None:
        """Close; in raw mode without the AMQP close handshake (proton no longer knows the state)."""
        super().close(graceful=graceful and not self.raw)


class RawSocket:
    """A TCP connection (inside TLS for ``amqps``) with no protocol engine: write bytes, capture what comes back,
    see the socket close."""

    def __init__(self, address: BrokerAddress, label: str = "raw", timeout: float = 2.0) -> None:
        self.label = label
        self.timeout = timeout
        self.frames: list[Frame] = []
        self.eof = False
        try:
            self._sock: socket.socket | None = socket.create_connection((address.host, address.port), timeout=timeout)
        except OSError as exc:
            raise BrokerUnreachable(f"cannot connect to {address.url}: {exc.strerror or exc}") from None
        if address.scheme == "amqps":  # the raw bytes go inside TLS, as a peer's frames do (2.2 is above TLS)
            try:
                self._sock = client_context(address.tls).wrap_socket(self._sock, server_hostname=address.host)
            except (OSError, TlsSetupError) as exc:
                self._sock.close()
                raise BrokerUnreachable(f"TLS with {address.url} failed: {exc}") from None
        self._sock.setblocking(False)
        recvtime.enable(self._sock)
        self.wire, self._watch = watch_socket(self._sock, address)
        self._input = _RawInput(self.frames.append)
        self._out = FrameSplitter("out")

    def send_raw(self, data: bytes) -> None:
        """Write ``data`` (captured as outbound frames, or raw bytes when it is not framing); after our own
        half-close, :class:`PeerError` with nothing written or captured."""
        ensure_writable(self.wire)
        assert self._sock is not None
        try:
            frames = list(shared(self._out.split(data)))
        except FramingError:
            frames = [Frame("out", 0, -1, "raw-bytes", {"note": "not valid framing"}, b"", data)]
            self._out = FrameSplitter("out")
        self.frames.extend(redact_frame(frame) for frame in frames)  # a raw sasl-init's password never kept
        try:
            write_all(self._sock, data, self.timeout, self.wire)  # a partial write is finished, not repeated
        except OSError as exc:
            raise PeerError(f"write to broker failed: {exc}") from None

    def pump(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> bool:
        """Read until ``until()`` holds, the socket closes, or ``timeout`` passes; returns ``until()``. The
        time-out does not run out while a broker on this host is still reading what we wrote (:mod:`.backlog`)."""
        wait = WaitBudget(self.timeout if timeout is None else timeout)
        while self._sock is not None:
            if until is not None and until():
                return True
            remaining = wait.remaining(self._sock, self.eof)
            if remaining <= 0 or self.eof:
                break
            readiness = wait_readable(self._sock, self._watch, remaining)
            if readiness == "idle":
                break
            if readiness == "readable":
                got = read_once(self._sock, self.wire, self.frames.append)
                if got is None:
                    continue
                data, arrived = got
                if data:
                    self._input.feed(data, arrived)
                else:
                    self.eof = self.wire.eof = True
        return bool(until()) if until is not None else False

    def shutdown_write(self) -> None:
        """Close our sending side of the TCP connection (the broker reads EOF; we can still read)."""
        _shutdown_write(self._sock)
        self.wire.write_closed = True

    def mark(self) -> int:
        """A position in the frame log."""
        return len(self.frames)

    def close(self, graceful: bool = True) -> None:
        """Close the socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self.wire.write_closed = True

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"RawSocket has no {name!r}")
