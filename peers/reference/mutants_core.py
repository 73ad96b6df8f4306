"""Mutants of the core delivery families (issue 13): each breaks one guarantee of AMQP 1.0 2.6-2.8 / 3.2-3.4
the way a real broker plausibly would, and each was written, and seen to survive, before the row that kills it.

Registered into :data:`.mutants.MUTANTS` by one line there; their scope is the core tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proton import Delivery, Described, Link, Message, symbol, uint, ulong

from ..amqp_types import BY_NAME
from ..frames import Frame
from ..sequence import MODULUS
from .broker import Broker, BrokerConnection, Consumer, Outstanding
from .mutant_kit import (
    DISPOSITION_STATE,
    Mutant,
    PutsBackLater,
    RewritingBroker,
    RewritingConnection,
    performative_and_payload,
    reframed,
    with_field,
)
from .outcomes import Modification
from .store import StoredMessage, Subscription

DISPOSITION_LAST = 2  # field index of disposition.last
CORE_SCOPE = ("core.",)


def _rewrite_message(encoded: bytes, **changes: object) -> bytes:
    message = Message()
    message.decode(encoded)
    for name, value in changes.items():
        setattr(message, name, value)
    return message.encode()


class RedeliveryDropsDurable(Broker):
    """Re-encodes a released or modified message from its own record, which forgets the header's durable."""

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        outstanding.message.encoded = _rewrite_message(outstanding.message.encoded, durable=False)
        super()._redeliver(connection, consumer, outstanding, state, modification)


class ReleasedDropsAnnotations(Broker):
    """Puts a released message back without its message-annotations (3.4.4: the message is unchanged)."""

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        outstanding.message.encoded = _rewrite_message(outstanding.message.encoded, annotations=None)
        super()._redeliver(connection, consumer, outstanding, state, modification)


class RedeliveryDropsProperties(Broker):
    """Puts a released or modified message back without its message-id and application-properties, as a broker
    that re-encodes it from header, annotations and body alone (3.4.4: the message is unchanged)."""

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        outstanding.message.encoded = _rewrite_message(outstanding.message.encoded, id=None, properties=None)
        super()._redeliver(connection, consumer, outstanding, state, modification)


class SymbolAnnotationValues(Broker):
    """Puts a released or modified message back with its message-annotations' string values re-encoded as symbols
    (3.4.4: the message is unchanged; 3.4.5: only delivery-count and the annotations the modifier gave change)."""

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        own = Message()
        own.decode(outstanding.message.encoded)
        if own.annotations:
            annotations = {key: symbol(value) if isinstance(value, str) else value
                           for key, value in own.annotations.items()}
            outstanding.message.encoded = _rewrite_message(outstanding.message.encoded, annotations=annotations)
        super()._redeliver(connection, consumer, outstanding, state, modification)


class AnnotationsMergeOldWins(Broker):
    """Merges modified's message-annotations under the message's own: an existing key keeps its old value."""

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        own = Message()
        own.decode(outstanding.message.encoded)
        if modification.annotations and own.annotations:
            kept = {symbol(str(k)): v for k, v in modification.annotations.items()}
            kept.update(own.annotations)
            modification = Modification(modification.delivery_failed, modification.undeliverable_here, kept)
        super()._redeliver(connection, consumer, outstanding, state, modification)


class DropsUnsettledOnLinkClose(Broker):
    """Forgets the unsettled deliveries of a consumer link that closes, as if they had been accepted."""

    def _release_consumer(self, consumer: Consumer) -> None:
        for outstanding in consumer.outstanding.values():
            outstanding.subscription.acknowledge(outstanding.message.eid)
        consumer.outstanding.clear()


class StampsFirstAcquirer(Broker):
    """Marks every delivery first-acquirer=true, also a message another link acquired before (3.2.1)."""

    def dispatch(self) -> None:
        for connection in self.connections:
            for consumer in connection.consumers.values():
                for message in consumer.subscription.pending:
                    message.encoded = _rewrite_message(message.encoded, first_acquirer=True)
        super().dispatch()


class WidensConsumerAnswer(RewritingBroker):
    """Settles a consumer's delivery with a disposition whose range runs one delivery-id past it."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "disposition" or frame.fields.get("role") != "sender":
            return frame.raw
        last = frame.fields.get("last")
        return with_field(frame, DISPOSITION_LAST, uint((last if last is not None else frame.fields["first"]) + 1))


class SettlesAcceptedAsReleased(RewritingBroker):
    """Settles a consumer's accepted delivery with a disposition whose state says released."""

    def rewrite(self, frame: Frame) -> bytes:
        state = frame.fields.get("state") if frame.performative == "disposition" else None
        if frame.fields.get("role") != "sender" or not isinstance(state, dict) or state.get("@type") != "accepted":
            return frame.raw
        return with_field(frame, DISPOSITION_STATE, Described(ulong(BY_NAME["released"].code), []))


class RepeatsPublishAnswer(RewritingBroker):
    """Sends every settled answer to a publisher twice (a settled delivery has no further state, 2.6.12)."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative == "disposition" and frame.fields.get("role") == "receiver" \
                and frame.fields.get("settled"):
            return frame.raw + frame.raw
        return frame.raw


class RedeliversRejectedLater(PutsBackLater):
    """Settles a rejection as 3.4.3 says, then puts the message back for redelivery a quarter second later."""

    def puts_back(self, outstanding: Outstanding, delivery: Delivery) -> bool:
        """A rejected message comes back."""
        return delivery.remote_state == Delivery.REJECTED


class RedeliversAcceptedLater(PutsBackLater):
    """Settles an accepted delivery, then puts the message back for redelivery a quarter second later."""

    def puts_back(self, outstanding: Outstanding, delivery: Delivery) -> bool:
        """An accepted message comes back."""
        return delivery.remote_state == Delivery.ACCEPTED


class StallsBehindStarvedConsumer(Broker):
    """Serves a queue's consumers in attach order and waits while the first one has no credit (head-of-line)."""

    def take_for(self, consumer: Consumer, excluded: Iterable[int] = ()) -> StoredMessage | None:
        sharing = [c for connection in self.connections for c in connection.consumers.values()
                   if c.subscription is consumer.subscription]
        if sharing and sharing[0] is not consumer and sharing[0].link.credit <= 0:
            return None
        return super().take_for(consumer, excluded)


class UndeliverableHereOnce(Broker):
    """Keeps a message modified with undeliverable-here off its link for that link's next message only, then
    forgets: as a broker that puts the message at the back of the queue and skips the link once (3.4.5: it MUST
    NOT be redelivered to the same link endpoint, ever)."""

    def take_for(self, consumer: Consumer, excluded: Iterable[int] = ()) -> StoredMessage | None:
        message = super().take_for(consumer, excluded)
        if message is not None and isinstance(excluded, set):
            excluded.clear()  # the link's own set in Broker.undeliverable: skipped once, it may have it next time
        return message


class DrainsEarlyAfterLargeMessage(Broker):
    """Answers a consumer's drain as soon as a large message (102400 bytes or more, ActiveMQ Artemis's
    amqpMinLargeMessageSize) has gone on its link, as if the queue held no more: what Artemis 2.40.0 does
    (fixtures/profiles/artemis.toml)."""

    LARGE = 102400

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._after_large: set[Link] = set()

    def send_message(self, link: Link, encoded: bytes) -> None:
        super().send_message(link, encoded)
        if link.drain_mode and len(encoded) >= self.LARGE:
            self._after_large.add(link)

    def take_for(self, consumer: Consumer, excluded: Iterable[int] = ()) -> StoredMessage | None:
        if consumer.link in self._after_large:
            self._after_large.discard(consumer.link)
            return None  # nothing more for now: the drain is answered with the next message still stored
        return super().take_for(consumer, excluded)


class CopiesToEveryConsumer(Broker):
    """Gives each consumer of a queue its own copy of every message, as a topic would."""

    def _open_consumer(self, connection: BrokerConnection, link: Link) -> None:
        super()._open_consumer(connection, link)
        consumer = connection.consumers.get(link.name)
        if consumer is None or consumer.subscription.durable:
            return
        copy = Subscription(f"copy-{id(link)}", durable=False)
        copy.pending.extend(StoredMessage(m.eid, m.encoded) for m in consumer.subscription.pending)
        consumer.node.durable[copy.name] = copy  # later publishes reach it too
        consumer.subscription = copy


class CloseAnsweredWithDetach(RewritingBroker):
    """Answers a link's close (detach closed=true) with a detach that does not close it (2.6.6)."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "detach" or not frame.fields.get("closed"):
            return frame.raw
        return with_field(frame, 1, None)


class StringAnnotationKeys(RewritingBroker):
    """Gives a modified outcome whose message-annotations are keyed by strings, where AMQP 1.0 3.4.5 types them
    ``fields``, a map keyed by symbols."""

    def rewrite(self, frame: Frame) -> bytes:
        """A modified disposition with its annotations' keys re-encoded as strings; other frames unchanged."""
        state = frame.fields.get("state") if frame.performative == "disposition" else None
        if not isinstance(state, dict) or state.get("@type") != "modified" or not state.get("message-annotations"):
            return frame.raw
        annotations = {str(key): value for key, value in state["message-annotations"].items()}
        return with_field(frame, DISPOSITION_STATE, Described(ulong(0x27), [
            state.get("delivery-failed"), state.get("undeliverable-here"), annotations]))


FLOW_DELIVERY_COUNT = 5  # field index of flow.delivery-count


class AbortCountingConnection(RewritingConnection):
    """A connection that keeps how many deliveries its publishers aborted (:attr:`aborted`) and writes every flow
    with a delivery-count that many short."""

    def __init__(self, broker: Broker, peer_name: str) -> None:
        super().__init__(broker, peer_name, self._uncounted)
        self.aborted = 0

    def _uncounted(self, frame: Frame) -> bytes:
        count = frame.fields.get("delivery-count") if frame.performative == "flow" else None
        if not self.aborted or not isinstance(count, int):
            return frame.raw
        return with_field(frame, FLOW_DELIVERY_COUNT, uint((count - self.aborted) % MODULUS))


class UncountedAbort(Broker):
    """Leaves a publisher's aborted delivery out of the delivery-count its flows state, as if it had consumed no
    credit (004 pn_delivery_aborted: an aborted delivery consumes a credit; 2.6.7: the receiver's delivery-count is
    the sender's, each delivery counted)."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        return AbortCountingConnection(self, peer_name)

    def _on_published(self, connection: BrokerConnection, delivery: Delivery) -> None:
        if delivery.aborted and isinstance(connection, AbortCountingConnection):
            connection.aborted += 1
        super()._on_published(connection, delivery)


ATTACH_SOURCE = BY_NAME["attach"].fields.index("source")
SOURCE_DEFAULT_OUTCOME = BY_NAME["source"].fields.index("default-outcome")
RELEASED_DESCRIPTOR = ulong(BY_NAME["released"].code)


class DeclaresReleasedDefault(RewritingBroker):
    """Declares released as the default-outcome of the source of every link it sends on, and still applies
    accepted to a delivery its consumer settles with no state (the reference's choice when it declares none): the
    attach says the message comes back, the broker drops it."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "attach" or frame.fields.get("role") != "sender":
            return frame.raw
        performative, payload = performative_and_payload(frame)
        values = list(performative.value)
        source = values[ATTACH_SOURCE]
        if not isinstance(source, Described):
            return frame.raw
        fields = list(source.value)
        fields += [None] * (SOURCE_DEFAULT_OUTCOME + 1 - len(fields))
        fields[SOURCE_DEFAULT_OUTCOME] = Described(RELEASED_DESCRIPTOR, [])
        values[ATTACH_SOURCE] = Described(source.descriptor, fields)
        return reframed(frame, Described(performative.descriptor, values), payload)


CORE_ROW_MUTANTS = tuple(Mutant(*fields, scope=CORE_SCOPE) for fields in (
    ("redelivery-drops-durable", "redelivers a released or modified message with durable=false",
     "3.4.4 the released message is unchanged; 3.4.5 only delivery-count and annotations change "
     "(core.outcomes/released, modified-*)", RedeliveryDropsDurable),
    ("released-drops-annotations", "redelivers a released message without its message-annotations",
     "3.4.4 the released message is unchanged at the node (core.outcomes/released)", ReleasedDropsAnnotations),
    ("redelivery-drops-properties", "redelivers a released or modified message without its message-id and "
     "application-properties", "3.4.4 the released message is unchanged (core.outcomes/released, modified-*)",
     RedeliveryDropsProperties),
    ("symbol-annotation-values", "redelivers a released or modified message with its annotations' string values "
     "as symbols", "3.4.4 the released message is unchanged (core.outcomes/released, modified-*)",
     SymbolAnnotationValues),
    ("annotations-merge-old-wins", "merges modified's message-annotations with the old values taking precedence",
     "3.4.5 message-annotations: the new values take precedence (core.outcomes/modified-annotations)",
     AnnotationsMergeOldWins),
    ("drops-unsettled-on-link-close", "forgets a closing consumer link's unsettled deliveries",
     "3.4, 3.5.3 a delivery with no terminal outcome was not consumed (core.outcomes/link-closed-unsettled)",
     DropsUnsettledOnLinkClose),
    ("stamps-first-acquirer", "marks every delivery first-acquirer=true, redeliveries to another link included",
     "3.2.1 first-acquirer (core.outcomes/link-closed-unsettled)", StampsFirstAcquirer),
    ("string-annotation-keys", "gives a modified outcome whose message-annotations are keyed by strings",
     "3.4.5 message-annotations: fields, a map keyed by symbols (core.outcomes.publish/modified)",
     StringAnnotationKeys),
    ("widens-consumer-answer", "settles a consumer's delivery with a range one delivery-id too long",
     "2.7.6 first, last: the range the disposition applies to (core.outcomes/accepted, rejected, range)",
     WidensConsumerAnswer),
    ("settles-accepted-as-released", "settles a consumer's accepted delivery with state released",
     "2.7.6 state, 3.4.2 (core.outcomes/accepted)", SettlesAcceptedAsReleased),
    ("repeats-publish-answer", "sends each settled answer to a publisher twice",
     "2.6.12 a settled delivery has no further state (core.settlement/at-least-once-publish)", RepeatsPublishAnswer),
    ("redelivers-accepted-later", "puts an accepted message back for redelivery 0.25 s after settling it",
     "3.4.2 accepted is terminal, the message is gone (core.outcomes/accepted, its bounded watch)",
     RedeliversAcceptedLater),
    ("stalls-behind-starved-consumer", "sends nothing on a queue while its first consumer has no credit",
     "2.6.7 credit is per link; 3.5.3 distribution-mode move (core.consumers/starved-consumer)",
     StallsBehindStarvedConsumer),
    ("undeliverable-here-once", "keeps an undeliverable-here message off its link for one message only",
     "3.4.5 undeliverable-here: MUST NOT be redelivered to the same link endpoint "
     "(core.outcomes/modified-undeliverable-here, later_on_link)", UndeliverableHereOnce),
    ("drains-early-after-large-message", "answers a drain right after a large message, the next one still stored",
     "2.6.7 drain: the delivery-count is advanced only once every available message is sent "
     "(core.flow/drain-after-a-large-message)", DrainsEarlyAfterLargeMessage),
    ("copies-to-every-consumer", "gives every consumer of a queue its own copy of each message",
     "3.5.3 distribution-mode move: a message goes to one consumer (core.consumers/*)", CopiesToEveryConsumer),
    ("close-answered-with-detach", "answers a link's close with a detach without closed=true",
     "2.6.6, 2.7.7 closed (core.outcomes/link-closed-unsettled)", CloseAnsweredWithDetach),
    ("uncounted-abort", "leaves a publisher's aborted delivery out of the delivery-count its flows state",
     "004 pn_delivery_aborted: an aborted delivery consumes a credit; 2.6.7 delivery-count "
     "(core.transfer/aborted-consumes-credit)", UncountedAbort),
    ("declares-released-applies-accepted", "declares released as its sources' default-outcome and drops a message "
     "settled with no state", "3.5.3 default-outcome: the outcome of a transfer settled before it reached a terminal "
     "state (core.outcomes/no-state-settled)", DeclaresReleasedDefault),
))
