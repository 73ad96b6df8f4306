"""The scripted Proton peer: one AMQP connection driven step by step over a socket by a loop we own.

No reactor, no ``MessagingHandler``, no threads. Each step (open, attach, send, dispose) changes proton's
engine and :meth:`ScriptedPeer.pump` moves bytes until a condition holds or the step's time-out ends.
Expectations wait for a captured inbound frame that matches a pattern (:mod:`matching`); a mismatch
raises :class:`ExpectationFailed` with the expected pattern, what was observed and the frame log.
"""

from __future__ import annotations

import itertools
import select
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from proton import SASL, Delivery, Link, Message, Receiver, Sender, Session, Terminus

from . import recvtime
from .address import BrokerAddress
from .backlog import WaitBudget
from .ended import ANY_SESSION, nothing_more
from .engine import CapturingEngine, delivery_tag
from .frames import Frame, FrameSplitter, FramingError, first_frame, frames_text, render
from .idle import Watch, WireCount, probe_for
from .matching import mismatches
from .recvtime import recv_stamped
from .sequence import in_span
from .tls import TlsSetupError, client_context
from .transfers import DeliveryGrouping, came_settled, payload_of
from .turns import shared, waiting

DEFAULT_TIMEOUT = 2.0
DEFAULT_QUIET = 0.3
READ_SIZE = 65536
# the most of a message's bytes the peer gives proton at a time where the broker's open states no max-frame-size
# (ScriptedPeer.give): the peer's own choice of transfer size there (AMQP 1.0 2.6.14), proton's default limit
UNSTATED_LIMIT_PIECE = 32768

RCV_SETTLE_MODES = {"first": Link.RCV_FIRST, "second": Link.RCV_SECOND}
SND_SETTLE_MODES = {"unsettled": Link.SND_UNSETTLED, "settled": Link.SND_SETTLED, "mixed": Link.SND_MIXED}
DURABILITY = {"none": Terminus.NONDURABLE, "configuration": Terminus.CONFIGURATION,
              "unsettled-state": Terminus.DELIVERIES}
OUTCOMES = {"accepted": Delivery.ACCEPTED, "rejected": Delivery.REJECTED, "released": Delivery.RELEASED,
            "modified": Delivery.MODIFIED, "received": Delivery.RECEIVED}


class PeerError(Exception):
    """The harness could not complete a step (the case's verdict is ERROR, not FAIL)."""


class BrokerUnreachable(PeerError):
    """Nothing accepted a TCP connection at the broker's address."""


class ExpectationFailed(AssertionError):
    """An expected frame did not arrive (or a forbidden one did). Carries the evidence."""

    def __init__(self, summary: str, expected: Any, observed: list[Frame], log: list[Frame]) -> None:
        self.summary = summary
        self.expected = expected
        self.observed = observed
        self.log = log
        observed_text = "\n".join("  " + f.describe() for f in observed) or "  (no matching-performative frame)"
        super().__init__(
            f"{summary}\nexpected: {render(expected)}\nobserved:\n{observed_text}\nframe log:\n{frames_text(log)}"
        )


class NoCredit(ExpectationFailed):
    """The broker granted a link of ours no credit within the wait. A receiver may withhold credit for as long as
    it likes (AMQP 1.0 2.6.7), so this is the broker's choice, not a failure of the harness or of the broker."""


class SettledByBroker(PeerError):
    """The broker settled a delivery it sent before our outcome, so there is none left for a step to give
    (proton writes no disposition for a delivery both ends settled). ``allowed``: the sender settle mode the
    broker stated in its attach lets it do that (settled or mixed, 2.8.2), so the step's condition cannot arise
    with it; False when it stated unsettled and broke its word."""

    def __init__(self, message: str, allowed: bool) -> None:
        super().__init__(message)
        self.allowed = allowed


def settled_by_broker(delivery: Delivery, step: str) -> SettledByBroker:
    """The :class:`SettledByBroker` for a received ``delivery`` the broker settled before ``step``: whether its link's
    sender settle mode, as the broker stated it, allows that."""
    mode = delivery.link.remote_snd_settle_mode
    named = {Link.SND_UNSETTLED: "unsettled", Link.SND_SETTLED: "settled", Link.SND_MIXED: "mixed"}.get(mode, mode)
    return SettledByBroker(f"the broker settled the delivery before {step}, under the sender settle mode it "
                           f"stated, {named} (2.8.2)", allowed=mode != Link.SND_UNSETTLED)


@dataclass
class ReceivedDelivery:
    """A whole message the peer received: proton's delivery, its transfer frames (one or more: 2.6.14) and the
    decoded message."""

    delivery: Delivery
    transfers: list[Frame]
    message: Message

    @property
    def transfer(self) -> Frame:
        """The delivery's first transfer frame: the one that carries its delivery-id, tag and message-format."""
        return self.transfers[0]

    @property
    def payload(self) -> bytes:
        """The encoded message as the broker sent it: every transfer's payload, joined."""
        return payload_of(self.transfers)

    @property
    def settled(self) -> bool:
        """Whether the broker sent the delivery settled (on any of its transfers, 2.7.5)."""
        return came_settled(self.transfers)

    @property
    def delivery_id(self) -> int:
        """The delivery-id from the (first) transfer frame."""
        return self.transfer.fields["delivery-id"]

    @property
    def tag(self) -> bytes:
        """The delivery-tag as sent by the broker."""
        return delivery_tag(self.delivery)


_ids = itertools.count(1)


def ensure_writable(wire: WireCount) -> None:
    """Raise :class:`PeerError` when our side of ``wire`` no longer writes (we shut it down or closed it), before
    anything is captured: the frame log shows only what left."""
    if wire.write_closed:
        raise PeerError("our sending side of the connection is closed (shut down or closed): nothing can be written")


class ScriptedPeer:
    """One connection to a broker, scripted step by step; every frame in both directions is captured.

    Use :meth:`connect` to create one and ``with`` (or :meth:`close`) to end it. Time-outs: ``timeout`` for
    a frame that must arrive, ``quiet`` for how long to watch for a frame that must not.
    """

    def __init__(self, address: BrokerAddress, *, timeout: float = DEFAULT_TIMEOUT, quiet: float = DEFAULT_QUIET,
                 label: str = "peer", container_id: str | None = None, max_frame_size: int | None = None,
                 sasl_mechanisms: str | None = None, min_watch: float = 0.0, hostname: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.quiet = quiet
        # a bounded watch: every wait lasts at least this long unless its condition is met, and the broker's
        # idle probe cannot end it sooner (an effect that must not happen may come late, by the clock)
        self.min_watch = min_watch
        self.label = label
        self.engine = CapturingEngine(server=False, max_frame_size=max_frame_size)
        self._inbound = DeliveryGrouping("in")  # the broker's deliveries, grouped as the capture grows
        self.connection = self.engine.connection
        self.connection.container = container_id or f"amqp-conformance-{uuid.uuid4().hex[:12]}"
        self.connection.hostname = hostname or address.host  # the open frame's; TLS names address.host
        self._sock: socket.socket | None = None
        self._eof = False
        self.wire = WireCount("")  # bytes this socket carried, for the broker's idle probe (peers/idle.py)
        self._watch: Watch | None = None
        self.went_idle = False  # the last wait ended because the broker was idle (not by its time-out)
        self.cut_short: str | None = None  # why the last wait ended early: nothing more could come (.ended)
        self._raw_out = 0
        mechanisms = sasl_mechanisms or ("PLAIN" if address.user is not None else
                                         "EXTERNAL ANONYMOUS" if address.tls.cert else "ANONYMOUS")
        sasl = SASL(self.engine.transport)
        sasl.allowed_mechs(mechanisms)
        sasl.allow_insecure_mechs = True
        if address.user is not None:
            self.connection.user = address.user
            self.connection.password = address.password or ""

    # -- connection lifecycle ------------------------------------------------------------------------

    @classmethod
    def connect(cls, address: BrokerAddress, **options: Any) -> ScriptedPeer:
        """Open a TCP connection to ``address`` (raises :class:`BrokerUnreachable` with the reason)."""
        peer = cls(address, **options)
        try:
            peer._sock = socket.create_connection((address.host, address.port), timeout=peer.timeout)
        except OSError as exc:
            raise BrokerUnreachable(f"cannot connect to {address.url}: {exc.strerror or exc}") from None
        if address.scheme == "amqps":  # TLS below proton: the capture still sees plaintext frames
            try:
                peer._sock = client_context(address.tls).wrap_socket(peer._sock, server_hostname=address.host)
            except (OSError, TlsSetupError) as exc:
                peer._sock.close()
                raise BrokerUnreachable(f"TLS with {address.url} failed: {exc}") from None
        peer._sock.setblocking(False)
        peer._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        recvtime.enable(peer._sock)  # frames are stamped when they arrived, not when the loop read them
        peer.wire, peer._watch = watch_socket(peer._sock, address)
        peer.engine.bind()
        return peer

    def __enter__(self) -> ScriptedPeer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self, graceful: bool = True) -> None:
        """Close the AMQP connection (waiting briefly for the broker's close) and the socket."""
        if self._sock is None:
            return
        if graceful and not self._eof and not self.engine.closed:
            try:
                self.connection.close()
                self.pump(lambda: self.engine.closed or self._eof, timeout=min(self.timeout, 1.0))
            except (PeerError, OSError):
                pass
        self._sock.close()
        self._sock = None
        self.wire.write_closed = True

    @property
    def frames(self) -> list[Frame]:
        """Every frame captured so far on this connection, in order."""
        return self.engine.frames

    def stream_end(self) -> str:
        """How the broker ended the TCP connection, for a wait it cut short: after its AMQP close or without one."""
        closed = first_frame(self.engine.frames, "close", "in") is not None
        return "the broker ended the TCP connection" + ("" if closed else " without an AMQP close")

    @property
    def eof(self) -> bool:
        """True once the broker has ended the TCP connection (the end of its stream was read)."""
        return self._eof

    @contextmanager
    def watching(self, seconds: float) -> Iterator[None]:
        """Within the block every wait lasts at least ``seconds`` (a row's bounded watch, by the clock: an effect
        that comes late is seen too); the floor it had before comes back after, whatever happens inside."""
        before, self.min_watch = self.min_watch, seconds
        try:
            yield
        finally:
            self.min_watch = before

    def mark(self) -> int:
        """A position in the frame log: pass it as ``since`` to look only at frames captured after now."""
        return len(self.engine.frames)

    # -- the loop ------------------------------------------------------------------------------------

    def pump(self, until: Callable[[], bool] | None = None, timeout: float | None = None,
             on: Session | Link | str | None = None) -> bool:
        """Move bytes both ways until ``until()`` is true (returns True) or ``timeout`` passes (False).

        With no ``until``, moves bytes for the whole ``timeout``. A wait lasts at least :attr:`min_watch`
        (unless ``until()`` comes true), whatever ``timeout`` says. Raises :class:`PeerError` if the socket
        fails; a closed connection ends the wait early (returns ``until()``'s value then), and so does a
        broker that says it is idle (:mod:`.idle`: nothing more can arrive; :attr:`went_idle` is then True).
        The time-out does not run out while a broker on this host is still reading what we wrote (:mod:`.backlog`:
        the wait goes on while it reads, up to :data:`.backlog.READING_PATIENCE` time-outs).
        ``on`` names where the awaited frame must come from (a link, a session or :data:`.ended.ANY_SESSION`):
        once the broker has ended that session or detached that link, nothing awaited can come and the wait
        ends (:mod:`.ended`; :attr:`cut_short` then says why). The bounded watch is never cut short.
        """
        if self._sock is None:
            raise PeerError("the peer is not connected")
        wait = WaitBudget(max(self.timeout if timeout is None else timeout, self.min_watch))
        floor = wait.clock.started + self.min_watch
        self.went_idle = False
        self.cut_short = None
        while True:
            self._flush()
            for _ in self.engine.events():
                pass  # the script reads proton's objects directly; events only need draining
            self._flush()
            if until is not None and until():
                return True
            remaining = wait.remaining(self._sock, self._eof)
            if remaining <= 0 or self._eof:
                return until() if until is not None else False
            if on is not None and time.monotonic() >= floor:
                self.cut_short = nothing_more(on, self.connection)
                if self.cut_short is not None:
                    return until() if until is not None else False
            watching = self._watch if time.monotonic() >= floor else None  # no idle shortcut inside the watch
            readiness = wait_readable(self._sock, watching, remaining)
            if readiness == "idle":
                self.went_idle = True
                return until() if until is not None else False
            if readiness == "readable":
                self._read()
            self.engine.tick(time.monotonic())

    def _flush(self) -> None:
        data = self.engine.data_to_send()
        if data:
            self._write(data)

    def _write(self, data: bytes) -> None:
        assert self._sock is not None
        try:
            write_all(self._sock, data, self.timeout, self.wire)
        except OSError as exc:
            self._eof = True
            raise PeerError(f"write to broker failed: {exc}") from None

    def _read(self) -> None:
        assert self._sock is not None
        got = read_once(self._sock, self.wire, self.engine.capture)
        if got is None:
            return
        data, arrived = got
        if not data:
            self._eof = self.wire.eof = True
        self._received(data, arrived)

    def _received(self, data: bytes, arrived: int) -> None:
        """Hand proton the bytes read (arrived at ``arrived``, ns), or the stream's end (``b""``)."""
        if data:
            self.engine.receive_data(data, arrived)
        else:
            self.engine.receive_eof()

    # -- raw mode ------------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> list[Frame]:
        """Write bytes straight to the socket, bypassing proton (which does not learn of them).

        Anything proton had queued is written first, so order is kept. The bytes are captured as
        outbound frames; bytes that are not valid framing are captured as one "raw-bytes" frame. After our own
        half-close (or close): :class:`PeerError`, nothing written or captured (see :func:`ensure_writable`).
        """
        ensure_writable(self.wire)
        self._flush()
        splitter = FrameSplitter("out")
        try:
            frames = list(shared(splitter.split(data)))
            if splitter.buffered:
                tail = data[-splitter.buffered:]
                frames.append(Frame("out", 0, -1, "raw-bytes", {"note": "incomplete frame"}, b"", tail))
        except FramingError:
            frames = [Frame("out", 0, -1, "raw-bytes", {"note": "not valid framing"}, b"", data)]
        for frame in frames:
            self.engine.capture(frame)
        self._write(data)
        return frames

    # -- expectations --------------------------------------------------------------------------------

    def find(self, performative: str, since: int = 0, direction: str = "in", **fields: Any) -> Frame | None:
        """The first captured frame after ``since`` with this performative whose fields match the pattern."""
        pattern = _field_pattern(fields)
        for frame in self.engine.frames[since:]:
            if frame.direction == direction and frame.performative == performative and \
                    not mismatches(pattern, frame.fields):
                return frame
        return None

    def expect(self, performative: str, since: int = 0, timeout: float | None = None, direction: str = "in",
               on: Session | Link | str | None = None, **fields: Any) -> Frame:
        """Wait for an inbound ``performative`` frame after ``since`` whose fields match; return it.

        Field names use ``_`` for ``-`` (``delivery_id=0``); values are patterns. Raises
        :class:`ExpectationFailed` after ``timeout`` (default: the peer's) with the evidence, or sooner when
        the frame can no longer come ``on`` that link or session (:meth:`pump`).
        """
        found: list[Frame] = []

        def arrived() -> bool:
            found[:] = [f for f in [self.find(performative, since, direction, **fields)] if f is not None]
            return bool(found)

        started = time.monotonic()
        if self.pump(arrived, timeout, on):
            return found[0]
        pattern = {"performative": performative, **_field_pattern(fields)}
        observed = [f for f in self.engine.frames[since:]
                    if f.direction == direction and f.performative == performative]
        waited = f"the broker went idle without one after {time.monotonic() - started:.3f}s" if self.went_idle \
            else f"({self.cut_short} after {time.monotonic() - started:.3f}s)" if self.cut_short \
            else f"({self.stream_end()} after {time.monotonic() - started:.3f}s)" if self._eof \
            else f"within {self.timeout if timeout is None else timeout:.2f}s"
        raise ExpectationFailed(f"{self.label}: no matching {performative} {waited}", pattern, observed,
                                list(self.engine.frames))

    def expect_none(self, performative: str, since: int = 0, within: float | None = None, **fields: Any) -> None:
        """Watch for ``within`` seconds (default: the peer's quiet time); raise if a matching frame arrives."""
        if self.pump(lambda: self.find(performative, since, **fields) is not None,
                     self.quiet if within is None else within):
            frame = self.find(performative, since, **fields)
            assert frame is not None
            raise ExpectationFailed(f"{self.label}: an unexpected {performative} arrived",
                                    {"no": performative, **_field_pattern(fields)}, [frame], list(self.engine.frames))

    # -- scripted steps ------------------------------------------------------------------------------

    def open(self) -> Frame:
        """Send open and wait for the broker's open; returns it (its properties name the product)."""
        since = self.mark()
        self.connection.open()
        return self.expect("open", since)

    def begin(self) -> Session:
        """Begin a session and wait for the broker's begin."""
        since = self.mark()
        session = self.connection.session()
        session.open()
        self.expect("begin", since)
        return session

    def attach_receiver(self, session: Session, address: str, *, name: str | None = None,
                        rcv_settle_mode: str = "first", snd_settle_mode: str | None = None,
                        durable: str = "none", expiry: str | None = None, credit: int = 0,
                        filter: dict | None = None) -> tuple[Receiver, Frame]:
        """Attach a receiving link from ``address``; wait for the broker's attach; grant ``credit``.

        Returns proton's receiver and the broker's attach frame (whose ``source`` may be null: refused).
        """
        receiver = session.receiver(name or f"rcv-{next(_ids)}")
        receiver.source.address = address
        receiver.source.durability = DURABILITY[durable]
        if durable != "none":
            receiver.source.expiry_policy = Terminus.EXPIRE_NEVER
        if expiry is not None:
            receiver.source.expiry_policy = {"never": Terminus.EXPIRE_NEVER,
                                             "link-detach": Terminus.EXPIRE_WITH_LINK}[expiry]
        if filter:
            receiver.source.filter.put_dict(filter)
        receiver.target.address = None
        receiver.rcv_settle_mode = RCV_SETTLE_MODES[rcv_settle_mode]
        if snd_settle_mode is not None:
            receiver.snd_settle_mode = SND_SETTLE_MODES[snd_settle_mode]
        return receiver, self._attach(receiver, credit)

    def attach_sender(self, session: Session, address: str, *, name: str | None = None,
                      snd_settle_mode: str = "unsettled", rcv_settle_mode: str = "first") -> tuple[Sender, Frame]:
        """Attach a sending link to ``address`` and wait for the broker's attach."""
        sender = session.sender(name or f"snd-{next(_ids)}")
        sender.target.address = address
        sender.source.address = None
        sender.snd_settle_mode = SND_SETTLE_MODES[snd_settle_mode]
        sender.rcv_settle_mode = RCV_SETTLE_MODES[rcv_settle_mode]
        return sender, self._attach(sender, 0)

    def _attach(self, link: Link, credit: int) -> Frame:
        since = self.mark()
        link.open()
        if credit:
            link.flow(credit)
        return self.expect("attach", since, on=link.session, name=link.name)

    def handle_of(self, link: Link) -> int:
        """The handle we gave ``link`` in our most recent attach for it (read from the captured frame): the one of
        that name and ``link``'s role, since a sending and a receiving link may share a name (2.6.1)."""
        role = "receiver" if link.is_receiver else "sender"
        for frame in reversed(self.engine.frames):
            if frame.direction == "out" and frame.performative == "attach" and frame.fields.get("name") == link.name \
                    and frame.fields.get("role") == role:
                return frame.fields["handle"]
        raise PeerError(f"no attach was sent for link {link.name!r}")

    def wait_for_disposition(self, delivery_id: int, since: int, timeout: float, role: str) -> Frame | None:
        """The first inbound disposition after ``since`` from ``role`` whose range covers ``delivery_id``.

        Returns None when none arrives within ``timeout`` (absence is an observation, not an error), at once
        when the broker has ended every session (nothing can come then: :mod:`.ended`).
        """
        def covering() -> Frame | None:
            for frame in self.engine.frames[since:]:
                fields = frame.fields
                if frame.direction == "in" and frame.performative == "disposition" and fields.get("role") == role:
                    first = fields.get("first")
                    last = fields.get("last") if fields.get("last") is not None else first
                    if isinstance(first, int) and in_span(delivery_id, first, last):
                        return frame
            return None

        self.pump(lambda: covering() is not None, timeout, ANY_SESSION)
        return covering()

    def wait_for_credit(self, sender: Sender, timeout: float | None = None) -> None:
        """Wait until the broker has granted ``sender`` credit; :class:`NoCredit` if it does not within ``timeout``."""
        if not self.pump(lambda: sender.credit > 0, timeout):
            raise NoCredit(f"{self.label}: the broker granted no credit on link {sender.name}",
                                    {"flow": "link-credit > 0"}, [], list(self.engine.frames))

    def send(self, sender: Sender, body: Any, *, tag: bytes | None = None, settled: bool = False,
             message: Message | None = None, state: tuple[int, list[Any]] | None = None) -> tuple[Delivery, Frame]:
        """Send one whole message (``settled``: pre-settled); returns proton's delivery and its transfer frame.

        ``state`` is the delivery's local state, set before the transfer goes out (and before settling): its
        descriptor code and its fields, e.g. ``(0x34, [txn_id])`` for a transactional-state.
        """
        self.wait_for_credit(sender)
        since = self.mark()
        tag = tag or f"t{next(_ids)}".encode()
        delivery = sender.delivery(tag)
        if state is not None:
            code, fields = state
            delivery.local.data = fields
            delivery.update(code)
        self.give(sender, (message or Message(body=body)).encode())
        sender.advance()
        if settled:
            delivery.settle()
        frame = self.expect("transfer", since, direction="out", delivery_tag=tag)
        return delivery, frame

    def send_partial(self, sender: Sender, chunk: bytes, tag: bytes) -> Delivery:
        """Send the first bytes of a message as a transfer with ``more=true``; finish with :meth:`finish_partial`."""
        self.wait_for_credit(sender)
        since = self.mark()
        delivery = sender.delivery(tag)
        self.give(sender, chunk)
        self.expect("transfer", since, direction="out", delivery_tag=tag, more=True)
        return delivery

    def finish_partial(self, sender: Sender, rest: bytes) -> None:
        """Send the rest of the current partial delivery and mark it complete."""
        since = self.mark()
        self.give(sender, rest)
        sender.advance()
        self.expect("transfer", since, direction="out")

    def broker_max_frame_size(self) -> int | None:
        """The max-frame-size the broker's open states: the largest frame proton writes to it (AMQP 1.0 2.7.1); None
        where its open states none (no limit) or has not come."""
        broker_open = self._broker_open()
        return None if broker_open is None else broker_open.fields.get("max-frame-size")

    def _broker_open(self) -> Frame | None:
        return first_frame(self.engine.frames, "open", "in")

    def give(self, sender: Sender, data: bytes) -> None:
        """Give ``data`` to ``sender``'s current delivery, to go out in transfers proton writes.

        Where the broker's open states a max-frame-size, proton splits at it, and ``data`` is given whole. Where it
        states none (AMQP 1.0 2.7.1: no limit), proton would write any message in one transfer, so a row that needs a
        message of several transfers would depend on the broker's limit: there the peer gives ``data``
        :data:`UNSTATED_LIMIT_PIECE` bytes at a time, having proton write each piece but the last (``more`` set)
        before the next (2.6.14: how a message is split is the sender's choice). Where the session window holds
        them back, proton writes what it holds once the window opens."""
        broker_open = self._broker_open()
        if broker_open is None or broker_open.fields.get("max-frame-size") is not None:
            sender.send(data)
            return
        pieces = [data[start:start + UNSTATED_LIMIT_PIECE] for start in range(0, len(data), UNSTATED_LIMIT_PIECE)]
        for piece in pieces[:-1]:
            sender.send(piece)
            self.engine.transport.pending()  # proton writes the delivery's bytes so far, more=true
        sender.send(pieces[-1] if pieces else data)

    def receive(self, receiver: Receiver, since: int = 0, timeout: float | None = None) -> ReceivedDelivery:
        """Wait for the next whole message on ``receiver``; read it and advance the link.

        Raises :class:`ExpectationFailed` after ``timeout``, or as soon as the broker has detached the link or
        ended its session (no transfer can come then: :mod:`.ended`)."""
        def ready() -> bool:
            current = receiver.current
            return current is not None and current.readable and not current.partial

        if not self.pump(ready, timeout, receiver):
            observed = [f for f in self.engine.frames[since:] if f.direction == "in"]
            why = f" ({self.cut_short})" if self.cut_short else f" ({self.stream_end()})" if self._eof else ""
            raise ExpectationFailed(f"{self.label}: no message arrived on link {receiver.name}{why}",
                                    {"transfer": {"handle": "(link)"}}, observed, list(self.engine.frames))
        delivery = receiver.current
        body = receiver.recv(delivery.pending)
        receiver.advance()
        message = Message()
        message.decode(body)
        return ReceivedDelivery(delivery, self._transfer_frames(delivery_tag(delivery)), message)

    def _transfer_frames(self, tag: bytes) -> list[Frame]:
        """The transfers of the latest delivery the broker sent with ``tag`` (a tag may come again on a redelivery)."""
        for transfers in reversed(self._inbound.update(self.engine.frames)):
            if transfers[0].fields.get("delivery-tag") == tag:
                return list(transfers)
        raise PeerError(f"proton reported delivery {tag!r} but no transfer frame with that tag was captured")

    def dispose(self, delivery: Delivery, outcome: str | None, *, settle: bool,
                condition: tuple[str, str] | tuple[str, str | None, dict | None] | None = None) -> None:
        """Set our outcome for a received delivery (proton sends the disposition) and settle if asked.

        ``condition`` is (name, description) or (name, description, info) of a rejection's error (proton
        sends the name as a symbol, ``info`` as a map). ``outcome=None`` with ``settle=True`` settles with
        no state.
        """
        if outcome is not None:
            if condition is not None:
                from proton import Condition

                delivery.local.condition = Condition(*condition)
            delivery.update(OUTCOMES[outcome])
        if settle:
            delivery.settle()
        self._flush()


def read_once(sock: socket.socket, wire: WireCount, capture: Callable[[Frame], None]) -> tuple[bytes, int] | None:
    """One read of up to :data:`READ_SIZE` bytes from the non-blocking ``sock``, counted in ``wire``: the bytes and
    when they arrived (:func:`.recvtime.recv_stamped`); ``b""`` once the stream has ended; None when nothing can be
    read yet (a TLS record not whole yet). A socket error ends the stream: it is captured as a ``socket-error``
    frame (``capture``) and ``b""`` returned."""
    try:
        data, arrived = recv_stamped(sock, READ_SIZE)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except OSError as exc:
        data, arrived = b"", time.monotonic_ns()
        capture(Frame("in", 0, -1, "socket-error", {"error": str(exc)}, b"", b""))
    wire.read += len(data)
    return data, arrived


IDLE_POLL_S = 0.002  # how often a peer with an idle probe asks again while the broker is busy


def write_all(sock: socket.socket, data: bytes, timeout: float, wire: WireCount) -> None:
    """Write all of ``data`` to the non-blocking ``sock``, counting what goes in ``wire``; raises
    :class:`PeerError` ("the broker stopped reading") once ``timeout`` passes with nothing taken (a slow reader is
    not a stopped one: the time-out runs from the last byte taken), and lets the socket's own ``OSError`` out.

    It tries a send every 50 ms rather than wait for the socket to be writable: the kernel calls a socket
    writable only once half its queue has gone, which a slow reader takes seconds over, while a send takes what
    room there is at once."""
    view = memoryview(data)
    deadline = time.monotonic() + timeout
    while view:
        try:
            sent = sock.send(view)
            wire.written += sent
            view = view[sent:]
            deadline = time.monotonic() + timeout
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            if time.monotonic() > deadline:
                raise PeerError("the broker stopped reading: a write did not complete in time") from None
            with waiting():
                select.select([], [sock], [], 0.05)


def watch_socket(sock: socket.socket, address: BrokerAddress) -> tuple[WireCount, Watch | None]:
    """A byte count for a newly connected ``sock`` and, when the broker at ``address`` offers one, its idle probe."""
    host, port = sock.getsockname()[:2]
    wire = WireCount(f"{host}:{port}")
    return wire, probe_for(address.host, address.port, wire)


def wait_readable(sock: socket.socket, watch: Watch | None, remaining: float) -> str:
    """Wait at most ``remaining`` (and 50 ms) for ``sock`` to have bytes: "readable", "idle" or "nothing".

    "idle": nothing is readable and the broker's idle probe says nothing more will come.
    """
    pending = getattr(sock, "pending", None)  # TLS: decrypted bytes already buffered
    if (pending is not None and pending() > 0) or select.select([sock], [], [], 0)[0]:
        return "readable"
    if watch is not None and watch.idle():
        return "idle"
    poll = min(remaining, IDLE_POLL_S if watch is not None else 0.05)
    with waiting():  # cases side by side take turns everywhere but here (peers/turns.py)
        return "readable" if select.select([sock], [], [], poll)[0] else "nothing"


def _field_pattern(fields: dict[str, Any]) -> dict[str, Any]:
    return {name.replace("_", "-"): value for name, value in fields.items()}
