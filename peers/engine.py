"""A python-qpid-proton engine with every frame captured, sans-I/O.

:class:`CapturingEngine` owns a proton ``Connection``, ``Transport`` and ``Collector`` and never touches a
socket. The caller moves bytes: :meth:`receive_data` with what arrived, :meth:`data_to_send` for what to
write, :meth:`receive_eof` when the peer closed. Both directions pass through a :class:`FrameSplitter`,
so each frame is recorded in :attr:`frames` with its decoded performative before proton sees it (in) or
as soon as proton produced it (out). Both the scripted peer and the reference broker are built on it; the
broker splits its input itself (to judge each frame first) and hands frames in with :meth:`receive_frame`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from proton import Collector, Connection, Delivery, Event, Transport

from .frames import Frame, FrameSplitter, FramingError, redact_frame

FrameListener = Callable[[Frame], None]


def delivery_tag(delivery: Delivery) -> bytes:
    """A delivery's tag as bytes, exactly as on the wire. (python-qpid-proton 0.40 hands tags out decoded as
    UTF-8 text, and raises ``UnicodeDecodeError`` for a tag that is not UTF-8, which the delivery-tag's type,
    binary, allows: such a tag is read from proton's C API directly.)

    An empty tag (zero octets, as ActiveMQ Artemis gives a pre-settled delivery) is ``b""``: proton's
    binding raises ``RuntimeError`` (``cannot use unpack() on <cdata 'char *' NULL>``) for it instead.
    """
    try:
        tag = delivery.tag
    except RuntimeError:
        return b""
    except UnicodeDecodeError:
        from cproton import ffi, lib

        raw = lib.pn_delivery_tag(delivery._impl)
        return bytes(ffi.unpack(raw.start, raw.size))
    return tag.encode("utf-8") if isinstance(tag, str) else bytes(tag)


class CapturingEngine:
    """One AMQP connection endpoint: proton's engine plus an in-process capture of every frame.

    After each :meth:`receive_data`, call :meth:`events` to take proton's events, act on them, then
    :meth:`data_to_send` and write what it returns. ``listeners`` are called with each frame as it is
    captured, in order (the reference broker uses this to see ``more`` flags and raw states).
    """

    def __init__(self, server: bool, max_frame_size: int | None = None) -> None:
        self.connection = Connection()
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        if max_frame_size:
            self.transport.max_frame_size = max_frame_size
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.frames: list[Frame] = []
        self.listeners: list[FrameListener] = []
        self.framing_error: FramingError | None = None
        self._inbound = FrameSplitter("in", keep_decoded=True)  # the type check of every case reads it
        self._outbound = FrameSplitter("out")
        self._bound = False
        self._seq = itertools.count()

    def bind(self) -> None:
        """Bind the transport to the connection (after SASL or other transport options are set)."""
        if not self._bound:
            self.transport.bind(self.connection)
            self._bound = True

    @property
    def closed(self) -> bool:
        """True once proton's transport has closed both directions."""
        return self.transport.closed

    def capture(self, frame: Frame) -> None:
        """Record one frame (also used for frames written outside proton, in raw mode); passwords masked."""
        frame = redact_frame(frame)
        self.frames.append(frame)
        for listener in self.listeners:
            listener(frame)

    def _capture_bytes(self, splitter: FrameSplitter, data: bytes, t_ns: int | None = None) -> None:
        if self.framing_error is not None and splitter is self._inbound:
            return
        try:
            for frame in splitter.feed(data, t_ns):
                self.capture(frame)
        except FramingError as exc:
            if splitter is self._inbound:
                self.framing_error = exc
                # the offending bytes join the frame log, so the evidence shows what the broker sent
                self.capture(Frame("in", 0, -1, "framing-error", {"error": exc.message},
                                   b"", exc.offending))

    def receive_data(self, data: bytes, t_ns: int | None = None) -> None:
        """Give bytes read from the network to the capture, then to proton (as much as it can take).

        ``t_ns``: when the bytes arrived (``time.monotonic_ns`` clock, see :mod:`.recvtime`); the frames
        they complete carry it. None: now."""
        self.bind()
        self._capture_bytes(self._inbound, data, t_ns)
        self._push(data)

    def receive_frame(self, frame: Frame) -> None:
        """Give proton one inbound frame (or protocol header) the caller has already split and decoded,
        recording ``frame`` itself as captured: no second split or decode. For callers that split the
        input themselves (the reference broker's policed input); do not mix with :meth:`receive_data` on
        one engine, whose own splitter would miss these bytes."""
        self.bind()
        self.capture(frame)
        self._push(frame.raw)

    def _push(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            capacity = self.transport.capacity()
            if capacity <= 0:
                return  # proton's input is closed: the rest of the bytes has nowhere to go
            taken = min(capacity, len(view))
            self.transport.push(bytes(view[:taken]))
            view = view[taken:]

    def receive_eof(self) -> None:
        """Tell proton the peer closed its side of the connection."""
        self.bind()
        self.transport.close_tail()

    def data_to_send(self) -> bytes:
        """Take every byte proton has ready to write (captured as outbound frames); b"" if none."""
        self.bind()
        chunks = []
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                break
            data = self.transport.peek(pending)
            self.transport.pop(len(data))
            self._capture_bytes(self._outbound, data)
            chunks.append(data)
        return b"".join(chunks)

    def events(self) -> list[Event]:
        """Take all of proton's pending events, in order (the collector is left empty)."""
        taken: list[Event] = []
        while True:
            event = self.collector.peek()
            if event is None:
                return taken
            taken.append(event)
            self.collector.pop()

    def tick(self, now: float) -> float:
        """Let proton handle idle time-outs; returns when it next wants a tick (0 for never)."""
        return self.transport.tick(now)
