"""Mutants of the wire answers (issue 13, branch errorswire): each breaks one field of AMQP 1.0 2.7 that only the
golden bytes of ``wire.performatives`` (binding on ``exact-encoding`` brokers) used to catch, the way a real
broker plausibly would. Each was written, and run against the tables, before the decoded row that kills it.
And one that breaks the connection's end instead of a field: the broker ends the stream where it must answer a
close (2.4.3), which ``wire.performatives/broker-close`` and every row of the client grid (``broker_dropped``) catch.

Registered into :data:`.mutants.MUTANTS` by one line there; their scope is the wire and core.errors tables.
"""

from __future__ import annotations

from proton import Data, Described, Event, symbol, ubyte, uint, ulong

from ..amqp_types import BY_NAME
from ..frames import Frame, encode_value
from .broker import Broker, BrokerConnection
from .mutant_kit import Mutant, RewritingBroker, performative_and_payload, reframed, with_field

DETACH_CLOSED = 1  # field index of detach.closed
ATTACH_ROLE = 2
ATTACH_INITIAL_DELIVERY_COUNT = 9
ATTACH_SOURCE, ATTACH_OFFERED = (BY_NAME["attach"].fields.index(name) for name in ("source", "offered-capabilities"))
FLOW_INCOMING_WINDOW = BY_NAME["flow"].fields.index("incoming-window")
SOURCE_DURABLE = BY_NAME["source"].fields.index("durable")
HEADER_CODE = BY_NAME["header"].code
SMALL_MESSAGE = 4096  # a message rewritten stays well below any max-frame-size
SCOPE = ("wire.", "core.errors")


class DetachReplyNotClosed(RewritingBroker):
    """Answers a closing detach with a detach that is not closed (the link is only detached, 2.6.6, 2.7.7)."""

    def rewrite(self, frame: Frame) -> bytes:
        """A detach without error goes out with closed=false."""
        if frame.performative != "detach" or frame.fields.get("error") is not None:
            return frame.raw
        return with_field(frame, DETACH_CLOSED, False)


class SenderAttachWithoutInitialCount(RewritingBroker):
    """Attaches as sender without initial-delivery-count, which 2.7.3 requires of a sender."""

    def rewrite(self, frame: Frame) -> bytes:
        """A sender's attach goes out without initial-delivery-count."""
        if frame.performative != "attach" or frame.fields.get("role") != "sender":
            return frame.raw
        return with_field(frame, ATTACH_INITIAL_DELIVERY_COUNT, None)


class StringErrorCondition(RewritingBroker):
    """Sends the condition of a close, end or detach error as a string, where 2.8.14 types it a symbol."""

    def rewrite(self, frame: Frame) -> bytes:
        """An error-carrying close, end or detach goes out with its condition re-encoded as a string."""
        index = {"close": 0, "end": 0, "detach": 2}.get(frame.performative)
        if index is None or frame.fields.get("error") is None:
            return frame.raw
        performative, _ = performative_and_payload(frame)
        error = performative.value[index]
        values = list(error.value)
        values[0] = str(values[0])
        return with_field(frame, index, Described(error.descriptor, values))


class ListLinkCapabilities(RewritingBroker):
    """Offers capabilities in its attaches as a list of symbols, where 2.7.3 types offered-capabilities ``symbol``
    multiple: a symbol or an array of symbols (1.6.5). What proton's codec makes of a Python list; a client may
    rightly refuse it (go-amqp does). No row names the field: the type check every case makes of every frame
    (fixtures/frame_types.py) catches it."""

    def rewrite(self, frame: Frame) -> bytes:
        """An attach goes out with offered-capabilities [x-list-capability], a list."""
        if frame.performative != "attach":
            return frame.raw
        return with_field(frame, ATTACH_OFFERED, [symbol("x-list-capability")])


class UlongFlowWindow(RewritingBroker):
    """Sends its flows' incoming-window as a ulong, where 2.7.4 types it a uint (the value itself is right)."""

    def rewrite(self, frame: Frame) -> bytes:
        """A flow goes out with its incoming-window re-encoded as a ulong."""
        if frame.performative != "flow" or frame.fields.get("incoming-window") is None:
            return frame.raw
        return with_field(frame, FLOW_INCOMING_WINDOW, ulong(frame.fields["incoming-window"]))


class SourceDurablePastChoices(RewritingBroker):
    """Answers an attach with a source whose durable is 3, past the choices 3.5.5 gives terminus-durability (none
    0, configuration 1, unsettled-state 2)."""

    def rewrite(self, frame: Frame) -> bytes:
        """An attach with a source goes out with source.durable 3."""
        if frame.performative != "attach" or not isinstance(frame.fields.get("source"), dict):
            return frame.raw
        performative, _ = performative_and_payload(frame)
        source = performative.value[ATTACH_SOURCE]
        values = list(source.value) + [None] * max(0, SOURCE_DURABLE + 1 - len(source.value))
        values[SOURCE_DURABLE] = uint(3)
        return with_field(frame, ATTACH_SOURCE, Described(source.descriptor, values))


class NumericHeaderDurable(RewritingBroker):
    """Delivers each message (of one transfer) with a header whose durable is the ubyte 1, where 3.2.1 types it a
    boolean: a broker that re-encodes messages from its own store format and keeps the flag as a number."""

    def rewrite(self, frame: Frame) -> bytes:
        """A whole message in one transfer goes out with its header (if any) replaced by one of durable ubyte 1."""
        if frame.performative != "transfer" or frame.fields.get("more") or not frame.payload \
                or frame.payload_len > SMALL_MESSAGE:
            return frame.raw
        performative, payload = performative_and_payload(frame)
        header = Data()
        consumed = header.decode(payload)
        header.rewind()
        header.next()
        first = header.get_object()
        rest = payload[consumed:] if isinstance(first, Described) and first.descriptor == HEADER_CODE else payload
        return reframed(frame, performative, encode_value(Described(ulong(HEADER_CODE), [ubyte(1)])) + rest)


class DropsSocketOnClose(Broker):
    """Ends the TCP stream when a client closes its connection, instead of answering its close with a close (2.4.3)."""

    def _on_pn_connection_remote_close(self, connection: BrokerConnection, event: Event) -> None:
        connection.close_after_write = True  # what it had to write goes out, then the socket ends: no close frame


ERRORSWIRE_MUTANTS = (
    Mutant("detach-reply-not-closed", "answers a closing detach with closed=false", "AMQP 1.0 2.6.6, 2.7.7",
           DetachReplyNotClosed, scope=SCOPE),
    Mutant("sender-attach-without-initial-count", "attaches as sender without initial-delivery-count",
           "AMQP 1.0 2.7.3", SenderAttachWithoutInitialCount, scope=SCOPE),
    Mutant("string-error-condition", "sends a close/end/detach error condition as a string, not a symbol",
           "AMQP 1.0 2.8.14", StringErrorCondition, scope=SCOPE),
    Mutant("list-link-capabilities", "offers its attaches' capabilities as a list, not a symbol array",
           "AMQP 1.0 2.7.3, 1.6.5 (the type check of every frame)", ListLinkCapabilities, scope=SCOPE),
    Mutant("ulong-flow-window", "sends a flow's incoming-window as a ulong, not a uint",
           "AMQP 1.0 2.7.4 (the type check of every frame)", UlongFlowWindow, scope=SCOPE),
    Mutant("source-durable-past-choices", "answers an attach with a source whose durable is 3",
           "AMQP 1.0 3.5.3, 3.5.5 (the type check of every frame)", SourceDurablePastChoices, scope=SCOPE),
    Mutant("numeric-header-durable", "delivers messages whose header's durable is the ubyte 1, not a boolean",
           "AMQP 1.0 3.2.1 (the type check of every delivered message)", NumericHeaderDurable, scope=SCOPE),
    Mutant("drops-socket-on-close", "ends the TCP stream when a client closes, instead of answering with a close",
           "AMQP 1.0 2.4.3 (wire.performatives/broker-close; the client grid's broker_dropped)", DropsSocketOnClose,
           scope=SCOPE),
)
