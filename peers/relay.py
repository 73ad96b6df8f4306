"""The interop harness's interposer: a transparent TCP relay that sees every frame both ways.

A client shim connects to :class:`FrameRelay` (127.0.0.1, an ephemeral port) instead of the broker. Each
accepted connection gets its own connection to the broker; the bytes pass through **unchanged** in both
directions, never re-encoded, and a copy of every byte feeds one :class:`.frames.FrameSplitter` a direction,
so the harness reads the whole conversation as :class:`.frames.Frame` objects (:class:`RelayedConnection`).

Directions are named as the client sees them, like every capture in the project: ``"out"`` is what the client
sent (client -> broker), ``"in"`` what the broker sent (broker -> client).

Design:

- **One background thread, one ``selectors`` loop, for every connection.** The relay only moves bytes, so a
  thread a connection buys no parallelism (the GIL) and costs a thread and its join per connection; one loop
  keeps the close bookkeeping in one place, with no lock between the two directions of a connection. Latency
  stays low because each chunk is written to the other side **before** it is split and decoded, and frames are
  stamped with the kernel's receive time (:mod:`.recvtime`), so the decode never shifts a frame's time.
- **Frames in the order the loop read them**, both directions merged: a frame one end wrote in answer to the
  other's always comes after it (the loop read the cause before it passed it on), so a check may take "recorded
  before" for "written before the writer could have read it". The kernel's stamps cannot promise that: they go
  back a little between reads of one socket and disagree across sockets (a transfer stamped 0.4 ms before the
  broker's flow that granted its credit, 3 Dec 2026). A frame's ``t_ns`` is its stamp, or the ``t_ns`` of the
  frame read before it if that is later, so the frames are in ``t_ns`` order too.
- **Backpressure like TCP's**: a side is read only while nothing read from it waits to be written to the other
  side, so a slow reader slows its writer instead of filling the relay's memory.
- **Ends pass through**: an end of stream from one side becomes ``shutdown(SHUT_WR)`` towards the other once
  the bytes before it are written (half-close); when both directions have ended both sockets close. A reset
  (or a failed write) on one side closes it; the bytes already read from it are still written to the other
  side, which is then closed too. A refused (or timed out) connection to the broker closes the client's
  socket at once. The broker's name is resolved on the loop at each accept (``getaddrinfo``, first address):
  instant for an address or ``localhost``; a name that needs DNS delays the loop by the lookup.
- **Drip, on request**: with :attr:`FrameRelay.drip_bytes` N (taken by each connection when it is accepted), the
  first N bytes of every chunk read from the broker reach the client one byte a write, :data:`DRIP_PAUSE_S`
  apart, and the rest of the chunk in one write: the client's reads end inside frames (its header, its size),
  as TCP may always make them end. With :attr:`FrameRelay.drip_size` S they go S bytes a write instead: with N
  at least a chunk, every byte goes so, and a read holds the end of one frame, the frames after it, and the start
  of the next, wherever the S-byte runs fall. The bytes are the same; only their timing changes. Off (0) by
  default.
- **Capture never disturbs the relay**: when a direction stops splitting (TLS, garbage), its bytes still pass
  unchanged; that direction's decoding stops and :attr:`RelayedConnection.framing_error` says why.
  Captured frames have any SASL PLAIN password masked (:func:`.frames.redact_frame`), as every capture in the
  project does; the relayed bytes are not touched.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from types import TracebackType

from . import recvtime
from .frames import Frame, FrameSplitter, FramingError, redact_frame

READ_SIZE = 256 * 1024
LOOP_TICK = 0.5  # seconds: the longest the loop sleeps when nothing happens (connect deadlines are checked)
DEFAULT_CONNECT_TIMEOUT = 10.0
DRIP_PAUSE_S = 0.001  # between two dripped bytes: the client has read the one before (epoll counts milliseconds)
_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY}


class RelayedConnection:
    """What the relay saw of one client connection. Readable from any thread while the relay runs.

    ``index``: its place in accept order (0, 1, ...). ``client``: the client's ``host:port``.
    """

    def __init__(self, index: int, client: str, upstream: str) -> None:
        self.index = index
        self.client = client
        self.upstream = upstream
        self._lock = threading.Condition()
        self._frames: list[Frame] = []
        self._splitters = {"out": FrameSplitter("out", keep_decoded=True),
                           "in": FrameSplitter("in", keep_decoded=True)}
        self._broken: dict[str, str] = {}
        self._bytes = {"out": 0, "in": 0}
        self._last_ns = 0  # the t_ns of the frames read last, either direction
        self._closed_by: str | None = None
        self._closed_ns: int | None = None  # when the side in _closed_by ended (time.monotonic_ns(): the frames' clock)
        self._error: str | None = None
        self._ended = False
        self._last_activity = time.monotonic()
        self._client_open: Frame | None = None
        self._broker_close: Frame | None = None

    @property
    def client_open(self) -> Frame | None:
        """The client's ``open`` frame once it has passed (its ``container-id`` tells whose connection this is)."""
        with self._lock:
            return self._client_open

    @property
    def broker_close(self) -> Frame | None:
        """The broker's first ``close`` frame once it has passed; None while it has written none (a broker that
        ended its stream without one dropped the connection)."""
        with self._lock:
            return self._broker_close

    @property
    def frames(self) -> list[Frame]:
        """A snapshot of the frames captured so far, both directions merged in the order read (and of ``t_ns``)."""
        with self._lock:
            return list(self._frames)

    @property
    def closed_by(self) -> str | None:
        """Which side ended the connection first: ``"client"``, ``"broker"``, ``"relay"``; None while open."""
        return self._closed_by

    @property
    def closed_ns(self) -> int | None:
        """When the side in :attr:`closed_by` ended (its end of stream, reset or failure reached the relay), on the
        frames' clock (``t_ns``, ``time.monotonic_ns()``); None while open."""
        return self._closed_ns

    @property
    def framing_error(self) -> str | None:
        """Why decoding stopped (``"out: invalid frame header ..."``, one clause a broken direction), or None
        while both directions split as AMQP framing. The bytes kept flowing unchanged either way."""
        with self._lock:
            return "; ".join(f"{d}: {why}" for d, why in self._broken.items()) or None

    @property
    def error(self) -> str | None:
        """What went wrong on the wire, if anything: the failed connect to the broker (its address and the
        errno text), or a side's reset. None for ends by end of stream."""
        return self._error

    @property
    def bytes_out(self) -> int:
        """Bytes the client sent (and the relay read)."""
        return self._bytes["out"]

    @property
    def bytes_in(self) -> int:
        """Bytes the broker sent (and the relay read)."""
        return self._bytes["in"]

    @property
    def ended(self) -> bool:
        """True once both sockets are closed: no byte or frame will be added."""
        return self._ended

    def capture(self, direction: str, data: bytes, t_ns: int) -> None:
        """Split ``data`` (bytes that crossed in ``direction``, arrived at ``t_ns``) into frames and record
        them; sans-I/O, called by the relay's loop. After a :class:`FramingError` the direction is no longer
        split: the error is recorded once, as :attr:`framing_error` and as a ``framing-error`` frame holding
        the offending bytes (as :class:`.engine.CapturingEngine` records one).

        The frames go after every frame read before them, of either direction; a chunk stamped before the chunk
        read ahead of it takes that chunk's ``t_ns`` (kernel stamps of one socket may go back a little from one
        read to the next: 1 us on this machine, 3 Dec 2026; across sockets, more)."""
        self._bytes[direction] += len(data)
        t_ns = self._last_ns = max(t_ns, self._last_ns)
        if direction in self._broken:
            return
        frames: list[Frame] = []
        try:
            for frame in self._splitters[direction].split(data, t_ns):  # frames before a bad one are kept
                frames.append(redact_frame(frame))
        except FramingError as exc:
            with self._lock:
                self._broken[direction] = exc.message
            frames.append(Frame(direction, 0, -1, "framing-error", {"error": exc.message}, b"", exc.offending,
                                t_ns=t_ns))
        if frames:
            with self._lock:
                for frame in frames:
                    self._insert(frame)

    def _insert(self, frame: Frame) -> None:
        if self._client_open is None and frame.direction == "out" and frame.performative == "open":
            self._client_open = frame
        elif self._broker_close is None and frame.direction == "in" and frame.performative == "close":
            self._broker_close = frame
        self._frames.append(frame)

    def _touch(self) -> None:
        self._last_activity = time.monotonic()

    def _end(self, closed_by: str, error: str | None = None) -> None:
        """Record who ended it first (later calls keep the first) and any error."""
        with self._lock:
            if self._closed_by is None:
                self._closed_by = closed_by
                self._closed_ns = time.monotonic_ns()
            if error is not None and self._error is None:
                self._error = error
            self._lock.notify_all()

    def _finish(self) -> None:
        with self._lock:
            self._ended = True
            self._lock.notify_all()

    def wait_quiet(self, seconds: float, timeout: float) -> bool:
        """Block until no byte has crossed for ``seconds`` or the connection ended: True; False when
        ``timeout`` passed first (a chatty connection: heartbeats more often than ``seconds``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                now = time.monotonic()
                if self._ended or now - self._last_activity >= seconds:
                    return True
                if now >= deadline:
                    return False
                self._lock.wait(min(seconds - (now - self._last_activity), deadline - now))

    def wait_closed(self, timeout: float) -> bool:
        """Block until both sockets are closed (True) or ``timeout`` passed (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._ended, timeout)

    def __repr__(self) -> str:
        state = f"closed by {self._closed_by}" if self._closed_by else "open"
        return f"<RelayedConnection {self.index} {self.client} -> {self.upstream} {state}>"


class _Pipe:
    """One direction of a relayed connection: bytes read from ``src`` on their way to ``dst``."""

    def __init__(self, direction: str, src: str, dst: str) -> None:
        self.direction = direction
        self.src = src  # "client" or "broker": the side read
        self.dst = dst  # the side written
        self.pending = bytearray()  # read, not yet written
        self.src_done = False  # end of stream (or reset) read from src: nothing more will be read
        self.finished = False  # dst's write side is shut (or dst is gone): this direction carries nothing more
        self.drip_left = 0  # bytes of the pending chunks still to go drip_size a write (FrameRelay.drip_bytes)
        self.drip_at = 0.0  # the monotonic time the next dripped byte may go

    def dripping(self, now: float) -> bool:
        """Whether the next byte must wait for its moment (a dripped byte went less than the pause ago)."""
        return self.drip_left > 0 and now < self.drip_at


class _Link:
    """The loop's state of one relayed connection: its two sockets and two pipes."""

    def __init__(self, record: RelayedConnection, client: socket.socket, upstream: socket.socket,
                 connect_deadline: float, drip_bytes: int = 0, drip_size: int = 1) -> None:
        self.record = record
        self.drip_bytes = drip_bytes
        self.drip_size = drip_size
        self.socks: dict[str, socket.socket | None] = {"client": client, "broker": upstream}
        self.masks: dict[str, int] = {"client": 0, "broker": 0}
        self.pipes = {"client": _Pipe("out", "client", "broker"), "broker": _Pipe("in", "broker", "client")}
        self.connecting = True
        self.connect_deadline = connect_deadline

    def reading(self, side: str) -> _Pipe:
        """The pipe that reads from ``side``."""
        return self.pipes[side]

    def writing(self, side: str) -> _Pipe:
        """The pipe that writes to ``side``."""
        return self.pipes["broker" if side == "client" else "client"]


class FrameRelay:
    """A transparent TCP relay from 127.0.0.1:``port`` to ``upstream_host:upstream_port`` that captures frames.

    Use as a context manager (or :meth:`start` ... :meth:`close`); clients connect to ``url_host:port``.
    :meth:`connections` lists what each accepted connection carried. ``label`` names the loop's thread and
    appears in messages.
    """

    url_host = "127.0.0.1"

    def __init__(self, upstream_host: str, upstream_port: int, label: str = "relay",
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        self.drip_bytes = 0  # set between connections: see the module's "Drip"; each connection takes it at accept
        self.drip_size = 1  # the bytes a dripped write carries (the module's "Drip"), taken at accept as drip_bytes
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.label = label
        self.connect_timeout = connect_timeout
        self._listener = socket.create_server((self.url_host, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._records: list[RelayedConnection] = []
        self._records_lock = threading.Condition()
        self._links: list[_Link] = []
        self._stopping = False
        self._shut = False
        self._thread: threading.Thread | None = None

    @property
    def upstream(self) -> str:
        """The broker's ``host:port``."""
        return f"{self.upstream_host}:{self.upstream_port}"

    def start(self) -> FrameRelay:
        """Run the loop in a background thread; returns at once, already listening. Idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"relay-{self.label}", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop: every open connection is closed (``closed_by="relay"``), then the listener. Waits for
        the loop's thread; safe to call twice, or without :meth:`start`."""
        self._stopping = True
        if self._thread is None:
            self._shutdown()
            return
        self._wake()
        self._thread.join(timeout)

    def __enter__(self) -> FrameRelay:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def connections(self) -> list[RelayedConnection]:
        """The connections accepted so far, in accept order (the same objects on every call)."""
        with self._records_lock:
            return list(self._records)

    def connection(self, index: int, timeout: float = 0.0) -> RelayedConnection:
        """Connection ``index``, waiting up to ``timeout`` seconds for it to be accepted; IndexError if not."""
        with self._records_lock:
            if not self._records_lock.wait_for(lambda: len(self._records) > index, timeout):
                raise IndexError(f"relay {self.label}: no connection {index} (accepted {len(self._records)})")
            return self._records[index]

    def wait_quiet(self, connection_index: int, seconds: float, timeout: float = 30.0) -> bool:
        """Return once no byte has crossed connection ``connection_index`` (either way) for ``seconds``, or it
        ended: True; False when ``timeout`` passed first. Frames are decoded before the quiet time starts, so
        on True :attr:`RelayedConnection.frames` holds every frame of the bytes that crossed. ``timeout`` also
        bounds the wait for the connection to be accepted (IndexError when it is not)."""
        deadline = time.monotonic() + timeout
        record = self.connection(connection_index, timeout)
        return record.wait_quiet(seconds, max(0.0, deadline - time.monotonic()))

    def wait_closed(self, index: int, timeout: float = 5.0) -> bool:
        """Return True once both sockets of connection ``index`` are closed, False if ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        record = self.connection(index, timeout)
        return record.wait_closed(max(0.0, deadline - time.monotonic()))

    def __repr__(self) -> str:
        return f"<FrameRelay {self.label} {self.url_host}:{self.port} -> {self.upstream}>"

    # the loop ------------------------------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._selector.select(self._next_timeout()):
                    if key.data == "wake":
                        self._drain_wake()
                    elif key.data is None:
                        self._accept()
                    else:
                        link, side = key.data
                        self._on_ready(link, side, events)
                self._check_deadlines()
                self._drip()
        finally:
            self._shutdown()

    def _next_timeout(self) -> float:
        now = time.monotonic()
        deadlines = [link.connect_deadline - now for link in self._links if link.connecting]
        deadlines += [pipe.drip_at - now for link in self._links for pipe in link.pipes.values()
                      if pipe.drip_left and pipe.pending]
        return max(0.0, min([LOOP_TICK, *deadlines]))

    def _drip(self) -> None:
        """Write the next dripped byte of each pipe whose pause is over."""
        now = time.monotonic()
        for link in list(self._links):
            pipe = link.pipes["broker"]
            if pipe.drip_left and pipe.pending and not pipe.dripping(now) and link.socks["client"] is not None:
                self._flush(link, pipe)
                self._maybe_close(link)
                self._update(link)

    def _drain_wake(self) -> None:
        try:
            self._wake_r.recv(4096)
        except OSError:
            pass

    def _accept(self) -> None:
        try:
            client, peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        recvtime.enable(client)
        with self._records_lock:
            record = RelayedConnection(len(self._records), f"{peer[0]}:{peer[1]}", self.upstream)
            self._records.append(record)
            self._records_lock.notify_all()
        failure: str | None = None
        upstream: socket.socket | None = None
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                self.upstream_host, self.upstream_port, type=socket.SOCK_STREAM)[0]
            upstream = socket.socket(family, kind, proto)
            upstream.setblocking(False)
            code = upstream.connect_ex(address)
            if code and code not in _IN_PROGRESS:
                failure = os.strerror(code)
        except OSError as exc:
            failure = exc.strerror or str(exc)
        if failure is not None or upstream is None:
            if upstream is not None:
                upstream.close()
            self._refuse(record, client, failure or "no address")
            return
        link = _Link(record, client, upstream, time.monotonic() + self.connect_timeout, self.drip_bytes,
                     max(1, self.drip_size))
        self._links.append(link)
        self._update(link)

    def _refuse(self, record: RelayedConnection, client: socket.socket, why: str) -> None:
        """The broker could not be reached: the client's socket is closed at once."""
        client.close()
        record._end("relay", f"cannot connect to {self.upstream}: {why}")
        record._finish()

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for link in list(self._links):
            if link.connecting and now >= link.connect_deadline:
                self._connect_failed(link, f"no answer within {self.connect_timeout:g} s")

    def _connect_failed(self, link: _Link, why: str) -> None:
        self._links.remove(link)
        for side in ("client", "broker"):
            sock = link.socks[side]
            if sock is not None and link.masks[side]:
                self._selector.unregister(sock)
        upstream = link.socks["broker"]
        if upstream is not None:
            upstream.close()
        client = link.socks["client"]
        assert client is not None
        self._refuse(link.record, client, why)

    def _on_ready(self, link: _Link, side: str, events: int) -> None:
        if link.connecting:  # only the upstream socket is registered (for write) while connecting
            sock = link.socks["broker"]
            assert sock is not None
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._connect_failed(link, os.strerror(code))
                return
            link.connecting = False
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            recvtime.enable(sock)
            self._update(link)
            return
        if events & selectors.EVENT_WRITE and link.socks[side] is not None:
            self._flush(link, link.writing(side))
        if events & selectors.EVENT_READ and link.socks[side] is not None:
            self._read(link, side)
        self._maybe_close(link)  # after the capture: once a connection has ended, its frames are all there
        self._update(link)

    def _read(self, link: _Link, side: str) -> None:
        pipe = link.reading(side)
        sock = link.socks[side]
        assert sock is not None
        try:
            data, t_ns = recvtime.recv_stamped(sock, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(link, side, f"{side} reset the connection: {exc.strerror or exc}")
            return
        if not data:
            link.record._end(side)
            pipe.src_done = True
            self._flush(link, pipe)
            return
        pipe.pending += data
        if side == "broker" and link.drip_bytes:  # the chunk's first N bytes, after what still drips of the last
            pipe.drip_left = min(link.drip_bytes, pipe.drip_left + len(data))
        self._flush(link, pipe)  # the bytes go on before they are decoded: capture adds no latency
        link.record.capture(pipe.direction, data, t_ns)
        link.record._touch()

    def _flush(self, link: _Link, pipe: _Pipe) -> None:
        """Write what ``pipe`` holds to its destination; once it is empty after the source's end, shut the
        destination's write side (the end passes on). The caller then calls :meth:`_maybe_close`."""
        sock = link.socks[pipe.dst]
        if pipe.finished:
            pipe.pending.clear()
            return
        assert sock is not None
        while pipe.pending:
            if pipe.dripping(time.monotonic()):
                return  # the loop writes the next byte once the pause is over (_drip)
            try:
                sent = sock.send(pipe.pending[:min(link.drip_size, pipe.drip_left)] if pipe.drip_left
                                 else pipe.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(link, pipe.dst, f"{pipe.dst} reset the connection: {exc.strerror or exc}")
                return
            del pipe.pending[:sent]
            if pipe.drip_left and sent:
                pipe.drip_left = max(0, pipe.drip_left - sent)
                pipe.drip_at = time.monotonic() + DRIP_PAUSE_S
            link.record._touch()
        if pipe.src_done:
            pipe.finished = True
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the destination is gone already: nothing to tell it

    def _lost(self, link: _Link, side: str, error: str) -> None:
        """``side`` failed (a reset, a failed write): it is closed; what was read from it still goes to the
        other side, which is then closed too."""
        link.record._end(side, error)
        self._close_side(link, side)
        link.writing(side).finished = True
        link.writing(side).pending.clear()
        link.writing(side).src_done = True
        reading = link.reading(side)
        reading.src_done = True
        self._flush(link, reading)  # the other side is closed once the rest is written (_maybe_close)

    def _maybe_close(self, link: _Link) -> None:
        if link not in self._links:
            return
        pipes = link.pipes.values()
        if all(pipe.finished for pipe in pipes):
            self._finish_link(link)
        elif any(pipe.finished and link.socks[pipe.src] is None for pipe in pipes):
            # one side is gone and everything read from it is written: nothing more can cross
            self._finish_link(link)

    def _finish_link(self, link: _Link) -> None:
        for side in ("client", "broker"):
            self._close_side(link, side)
        self._links.remove(link)
        link.record._finish()

    def _close_side(self, link: _Link, side: str) -> None:
        sock = link.socks[side]
        if sock is None:
            return
        if link.masks[side]:
            self._selector.unregister(sock)
            link.masks[side] = 0
        sock.close()
        link.socks[side] = None

    def _update(self, link: _Link) -> None:
        """Register each open socket for what its pipes need: read while nothing read from it waits, write
        while something waits for it (only write on the upstream socket while it connects)."""
        if link not in self._links:
            return
        for side in ("client", "broker"):
            sock = link.socks[side]
            if sock is None:
                continue
            if link.connecting:
                mask = selectors.EVENT_WRITE if side == "broker" else 0
            else:
                reading, writing = link.reading(side), link.writing(side)
                mask = 0
                if not reading.src_done and not reading.pending:
                    mask |= selectors.EVENT_READ
                if writing.pending and not writing.finished and not writing.dripping(time.monotonic()):
                    mask |= selectors.EVENT_WRITE
            if mask == link.masks[side]:
                continue
            if not link.masks[side]:
                self._selector.register(sock, mask, (link, side))
            elif not mask:
                self._selector.unregister(sock)
            else:
                self._selector.modify(sock, mask, (link, side))
            link.masks[side] = mask

    def _shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        for link in list(self._links):
            link.record._end("relay")
            self._finish_link(link)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._selector.close()
