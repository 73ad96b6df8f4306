"""Mutants of the wire answers (issue 13, branch errorswire): each breaks one field of AMQP 1.0 2.7 that only the
golden bytes of ``wire.performatives`` (binding on ``exact-encoding`` brokers) used to catch, the way a real
broker plausibly would. Each was written, and run against the tables, before the decoded row that kills it.
And one that breaks the connection's end instead of a field: the broker ends the stream where it must answer a
close (2.4.3), which ``wire.performatives/broker-close`` and every row of the client grid (``broker_dropped``) catch.

Registered into :data:`.mutants.MUTANTS` by one line there; their scope is the wire and core.errors tables.
"""

from __future__ import annotations

from proton import Described, Event

from ..frames import Frame
from .broker import Broker, BrokerConnection
from .mutant_kit import Mutant, RewritingBroker, performative_and_payload, with_field

DETACH_CLOSED = 1  # field index of detach.closed
ATTACH_ROLE = 2
ATTACH_INITIAL_DELIVERY_COUNT = 9
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
    Mutant("drops-socket-on-close", "ends the TCP stream when a client closes, instead of answering with a close",
           "AMQP 1.0 2.4.3 (wire.performatives/broker-close; the client grid's broker_dropped)", DropsSocketOnClose,
           scope=SCOPE),
)
