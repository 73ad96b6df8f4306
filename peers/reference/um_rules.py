"""The UM 10.11 rejection, link-fate and transaction rules of the reference broker, as a Broker mixin.

Sans-I/O like the rest of :mod:`broker`: methods act on proton's engine objects only. They implement the
"Rejected" subscription and publishing tables and the transactional rows of the "Accepted" tables of
``000_ce67ac77056e886e.txt``:

- each UM native operation (subscribe, publish, durable ACK) is checked against the provocations the admin
  set (ACL denials, store capacity, a one-shot internal failure, removed nodes or durable subscriptions),
  a selector that does not parse and the one-subscription-per-node rule, giving the row's error condition;
- a refused delivery is rejected with that condition and settled; a fatal condition then closes the link
  (detach closed=true with the same error), a transient one leaves it attached and advancing;
- a coordinator link declares and discharges transactions; a transactional publish is staged and answered
  with ``transactional-state`` (txn-id and outcome); a transactional disposition of a subscriber is staged
  and acknowledged on commit.

Methods in the last section are the behaviours mutants (:mod:`mutants`) replace, one guarantee each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from proton import Condition, Delivery, Described, Endpoint, Link, Message, Terminus, symbol

from ..amqp_types import BY_NAME, type_of
from ..engine import delivery_tag
from ..frames import described
from .acl import Acl
from .faults import Faults, is_fatal
from .selector import SelectorError, message_env, parse_cached, selector_text
from .transactions import UNKNOWN_ID, TransactionManager, UnknownTransaction

if TYPE_CHECKING:
    from .broker import BrokerConnection, Consumer, Outstanding
    from .store import Node, StoredMessage, Subscription

DECLARED = BY_NAME["declared"].code
TRANSACTIONAL_STATE = BY_NAME["transactional-state"].code
PUT_BACK_OUTCOMES = ("released", "modified")  # a committed transactional disposition of these puts the message back


def stored_count(node: Node) -> int:
    """How many messages the node's store holds (waiting or delivered and not yet settled)."""
    return len(node.queue.pending) + len(node.queue.outstanding)


def _type_name(value: Any) -> str | None:
    """The name of the described type ``value`` is (a decoded control message or outcome), whichever form
    its descriptor takes; None when it is not a described value or its descriptor is not in the table."""
    described_type = type_of(getattr(value, "descriptor", None))
    return described_type.name if described_type is not None else None


def _filter_map(link: Link) -> Any:
    data = link.remote_source.filter
    data.rewind()
    if not data.next():
        return None
    return data.get_object()


def selector_env(message: StoredMessage) -> dict[str, Any]:
    """What a selector reads of a stored message (:func:`message_env`), decoded once per stored message and
    again only after its encoded bytes were replaced (a redelivery rewrites them)."""
    cached = message.selector_env
    if cached is None or cached[0] is not message.encoded:
        decoded = Message()
        decoded.decode(message.encoded)
        cached = (message.encoded, message_env(decoded))
        message.selector_env = cached
    return cached[1]


class UmRules:
    """Mixed into :class:`Broker`; expects its ``store``, ``policy`` and ``_settle``."""

    store: Any
    policy: Any

    def init_um(self) -> None:
        """Create the provocation state (ACL, faults) and the transaction manager."""
        self.acl = Acl()
        self.faults = Faults()
        self.transactions = TransactionManager()

    # -- nodes and the checks before each UM native operation ----------------------------------------

    def live_node(self, address: str) -> Node | None:
        """The node at ``address``, or None when there is none (or the admin removed it)."""
        if address in self.faults.removed:
            return None
        return self.store.node(address)

    def publish_error(self, address: str, encoded: bytes = b"") -> Condition | None:
        """The error a publish of ``encoded`` to ``address`` meets (Rejected/Publishing rows 2 and 3), or None.

        A full store refuses every message, durable ones too (the guide makes no exception for them)."""
        node = self.live_node(address)
        if node is None:
            return self.condition("amqp:not-found", f"no node at address {address!r}")
        if not self.acl.allows("publish", address):
            return self.condition("amqp:unauthorized-access", f"publishing to {address!r} is not allowed")
        if self.faults.take_failure(address):
            return self.condition("amqp:internal-error", f"internal failure publishing to {address!r}")
        if self.faults.full(address, stored_count(node)) and self.counts_against_capacity(encoded):
            return self.condition("amqp:resource-limit-exceeded", f"the store of {address!r} is full")
        return None

    def subscribe_error(self, connection: BrokerConnection, link: Link, address: str) -> Condition | None:
        """The error a subscription request meets (Rejected/Subscription row 1), or None."""
        node = self.live_node(address)
        if node is None:
            return self.condition("amqp:not-found", f"no node at address {address!r}")
        if not self.acl.allows("subscribe", address):
            return self.condition("amqp:unauthorized-access", f"subscribing to {address!r} is not allowed")
        if self.faults.take_failure(address):
            return self.condition("amqp:internal-error", f"internal failure subscribing to {address!r}")
        text = selector_text(_filter_map(link))
        if text is not None:
            try:
                parse_cached(text)  # consumer_selector then takes the same parse
            except SelectorError as exc:
                return self.condition("amqp:invalid-field", f"jms-selector: {exc}")
        if self.policy_one_subscription() and any(
                c.node is node and c.link is not link and c.link.state & Endpoint.LOCAL_ACTIVE
                for c in connection.consumers.values()):
            return self.condition("amqp:illegal-state", f"this connection is already subscribed to {address!r}")
        return None

    def policy_one_subscription(self) -> bool:
        """Whether the policy in force allows one subscription per node and connection (UM 10.11)."""
        return bool(getattr(self.policy, "one_subscription_per_node", False))

    def ack_error(self, consumer: Consumer) -> Condition | None:
        """The error a durable ACK meets (Rejected/Subscription row 2), or None."""
        address = consumer.node.address
        if not self.acl.allows("durable-subscribe", address):
            return self.condition("amqp:unauthorized-access", f"durable subscribing to {address!r} is not allowed")
        node = self.live_node(address)
        name = consumer.subscription.name
        if node is not consumer.node or node.durable.get(name) is not consumer.subscription:
            return self.condition("amqp:not-found", f"no durable subscription {name!r} on {address!r}")
        return None

    def refuse_subscription(self, link: Link, error: Condition) -> None:
        """Answer a subscription request that failed: attach, then close with the error when it is fatal."""
        link.open()
        if self.link_fatal(error):
            self.close_link(link, error)

    def refuse_delivery(self, link: Link, delivery: Delivery, error: Condition, txn_id: bytes | None = None) -> None:
        """Reject and settle ``delivery`` with ``error`` (inside ``transactional-state`` for a transactional
        one); then close the link if the error is fatal."""
        if delivery.settled:
            delivery.settle()  # pre-settled by the peer: nothing to answer, the link's fate still applies
        elif txn_id is not None:
            self.transactional_answer(delivery, txn_id, Delivery.REJECTED, error)
            delivery.settle()
        else:
            self.reject(delivery, error)
        if self.link_fatal(error):
            self.close_link(link, error)

    def close_link(self, link: Link, error: Condition) -> None:
        """Detach ``link`` with closed=true and ``error``."""
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.condition = error
            link.close()

    # -- selectors ------------------------------------------------------------------------------------

    def consumer_selector(self, link: Link) -> Any:
        """The parsed ``jms-selector`` of a consumer link's source, or None (it parsed at subscription)."""
        text = selector_text(_filter_map(link))
        return None if text is None else parse_cached(text)

    def take_for(self, consumer: Consumer, excluded: Iterable[int] = ()) -> StoredMessage | None:
        """The next message for ``consumer``: the oldest pending one its selector (if any) selects, skipping
        the EIDs in ``excluded`` (modified undeliverable-here on this link, AMQP 1.0 3.4.5)."""
        selector = consumer.selector
        subscription: Subscription = consumer.subscription
        skip = set(excluded)
        for message in list(subscription.pending):
            if message.eid in skip:
                continue
            if selector is not None and not selector.matches(selector_env(message)):
                continue
            subscription.pending.remove(message)
            subscription.outstanding[message.eid] = message
            return message
        return None

    # -- transactions ----------------------------------------------------------------------------------

    @staticmethod
    def is_coordinator(link: Link) -> bool:
        """True for a link whose peer's target is a transaction coordinator."""
        return link.is_receiver and link.remote_target.type == Terminus.COORDINATOR

    @staticmethod
    def txn_of(delivery: Delivery) -> bytes | None:
        """The txn-id of a transfer that carries ``transactional-state``, else None."""
        if delivery.remote_state != TRANSACTIONAL_STATE:
            return None
        data = delivery.remote.data or []
        return bytes(data[0]) if data and data[0] is not None else b""

    def on_coordinator_delivery(self, connection: BrokerConnection, delivery: Delivery) -> None:
        """A control message on a coordinator link: declare (answered ``declared``) or discharge."""
        link = delivery.link
        if delivery.partial:
            return
        encoded = link.recv(delivery.pending)
        link.advance()
        message = Message()
        try:
            message.decode(encoded)
            body = message.body
        except Exception:  # a control message proton cannot decode
            body = None
        kind = _type_name(body)
        if kind == "declare":
            txn_id = self.transactions.declare(connection, link.name)
            delivery.local.data = [txn_id]
            delivery.update(DECLARED)
            delivery.settle()
        elif kind == "discharge":
            fields = list(body.value or [])
            txn_id = bytes(fields[0]) if fields and fields[0] is not None else b""
            fail = bool(fields[1]) if len(fields) > 1 and fields[1] is not None else False
            try:
                self.transactions.discharge(txn_id, self.rolls_back(fail))
                self._settle(delivery, Delivery.ACCEPTED)
            except UnknownTransaction:
                self._settle(delivery, Delivery.REJECTED, Condition(UNKNOWN_ID, f"no transaction {txn_id!r}"))
        else:
            self._settle(delivery, Delivery.REJECTED,
                         Condition("amqp:decode-error", "a coordinator takes declare and discharge only"))
        if link.credit < 50:
            link.flow(100 - link.credit)

    def publish_transactional(self, delivery: Delivery, txn_id: bytes, address: str, encoded: bytes) -> None:
        """Stage a transactional publish (it becomes visible on commit) and answer it accepted inside
        ``transactional-state`` unless the publisher settled it already (Accepted/Publishing row 6)."""
        try:
            self.transactions.stage(txn_id, commit=lambda: self._publish_now(address, encoded))
        except UnknownTransaction:
            self.refuse_delivery(delivery.link, delivery, Condition(UNKNOWN_ID, f"no transaction {txn_id!r}"))
            return
        if delivery.settled:
            delivery.settle()
        else:
            self.transactional_answer(delivery, txn_id, Delivery.ACCEPTED)
            delivery.settle()

    def _publish_now(self, address: str, encoded: bytes) -> None:
        node = self.live_node(address)
        if node is not None:
            node.publish(encoded)

    def um_consumer_disposition(self, consumer: Consumer, delivery: Delivery, outstanding: Outstanding) -> bool:
        """Handle a subscriber's disposition the UM rules govern; True when it is dealt with.

        A transactional one is staged (Accepted/Subscription row 8): no answer now, acknowledged and
        settled on commit, left outstanding on rollback. An unsettled accepted one of a durable subscriber
        whose ACK fails (Rejected/Subscription row 2) is rejected, settled, and the link closed.
        """
        state = delivery.remote_state
        tag = delivery_tag(delivery)
        if state == TRANSACTIONAL_STATE:
            data = list(delivery.remote.data or [])
            txn_id = bytes(data[0]) if data and data[0] is not None else b""
            outcome = _type_name(data[1]) if len(data) > 1 else None
            try:
                self.transactions.stage(txn_id, commit=lambda: self._commit_ack(consumer, delivery, tag, outcome))
            except UnknownTransaction:
                self.close_link(delivery.link, Condition(UNKNOWN_ID, f"no transaction {txn_id!r}"))
            return True
        if state == Delivery.ACCEPTED and not delivery.settled and consumer.subscription.durable:
            error = self.ack_error(consumer)
            if error is not None:
                del consumer.outstanding[tag]
                outstanding.subscription.requeue(outstanding.message.eid)
                self.refuse_delivery(delivery.link, delivery, error)
                return True
        return False

    def _commit_ack(self, consumer: Consumer, delivery: Delivery, tag: bytes, outcome: str | None) -> None:
        outstanding = consumer.outstanding.pop(tag, None)
        if outstanding is None:
            return
        if outcome in PUT_BACK_OUTCOMES:
            outstanding.subscription.requeue(outstanding.message.eid)
            answer = Delivery.RELEASED
        else:
            outstanding.subscription.acknowledge(outstanding.message.eid)
            answer = Delivery.ACCEPTED
        if not delivery.settled:
            delivery.update(answer)
            delivery.settle()

    # -- the behaviours a mutant (peers/reference/mutants.py) may replace, one guarantee each ------------

    def counts_against_capacity(self, encoded: bytes) -> bool:
        """Whether this message is refused by a full store: every message is (Rejected/Publishing rows 2, 3)."""
        return True

    def rolls_back(self, fail: bool) -> bool:
        """Whether a discharge with this ``fail`` flag rolls the transaction back (it does exactly when set)."""
        return fail

    def condition(self, name: str, description: str) -> Condition:
        """The AMQP error for a refused operation: ``name`` is the condition the UM guide gives."""
        return Condition(name, description)

    def link_fatal(self, error: Condition) -> bool:
        """Whether ``error`` closes the link (fatal in the UM guide) or leaves it advancing (transient)."""
        return is_fatal(error.name)

    def reject(self, delivery: Delivery, error: Condition) -> None:
        """Answer a refused delivery: rejected, carrying ``error``, and settled."""
        delivery.local.condition = error
        delivery.update(Delivery.REJECTED)
        delivery.settle()

    def transactional_answer(self, delivery: Delivery, txn_id: bytes, outcome: int,
                             error: Condition | None = None) -> None:
        """Set a transactional delivery's state: ``transactional-state`` with ``txn_id`` and the outcome."""
        if outcome == Delivery.REJECTED:
            name, text = (symbol(error.name), error.description) if error is not None else (None, None)
            inner: Described = described("rejected", error=described("error", condition=name, description=text))
        else:
            inner = described("accepted")
        delivery.local.data = [txn_id, inner]
        delivery.update(TRANSACTIONAL_STATE)
