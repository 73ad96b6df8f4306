"""Mutants for the UM, transaction and router rows (issue 13): each breaks one guarantee those rows check.

Registered into :data:`mutants.MUTANTS` by one line there; the scope of each is the tables that catch it.
Every mutant here was written, and seen to survive the catalogue, before the row that catches it.
"""

from __future__ import annotations

import time
from typing import Any

from proton import Condition, Delivery, Described, Link, Message, Terminus, symbol, uint, ulong

from ..frames import Frame
from .broker import Broker, BrokerConnection, Outstanding
from .mutant_kit import (
    DISPOSITION_STATE,
    Mutant,
    PutsBackLater,
    RewritingBroker,
    outstanding_of,
    split_due,
    with_field,
)
from .router import Outcome, RoutedConsumer, Router
from .transactions import Transaction, TransactionManager, UnknownTransaction

DISPOSITION_LAST = 2  # field index of disposition.last


class DropsRejectInfo(Router):
    """Propagates a rejection's condition and description but not its ``info`` map."""

    def propagated(self, outcome: Outcome) -> Outcome:
        """The rejection without info (001 anycast: the consumer's delivery state is propagated whole)."""
        if outcome.state != Delivery.REJECTED or outcome.condition is None:
            return outcome
        name, description = outcome.condition[:2]
        return Outcome(Delivery.REJECTED, (name, description))


class _LenientManager(TransactionManager):
    """Discharges an unknown txn-id as if it were an empty transaction."""

    def get(self, txn_id: bytes) -> Transaction:
        try:
            return super().get(txn_id)
        except UnknownTransaction:
            self.open[bytes(txn_id)] = Transaction(bytes(txn_id), None)
            return self.open[bytes(txn_id)]


class AcceptsUnknownDischarge(Broker):
    """Answers the discharge of a txn-id it never declared with accepted."""

    def init_um(self) -> None:
        """The reference's UM state, with a transaction manager that takes any txn-id."""
        super().init_um()
        self.transactions = _LenientManager()


class _UnforgettingManager(TransactionManager):
    """Keeps a transaction open after its discharge (its work applies once; a second discharge is taken)."""

    def discharge(self, txn_id: bytes, fail: bool) -> int:
        transaction = self.get(txn_id)
        applied = super().discharge(txn_id, fail)
        self.open[transaction.txn_id] = Transaction(transaction.txn_id, transaction.owner)
        return applied


class AcceptsSecondDischarge(Broker):
    """Accepts a second discharge of a transaction already discharged."""

    def init_um(self) -> None:
        """The reference's UM state, with a transaction manager that never forgets a discharged one."""
        super().init_um()
        self.transactions = _UnforgettingManager()


def _error_as_string(error: object) -> object:
    """An error (decoded frame dict) re-encoded with its condition as a string, not a symbol."""
    if not isinstance(error, dict) or error.get("condition") is None:
        return error
    info = error.get("info")
    return Described(ulong(0x1d), [str(error["condition"]), error.get("description"),
                                   {symbol(k): v for k, v in info.items()} if isinstance(info, dict) else None])


class StringRejectionCondition(RewritingBroker):
    """Sends a rejected disposition's error condition as a string where AMQP 1.0 (2.8.15) types it symbol."""

    def rewrite(self, frame: Frame) -> bytes:
        """A rejected disposition with its condition re-encoded as a string; other frames unchanged."""
        state = frame.fields.get("state") if frame.performative == "disposition" else None
        if not isinstance(state, dict) or state.get("@type") != "rejected" or not state.get("error"):
            return frame.raw
        return with_field(frame, DISPOSITION_STATE, Described(ulong(0x25), [_error_as_string(state["error"])]))


DETACH_ERROR = 2  # field index of detach.error


class StringDetachCondition(RewritingBroker):
    """Sends a detach's error condition as a string where AMQP 1.0 (2.8.15) types it symbol."""

    def rewrite(self, frame: Frame) -> bytes:
        """A detach with an error re-encoded with its condition as a string; other frames unchanged."""
        if frame.performative != "detach" or not frame.fields.get("error"):
            return frame.raw
        return with_field(frame, DETACH_ERROR, _error_as_string(frame.fields["error"]))


class StoresDurableWhenFull(Broker):
    """Takes a durable message (header durable=true) into a full store: "durable ones are spooled"."""

    def counts_against_capacity(self, encoded: bytes) -> bool:
        """Only non-durable messages meet the store's capacity."""
        message = Message()
        try:
            message.decode(encoded)
        except Exception:  # not a message proton decodes: the capacity applies
            return True
        return not message.durable


class KeepsLinkAfterPresettledFatal(Broker):
    """Drops a refused pre-settled transfer without the link's fate: a fatal error leaves the link attached."""

    def refuse_delivery(self, link: Link, delivery: Delivery, error: Condition, txn_id: bytes | None = None) -> None:
        """A settled delivery is dropped and nothing more; an unsettled one is refused as the reference does."""
        if delivery.settled:
            delivery.settle()
            return
        super().refuse_delivery(link, delivery, error, txn_id)


class KeepsLinkAfterPresettledStoreFault(KeepsLinkAfterPresettledFatal):
    """Closes the link for a refused pre-settled transfer when the ACLs refuse it, but drops one the store fails
    (amqp:internal-error, amqp:not-found) with the link left attached, as if a fire-and-forget transfer's store
    fault were no more than a lost message."""

    def refuse_delivery(self, link: Link, delivery: Delivery, error: Condition, txn_id: bytes | None = None) -> None:
        """The reference's refusal, except a settled delivery's fault other than amqp:unauthorized-access."""
        if delivery.settled and error.name != "amqp:unauthorized-access":
            super().refuse_delivery(link, delivery, error, txn_id)
            return
        Broker.refuse_delivery(self, link, delivery, error, txn_id)


class KeepsLinkAfterPresettledTransactionalFault(Broker):
    """Drops a refused pre-settled transactional transfer with the link left attached, as if a transaction's
    fire-and-forget post were no more than a lost message; every other refusal is the reference's."""

    def refuse_delivery(self, link: Link, delivery: Delivery, error: Condition, txn_id: bytes | None = None) -> None:
        """A settled delivery in a transaction is dropped, nothing more; any other is refused as the reference does."""
        if delivery.settled and txn_id is not None:
            delivery.settle()
            return
        super().refuse_delivery(link, delivery, error, txn_id)


class PublishesLater(Broker):
    """The base of the mutants whose asynchronous publish lands late: :meth:`publish_later` stores a message on its
    node :attr:`LATE_S` after it is called (when the node is still there), in the loop's next pass by then."""

    LATE_S = 0.25

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._retries: list[tuple[float, str, bytes]] = []

    def publish_later(self, address: str, encoded: bytes) -> None:
        """Store ``encoded`` on the node at ``address`` :attr:`LATE_S` from now."""
        self._retries.append((time.monotonic() + self.LATE_S, address, encoded))

    def dispatch(self) -> None:
        """Store the late publishes whose time has come, then dispatch as the reference does."""
        due, self._retries = split_due(self._retries)
        for _, address, encoded in due:
            node = self.live_node(address)
            if node is not None:
                node.publish(encoded)
        super().dispatch()


class StoresFailedPublishLater(PublishesLater):
    """Rejects a publish its store failed (amqp:internal-error) and closes the link as the reference does, but the
    asynchronous native publish behind it is retried 0.25 s later and succeeds: the rejected message is stored after
    all (UM's publish is "queued" and "processed" later: Accepted/Publishing rows 3-6)."""

    def publish_error(self, address: str, encoded: bytes = b"") -> Condition | None:
        """The reference's error; an internal error's publish is retried :attr:`LATE_S` later."""
        error = super().publish_error(address, encoded)
        if error is not None and error.name == "amqp:internal-error":
            self.publish_later(address, encoded)
        return error


class StoresRolledBackPublishLater(PublishesLater):
    """Stages a transactional publish as the reference does, but its queued native publish still lands 0.25 s after
    a rollback (the asynchronous TX publish request of Accepted/Publishing row 6 outruns the rollback): the message
    the rollback discarded is stored after all."""

    def publish_transactional(self, delivery: Delivery, txn_id: bytes, address: str, encoded: bytes) -> None:
        """The reference's staging, and a rollback action of its own that publishes the message late."""
        super().publish_transactional(delivery, txn_id, address, encoded)
        try:
            self.transactions.stage(txn_id, commit=lambda: None, rollback=lambda: self.publish_later(address, encoded))
        except UnknownTransaction:  # refused by the reference: nothing was staged
            pass


class PartialTakenOnMixedLink(Broker):
    """Applies the multi-frame rule on links attached with sender settle mode UNSETTLED or SETTLED only: a broker
    that follows the mapping table's settle-mode column, whose MIXED branch forgot the partial-delivery check."""

    def refuses_multi_frame(self, delivery: Delivery) -> bool:
        """The reference's rule, except on a link of sender settle mode MIXED (the delivery is taken whole)."""
        return super().refuses_multi_frame(delivery) and delivery.link.remote_snd_settle_mode != Link.SND_MIXED


class PresettledPartialTaken(Broker):
    """Takes a multi-frame delivery the publisher settled from its first frame: a fire-and-forget fast path that
    assembles and stores it, where the reference refuses every multi-frame delivery."""

    def refuses_multi_frame(self, delivery: Delivery) -> bool:
        """The reference's rule, except for a delivery that arrived settled (it is taken whole)."""
        return super().refuses_multi_frame(delivery) and not delivery.settled


class PresettledSkipsTransformer(Broker):
    """Stores a pre-settled publish without running the node's transformer: a fire-and-forget fast path straight
    to the store, so a transformer that returns null never refuses it."""

    def transformer_yields_null(self, address: str, delivery: Delivery) -> bool:
        """The reference's answer, except False for a delivery the publisher settled."""
        return super().transformer_yields_null(address, delivery) and not delivery.settled


class SkipsStarvedConsumer(Router):
    """Routes a message only to consumers that have credit now: a starved consumer never gets its copy."""

    def consumers_of(self, address: str) -> list[RoutedConsumer]:
        """The attached consumers with link credit (001 multicast: all outbound deliveries, credit or not)."""
        return [c for c in super().consumers_of(address) if c.link.credit > 0]


class OverreachingConsumerAnswer(RewritingBroker):
    """Answers a subscriber's disposition with the right state but a range one delivery too wide."""

    def rewrite(self, frame: Frame) -> bytes:
        """A sender-role disposition with ``last`` = ``first`` + 1; other frames unchanged."""
        if frame.performative != "disposition" or frame.fields.get("role") != "sender":
            return frame.raw
        return with_field(frame, DISPOSITION_LAST, uint(int(frame.fields["first"]) + 1))


class OverreachingPublishAnswer(RewritingBroker):
    """Answers a publisher's transfer with the right state but a range one delivery too wide."""

    def rewrite(self, frame: Frame) -> bytes:
        """A receiver-role disposition with ``last`` = ``first`` + 1; other frames unchanged."""
        if frame.performative != "disposition" or frame.fields.get("role") != "receiver":
            return frame.raw
        return with_field(frame, DISPOSITION_LAST, uint(int(frame.fields["first"]) + 1))


class RequeueStripsMessage(Broker):
    """Requeues the messages a departed consumer held as bare messages: header durable and annotations lost."""

    def _release_consumer(self, consumer: Any) -> None:
        for outstanding in consumer.outstanding.values():
            message = Message()
            message.decode(outstanding.message.encoded)
            message.durable = False
            message.annotations = None
            outstanding.message.encoded = message.encode()
        super()._release_consumer(consumer)


class RedeliversAckedLater(PutsBackLater):
    """Accepts and settles a durable subscriber's ACK, then (the ACK "lost") puts the event back 0.25 s later."""

    def puts_back(self, outstanding: Outstanding, delivery: Delivery) -> bool:
        """A durable subscriber's accepted event comes back."""
        return outstanding.subscription.durable and delivery.remote_state == Delivery.ACCEPTED


class PersistentSecondRedeliversAckedLater(RedeliversAckedLater):
    """Puts a durable subscriber's acknowledged event back 0.25 s after the ACK on its one path of receiver settle
    mode SECOND with durability UNSETTLED_STATE (a two-phase persistent ACK that is "lost"); every other
    subscriber's ACK holds, as the reference's does."""

    def puts_back(self, outstanding: Outstanding, delivery: Delivery) -> bool:
        """An ACK on the consumer link's one path (UNSETTLED_STATE, SECOND) comes back as its parent's does."""
        link = delivery.link  # the consumer's link
        return link.remote_source.durability == Terminus.DELIVERIES and link.rcv_settle_mode == Link.RCV_SECOND \
            and super().puts_back(outstanding, delivery)


class DurableAttachNamesSubscription(Broker):
    """Answers a durable subscriber's attach with a source naming its subscription (``<node>::<link name>``)
    instead of the node it subscribed to; a non-durable subscriber's source names the node, as the reference's."""

    def _open_consumer(self, connection: BrokerConnection, link: Link) -> None:
        super()._open_consumer(connection, link)
        if link.name in connection.consumers and link.remote_source.durability != Terminus.NONDURABLE:
            link.source.address = f"{link.remote_source.address}::{link.name}"  # the attach goes out later


class DurableStatelessNotAcked(Broker):
    """Answers a durable subscriber's disposition with no state as the reference does (accepted, settled) but
    keeps the event in the durable subscription: its durable ACK path runs for an explicit accepted only."""

    def _on_consumer_disposition(self, connection: BrokerConnection, delivery: Delivery) -> None:
        outstanding = outstanding_of(connection, delivery)
        stateless = self.terminal_state(delivery.remote_state) == 0
        if outstanding is not None and stateless and outstanding.subscription.durable:
            outstanding.subscription.pending.append(outstanding.message)  # not acknowledged for good
        super()._on_consumer_disposition(connection, delivery)


class SecondModeCommitKeepsAck(Broker):
    """Commits a transactional ACK of a subscriber in receiver settle mode SECOND without acknowledging the event
    (as if waiting for a settlement of the subscriber's that never comes): the subscription offers it again."""

    def _commit_ack(self, consumer: Any, delivery: Delivery, tag: bytes, outcome: Any) -> None:
        outstanding = consumer.outstanding.get(tag)
        super()._commit_ack(consumer, delivery, tag, outcome)
        if outstanding is not None and consumer.link.rcv_settle_mode == Link.RCV_SECOND \
                and outstanding.message not in outstanding.subscription.pending:  # acknowledged: undo it
            outstanding.subscription.pending.appendleft(outstanding.message)


class RedeliversCommittedLater(PutsBackLater):
    """Acknowledges a durable subscriber's transactional ACK when its transaction commits, then (the ACK "lost")
    puts the event back 0.25 s later; a plain ACK it keeps, as the reference does (:meth:`puts_back` never)."""

    def _commit_ack(self, consumer: Any, delivery: Delivery, tag: bytes, outcome: Any) -> None:
        outstanding = consumer.outstanding.get(tag)
        super()._commit_ack(consumer, delivery, tag, outcome)
        if outstanding is not None and outstanding.subscription.durable \
                and outstanding.message not in outstanding.subscription.pending:  # acknowledged, not given back
            self.put_back_later(outstanding)


class DurableSubscribeSkipsAcl(Broker):
    """Checks a subscription request against the subscribe ACL only for a non-durable link: a durable subscriber
    (CONFIGURATION or UNSETTLED_STATE) is let in, as if its durable-subscribe check at ACK time were enough."""

    def subscribe_error(self, connection: BrokerConnection, link: Link, address: str) -> Condition | None:
        """The reference's error, except amqp:unauthorized-access for a durable link."""
        error = super().subscribe_error(connection, link, address)
        if error is not None and error.name == "amqp:unauthorized-access" \
                and link.remote_source.durability != Terminus.NONDURABLE:
            return None
        return error


class DurableAckAclFirstOnly(Broker):
    """Checks a durable ACK against the ACLs in receiver settle mode FIRST only: its SECOND path (UM's would-be
    two-phase ACK) forgot the check, and the ACK is taken."""

    def ack_error(self, consumer: Any) -> Condition | None:
        """The reference's error, except amqp:unauthorized-access on a link in receiver settle mode SECOND."""
        error = super().ack_error(consumer)
        if error is not None and error.name == "amqp:unauthorized-access" \
                and consumer.link.rcv_settle_mode == Link.RCV_SECOND:
            return None
        return error


UMROUTER_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("router-drops-reject-info", "propagates a rejection's condition and description but drops its info",
           "001 Unsettled, anycast (the consumer's delivery state, error info included, reaches the producer)",
           DropsRejectInfo, scope=("router.",)),
    Mutant("accepts-unknown-discharge", "accepts the discharge of a txn-id it never declared",
           "AMQP 1.0 4.3, 4.5 transaction-error unknown-id (rejected with amqp:transaction:unknown-id)",
           AcceptsUnknownDischarge, scope=("um.transactions.",)),
    Mutant("accepts-second-discharge", "accepts a second discharge of a transaction already discharged",
           "AMQP 1.0 4.3 (a discharged transaction is over), 4.5 unknown-id", AcceptsSecondDischarge,
           scope=("um.transactions.",)),
    Mutant("string-rejection-condition", "sends a rejection's error condition as a string, not a symbol",
           "000 Rejected: Subscription row 2, Publishing rows 1-3 (the condition); AMQP 1.0 2.8.15 (symbol); "
           "core.outcomes.publish/rejected", StringRejectionCondition, scope=("um.", "core.")),
    Mutant("string-detach-condition", "sends a fatal detach's error condition as a string, not a symbol",
           "000 Rejected: every fatal condition (link closed with it); AMQP 1.0 2.8.15 (symbol)",
           StringDetachCondition, scope=("um.",)),
    Mutant("stores-durable-when-full", "takes durable messages into a full store (rejects only non-durable ones)",
           "000 Rejected: Publishing rows 2-3 (amqp:resource-limit-exceeded when the store capacity is reached)",
           StoresDurableWhenFull, scope=("um.rejected.",)),
    Mutant("keeps-link-after-presettled-fatal", "keeps the link after a fatal error on a pre-settled transfer",
           "000 Rejected: Publishing row 2 (sender settle mode UNSETTLED OR SETTLED; fatal: the link is closed)",
           KeepsLinkAfterPresettledFatal, scope=("um.rejected.",)),
    Mutant("keeps-link-after-presettled-store-fault", "keeps the link after a store fault (internal error, node "
           "not found) on a pre-settled transfer; an ACL refusal closes it", "000 Rejected: Publishing row 2 (sender "
           "settle mode UNSETTLED OR SETTLED; amqp:internal-error and amqp:not-found are fatal: the link is closed)",
           KeepsLinkAfterPresettledStoreFault, scope=("um.rejected.",)),
    Mutant("keeps-link-after-presettled-transactional-fault", "keeps the link after a fatal error on a pre-settled "
           "transactional transfer (dropped, no link fate)", "000 Rejected: Publishing row 3 (sender settle mode N/A; "
           "fatal: the link is closed)", KeepsLinkAfterPresettledTransactionalFault, scope=("um.rejected.",)),
    Mutant("stores-failed-publish-later", "rejects a publish its store failed, then stores it 0.25 s later (the "
           "asynchronous publish retried)", "000 Rejected: Publishing rows 2 and 3 (amqp:internal-error: the delivery "
           "is rejected, nothing stored)", StoresFailedPublishLater, scope=("um.rejected.",)),
    Mutant("stores-rolled-back-publish-later", "stores a transactional publish 0.25 s after its transaction rolled "
           "back (the queued publish outruns the rollback)", "000 Accepted: Publishing row 6 with AMQP 1.0 4.4.1 (a "
           "transactional post is discarded on rollback)", StoresRolledBackPublishLater, scope=("um.transactions.",)),
    Mutant("partial-taken-on-mixed-link", "takes a multi-frame delivery whole on a link of sender settle mode MIXED",
           "000 Accepted: Publishing row 1 and Rejected: Publishing row 1 (sender settle mode N/A: rejected with "
           "amqp:not-implemented, fatal)", PartialTakenOnMixedLink, scope=("um.accepted.", "um.rejected.")),
    Mutant("presettled-partial-taken", "takes a multi-frame delivery whole when the publisher settled it",
           "000 Accepted: Publishing row 1 and Rejected: Publishing row 1 (sender settle mode N/A: rejected with "
           "amqp:not-implemented, fatal)", PresettledPartialTaken, scope=("um.accepted.", "um.rejected.")),
    Mutant("presettled-skips-transformer", "stores a pre-settled publish without running the node's transformer",
           "000 Accepted: Publishing row 2 (sender settle mode N/A: a null transformer result is rejected with "
           "amqp:precondition-failed, nothing stored)", PresettledSkipsTransformer, scope=("um.accepted.",)),
    Mutant("router-skips-starved-consumer", "multicasts only to consumers that have credit when the message comes",
           "001 Unsettled, multicast (all outbound deliveries; the router waits for each consumer's final state)",
           SkipsStarvedConsumer, scope=("router.",)),
    Mutant("overreaching-consumer-answer", "answers a subscriber's disposition with a range one delivery too wide",
           "000 Accepted: Subscription Mapping rows 1, 3-7 (the delivery is accepted and settled: that one)",
           OverreachingConsumerAnswer, scope=("um.",)),
    Mutant("overreaching-publish-answer", "answers a publisher's transfer with a range one delivery too wide",
           "000 Accepted/Rejected: Publishing Mapping (each delivery is answered and settled: that one)",
           OverreachingPublishAnswer, scope=("um.",)),
    Mutant("requeue-strips-message", "redelivers a message a consumer left unsettled without its header durable "
           "and message-annotations", "000 Accepted: Subscription row 8 with AMQP 1.0 4.4.2 (rollback: the message "
           "stays unacknowledged) and 3.2 (durable, annotations)", RequeueStripsMessage, scope=("um.",)),
    Mutant("redelivers-acked-later", "puts a durable subscriber's acknowledged event back 0.25 s after the ACK",
           "000 Accepted: Subscription Mapping rows 5, 7 (the durable ACK: the event is acknowledged for good)",
           RedeliversAckedLater, scope=("um.",)),
    Mutant("persistent-second-redelivers-acked-later", "puts a durable subscriber's acknowledged event back 0.25 s "
           "after the ACK, in settle mode SECOND with durability UNSETTLED_STATE only", "000 Accepted: Subscription "
           "Mapping row 7 (CONFIGURATION OR UNSETTLED_STATE: the durable ACK acknowledges the event for good)",
           PersistentSecondRedeliversAckedLater, scope=("um.",)),
    Mutant("durable-attach-names-subscription", "answers a durable subscriber's attach with a source naming its "
           "subscription instead of the node", "000 Accepted: Subscription Mapping row 3 (ANY settle mode, ANY "
           "durability: the link address is examined, the destination node verified and subscribed to)",
           DurableAttachNamesSubscription, scope=("um.",)),
    Mutant("durable-stateless-not-acked", "answers a durable subscriber's disposition with no state but keeps the "
           "event", "000 Accepted: Subscription Mapping row 1 (receiver settle mode and durability N/A: the delivery "
           "is accepted with the source's default outcome)", DurableStatelessNotAcked, scope=("um.",)),
    Mutant("second-mode-commit-keeps-ack", "commits a transactional ACK in receiver settle mode SECOND without "
           "acknowledging the event", "000 Accepted: Subscription Mapping row 8 (receiver settle mode and durability "
           "N/A) with AMQP 1.0 4.4.2 (the commit acknowledges the event)", SecondModeCommitKeepsAck,
           scope=("um.transactions.",)),
    Mutant("redelivers-committed-later", "puts a durable subscriber's event back 0.25 s after the commit that "
           "acknowledged it", "000 Accepted: Subscription Mapping row 8 with AMQP 1.0 4.4.2 (the commit acknowledges "
           "the event for good)", RedeliversCommittedLater, scope=("um.transactions.",)),
    Mutant("durable-subscribe-skips-acl", "checks a subscription against the subscribe ACL for non-durable links "
           "only", "000 Rejected: Subscription Mapping row 1 (ANY settle mode, ANY durability: "
           "amqp:unauthorized-access)", DurableSubscribeSkipsAcl, scope=("um.rejected.",)),
    Mutant("durable-ack-acl-first-only", "checks a durable ACK against the ACLs in receiver settle mode FIRST only",
           "000 Rejected: Subscription Mapping row 2 (FIRST OR SECOND, CONFIGURATION OR UNSETTLED_STATE: "
           "amqp:unauthorized-access)", DurableAckAclFirstOnly, scope=("um.rejected.",)),
)}
