"""The reference broker's input path after SASL: every frame is judged by the guard before proton sees it.

:class:`PolicedInput` splits the bytes into frames, asks :class:`~.guard.ProtocolGuard` about each, gives
the good ones to proton one by one (the broker acts on each before the next is judged, so an error it raises
of its own accord governs the input behind it), and answers each violation the way the specification names, through
proton's API (so proton writes the close, end or detach and its state stays consistent):

- a bad protocol header: our own header, then the socket is closed (2.2);
- a connection error: close with the condition; after a framing error nothing more is read (2.3.1);
- a session error: end that session with the condition; its input is discarded until the peer's end;
- a link error: detach that link with closed=true and the condition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proton import Condition, Endpoint, Link, Session, symbol

from ..frames import AMQP_HEADER, Frame, FrameSplitter, FramingError, described, encode_frame
from .guard import ProtocolGuard, Violation

if TYPE_CHECKING:
    from .broker import BrokerConnection


class PolicedInput:
    """One connection's input after SASL. Feed it bytes with :meth:`receive_data`; then handle proton's events."""

    def __init__(self, connection: BrokerConnection) -> None:
        self.connection = connection
        self.engine = connection.engine
        self.guard = ProtocolGuard()
        # the one decode of each inbound frame: the guard reads its fields and field types, the engine
        # captures it as it is (CapturingEngine.receive_frame)
        self.splitter = FrameSplitter("in", size_limit=self.engine.transport.max_frame_size, keep_decoded=True)
        self.sessions: dict[int, Session] = {}  # peer channel -> proton session
        self.links: dict[tuple[int, int], Link] = {}  # (peer channel, peer handle) -> proton link
        self.broken = False  # after a framing error the byte stream cannot be read any more
        self.violations: list[Violation] = []
        self._header = bytearray()
        self.engine.listeners.append(self._outbound)

    def _outbound(self, frame: Frame) -> None:
        if frame.direction == "out":
            self.guard.outbound(frame)

    def receive_data(self, data: bytes) -> None:
        """Judge and pass on the frames these bytes complete."""
        if self.broken:
            return
        if not self.guard.header_seen:
            self._header += data
            if len(self._header) < 8:
                return
            data, header = bytes(self._header[8:]), bytes(self._header[:8])
            self._header.clear()
            self._judge(_header_frame(header))
            if self.broken or not data:
                return
        try:
            frames = self.splitter.feed(data)
        except FramingError as exc:
            self.engine.capture(Frame("in", 0, -1, "raw-bytes", {"error": str(exc)}, b"", exc.offending))
            violation = Violation("connection", "amqp:connection:framing-error", f"{exc} (2.3.1, 2.7.1)")
            self._answer(self.connection.broker.answer_violation(violation) or violation)
            return
        for frame in frames:
            self._judge(self.connection.inbound(frame))
            if self.broken:
                return

    def _judge(self, frame: Frame) -> None:
        violation = self.guard.check(frame)
        if violation is None:
            self.engine.receive_frame(frame)
            self._learn(frame)
            self._act()
            return
        if violation.scope != "discard":
            answer = self.connection.broker.answer_violation(violation)
            if answer is None:  # a mutant lets proton have the frame
                self.engine.receive_frame(frame)
                return
            self.engine.capture(frame)
            self._answer(answer)
            return
        self.engine.capture(frame)

    def _act(self) -> None:
        """Let the broker act on the frame just passed to proton before the next one is judged, and take
        proton's answer now: a link the broker detaches (or a session it ends) with an error of its own is
        then errant for the guard, for input already in flight behind that frame too (2.8.17, 2.5.4). Credit
        top-ups wait for the end of the read (:meth:`.Broker.handle`)."""
        self.connection.broker.handle(self.connection, mid_read=True)
        self.connection.take_output()

    def _learn(self, frame: Frame) -> None:
        """Map the peer's channel and handle numbers to the proton objects a begin or attach created."""
        connection = self.engine.connection
        if frame.performative == "begin":
            known = {s._impl for s in self.sessions.values()}
            session = connection.session_head(0)
            while session is not None:  # the one the peer's begin made: remote-active, not yet mapped
                if session._impl not in known and session.state & Endpoint.REMOTE_ACTIVE:
                    self.sessions[frame.channel] = session
                    break
                session = session.next(0)
        elif frame.performative == "attach":
            session = self.sessions.get(frame.channel)
            link = connection.link_head(0)
            found = None
            while link is not None:
                if link.name == frame.fields.get("name") and session is not None and \
                        link.session._impl == session._impl and link.state & Endpoint.REMOTE_ACTIVE:
                    found = link
                link = link.next(0)
            if found is not None:
                self.links[(frame.channel, frame.fields["handle"])] = found

    def _answer(self, violation: Violation) -> None:
        self.violations.append(violation)
        condition = Condition(violation.condition, violation.description)
        if violation.scope == "header":
            self.connection._out += AMQP_HEADER  # 2.2: answer with the header we support, then close
            self.connection.close_after_write = True
            self.broken = True
            return
        session = self.sessions.get(violation.channel) if violation.channel is not None else None
        link = self.links.get((violation.channel, violation.handle)) if violation.handle is not None else None
        if violation.scope == "link" and link is not None:
            link.condition = condition
            link.close()
            state = self.guard.sessions.get(violation.channel)
            if state is not None and violation.handle in state.links:
                state.links[violation.handle].errant = True  # later input on it is errant (2.8.16)
            return
        if violation.scope in ("link", "session") and session is not None:
            session.condition = condition
            session.close()
            self.guard.sessions[violation.channel].ending = True
            return
        connection = self.engine.connection
        if not self.guard.opened:
            # before the peer's open proton writes no close: our own open and close, then the socket ends
            self.connection._out += self.engine.data_to_send()
            error = described("error", condition=symbol(violation.condition), description=violation.description)
            for frame in (encode_frame(described("open", container_id="amqp-conformance-reference")),
                          encode_frame(described("close", error=error))):
                self.connection._out += frame
            self.broken = True
            self.connection.close_after_write = True
            return
        connection.condition = condition
        connection.close()
        self.guard.closing = True
        if violation.condition == "amqp:connection:framing-error":
            self.broken = True
            self.connection.close_after_write = True


def _header_frame(header: bytes) -> Frame:
    """The first 8 bytes of the input as a frame: the AMQP header (with the fields a splitter gives it) or
    an unknown header."""
    if header == AMQP_HEADER:
        return Frame("in", 0, -1, "amqp-header", {"protocol-id": header[4], "version": list(header[5:8])}, b"",
                     header)
    return Frame("in", 0, -1, "unknown-header", {}, b"", header)
