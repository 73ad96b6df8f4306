"""The reference broker's protocol logic, sans-I/O: what it does with each AMQP event.

:class:`Broker` holds the store and the policy; each client is a :class:`BrokerConnection` (SASL layer
plus a :class:`CapturingEngine`) that the server loop feeds bytes. The behaviour implements the
documented guarantees exactly:

- UM 10.11 "Accepted: Subscription Mapping" (``000``): a disposition with no state is answered with the
  source's default outcome (accepted) and settled; an accepted disposition already settled needs no
  answer; an unsettled accepted one is acknowledged (for a durable source, by its ``<store-uid>:<eid>``
  tag) and answered accepted and settled, under receiver settle mode FIRST or SECOND alike.
- UM 10.11 "Accepted: Publishing Mapping": a whole transfer is stored; unsettled ones are answered
  accepted and settled, pre-settled ones get no disposition. A partial (multi-frame) delivery is
  rejected with ``amqp:not-implemented`` and settled when the ``um-10.11`` policy is in force, and
  accepted once complete under ``core``.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

from proton import Condition, Delivery, Endpoint, Event, Link, Terminus, symbol

from ..engine import CapturingEngine, delivery_tag
from ..frames import Frame, FrameSplitter
from .guard import Violation
from .outcomes import Modification, give_provoked, redelivery_bytes
from .sasl import SaslServer
from .store import Node, Store, StoredMessage, Subscription
from .um_rules import UmRules

PRODUCT = "amqp-conformance-reference"
PUBLISHER_CREDIT = 100
# the close the admin's close-publisher-connection has the broker write: condition and description (AMQP 1.0 2.8.16)
FORCED_CLOSE = ("amqp:connection:forced", "the broker's admin closed this connection (close-publisher-connection)")
# the close the admin's fail-publisher-connection has the broker write (AMQP 1.0 2.8.15: any error may close it)
FAILED_CLOSE = ("amqp:internal-error", "the broker's admin failed this connection (fail-publisher-connection)")
# the end the admin's end-publisher-session has the broker write: condition and description (AMQP 1.0 2.8.15)
ENDED_SESSION = ("amqp:internal-error", "the broker's admin ended this session (end-publisher-session)")


@dataclass
class Policy:
    """Behaviour that differs between expectation sets. ``for_set`` gives the one each set requires."""

    partial_delivery: str = "reject"  # "reject" (UM 10.11) or "accept" (core AMQP 1.0)
    one_subscription_per_node: bool = False  # UM 10.11: a second subscription of a connection is illegal-state

    @classmethod
    def for_set(cls, expectation_set: str) -> Policy:
        """The policy under which the broker meets ``expectation_set`` ("core", "um-10.11", ...)."""
        return cls(partial_delivery="accept" if expectation_set == "core" else "reject",
                   one_subscription_per_node=expectation_set == "um-10.11")


@dataclass
class Outstanding:
    """A delivery the broker sent and has not settled: where its message came from."""

    node: Node
    subscription: Subscription
    message: StoredMessage


@dataclass
class Consumer:
    """A link on which the broker sends: its node and subscription."""

    link: Link
    node: Node
    subscription: Subscription
    outstanding: dict[bytes, Outstanding] = field(default_factory=dict)  # by delivery tag
    selector: object = None  # the parsed jms-selector of the link's source, if any


class BrokerConnection:
    """One client connection: SASL, then proton's engine. Feed bytes in, take bytes out."""

    hung = False  # a fault (fault_variants.py) that never finishes acting on its input: never idle

    def __init__(self, broker: Broker, peer_name: str) -> None:
        self.broker = broker
        self.peer_name = peer_name
        self.engine = CapturingEngine(server=True)
        self.sasl = SaslServer(broker.users)
        self.consumers: dict[str, Consumer] = {}  # by link name
        self.multi_frame: set[tuple[str, bytes]] = set()  # (link name, delivery tag) seen with more=true
        self._link_names: dict[tuple[int, int], str] = {}  # (channel, handle) -> link name, from attach frames
        self._current_tag: dict[tuple[int, int], bytes] = {}
        self.credit_due: list[Link] = []  # publishers' links to top up with credit at the end of the read
        self.drain_due: list[Link] = []  # ... of those, the ones that delivered to a node whose publishers are asked
        # to drain (the admin's drain-publishers)
        self._out = bytearray()
        self.close_after_write = False
        self.engine.listeners.append(self._watch_frame)
        from .policed import PolicedInput  # core catalogue: every frame judged before proton sees it

        self.policed = PolicedInput(self)

    @property
    def done(self) -> bool:
        """True when nothing more will be read or written on this connection."""
        return (self.close_after_write or self.engine.closed) and not self._out

    def receive_data(self, data: bytes) -> None:
        """Bytes from the client: through SASL while it runs, then to proton; events are handled at once."""
        if not self.sasl.done:
            result = self.sasl.receive_data(data)
            for frame in result.frames_in + result.frames_out:
                self.engine.capture(frame)
            self._out += result.to_send
            if result.close:
                self.close_after_write = True
                return
            data = result.passthrough
            if not data:
                return
        self.policed.receive_data(data)
        self.broker.handle(self)

    def inbound(self, frame: Frame) -> Frame:
        """The client's frame as the broker's guard and proton are to see it: itself (a conformant variant that
        numbers its transfers otherwise on the wire shifts the client's numbers back here)."""
        return frame

    def receive_eof(self) -> None:
        """The client closed the socket."""
        self.engine.receive_eof()
        self.broker.handle(self)
        self.broker.forget(self)

    def take_output(self) -> None:
        """Move what proton has to send into the write buffer now (its frames are captured as they leave)."""
        if self.sasl.done:
            self._out += self.engine.data_to_send()

    def write_outside_proton(self, frame: bytes) -> None:
        """Write ``frame`` (one whole frame's bytes, made outside proton) after whatever proton has ready, so the wire
        keeps the order the broker wrote in; it is captured as the broker's like proton's frames."""
        self.take_output()
        self._out += frame
        self.engine.capture(FrameSplitter("out").feed(frame)[0])

    def data_to_send(self) -> bytes:
        """Everything waiting to be written to the client."""
        self.take_output()
        data = bytes(self._out)
        self._out.clear()
        return data

    def _watch_frame(self, frame: Frame) -> None:
        """Note which deliveries arrived in more than one transfer frame (proton does not say once whole)."""
        if frame.direction != "in":
            return
        key = (frame.channel, frame.fields.get("handle"))
        if frame.performative == "attach":
            self._link_names[key] = frame.fields.get("name")
        elif frame.performative == "transfer":
            tag = frame.fields.get("delivery-tag")
            if tag is not None:
                self._current_tag[key] = tag
            if frame.fields.get("more") and key in self._link_names and key in self._current_tag:
                self.multi_frame.add((self._link_names[key], self._current_tag[key]))

    def was_multi_frame(self, delivery: Delivery) -> bool:
        """True when this received delivery came (or is coming) in more than one transfer frame."""
        return (delivery.link.name, delivery_tag(delivery)) in self.multi_frame

    def forget_link(self, name: str) -> None:
        """Forget what was noted about the deliveries of the receiving link ``name``, now ended: a new link of
        that name is a new link, and its delivery-tags are its own (2.6.12 lets a tag be reused)."""
        self.multi_frame = {key for key in self.multi_frame if key[0] != name}


class Broker(UmRules):
    """The reference broker's state and behaviour, shared by all connections; guarded by :attr:`lock`."""

    publisher_credit = PUBLISHER_CREDIT  # the credit a publisher's link is given, and topped up to

    def __init__(self, users: dict[str, str] | None = None, policy: Policy | None = None) -> None:
        self.store = Store()
        self.policy = policy or Policy()
        self.users = dict(users or {})
        self.connections: list[BrokerConnection] = []
        self.lock = threading.RLock()
        self.failing_transforms: set[str] = set()  # nodes whose UM transformer yields null
        self.init_um()  # ACL, provoked faults, transactions (um_rules.py)
        self.withheld_credit: set[str] = set()  # nodes whose publishers get no credit (admin provocation)
        self.single_credit: set[str] = set()  # nodes whose publishers get one credit at a time (admin provocation)
        self.provoked_outcomes: dict[str, str] = {}  # node -> outcome every publish gets (admin provocation)
        # keyed by the connection object, not its id(): a key keeps its connection alive, so a later connection
        # can never inherit a departed one's entries by reusing its id
        self.undeliverable: dict[tuple[BrokerConnection, str], set[int]] = {}  # (connection, link) -> EIDs kept off it
        self.second_pending: set[tuple[BrokerConnection, str, bytes]] = set()  # accepted, awaiting its settle
        self.reports_received: set[str] = set()  # nodes whose partial publishes get received states (admin)
        self.settles_without_outcome: set[str] = set()  # nodes whose publishes are stored, then settled stateless
        self.settles_after_outcome: set[str] = set()  # nodes whose publishes are accepted, then settled apart
        self.drains_publishers: set[str] = set()  # nodes whose publishers are asked to drain after each delivery
        self.closes_publisher_connections: dict[str, tuple[str, str]] = {}  # nodes whose publishes are stored, then
        # the publisher's connection closed with this condition and description instead of settling (admin provocation)
        self.drops_publisher_connections: set[str] = set()  # nodes whose publishes are stored, then the publisher's
        # socket ended without a close (admin provocation)
        self.ends_publisher_sessions: set[str] = set()  # nodes whose publishes are stored, then the publisher's
        # session ended with amqp:internal-error instead of settling (admin provocation)
        self.aborts_first_delivery: set[str] = set()  # nodes whose next delivery to a consumer is begun and aborted,
        # its message kept for the link's next credit (admin provocation, once)

    def accept(self, peer_name: str) -> BrokerConnection:
        """A new client connection (made by :meth:`new_connection`), now served."""
        connection = self.new_connection(peer_name)
        self.connections.append(connection)
        return connection

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """The connection object for a new client; variants that change the wire (mutants, faults) override it."""
        return BrokerConnection(self, peer_name)

    def forget(self, connection: BrokerConnection) -> None:
        """Drop a connection: its consumers' unsettled messages go back to their subscriptions."""
        for consumer in connection.consumers.values():
            self._release_consumer(consumer)
        connection.consumers.clear()
        self.transactions.abandon(connection)
        if connection in self.connections:
            self.connections.remove(connection)
        # per-connection outcome state (undeliverable-here, settle-second) goes with the connection
        self.undeliverable = {k: v for k, v in self.undeliverable.items() if k[0] is not connection}
        self.second_pending = {k for k in self.second_pending if k[0] is not connection}

    # -- events --------------------------------------------------------------------------------------

    def handle(self, connection: BrokerConnection, mid_read: bool = False) -> None:
        """Act on every pending proton event of ``connection``, then deliver what consumers can take.

        ``mid_read``: more frames of the same read follow; publishers' credit is topped up only at its end,
        so a burst of transfers is judged against the credit its sender knew of (2.6.7)."""
        for event in connection.engine.events():
            handler = getattr(self, "_on_" + event.type.name.lower(), None)
            if handler is not None:
                handler(connection, event)
        if not mid_read:
            self.top_up(connection)
        self.dispatch()

    def top_up(self, connection: BrokerConnection) -> None:
        """Give the publishers' links that used half their credit (or all of a credit of one) their credit back
        (:attr:`publisher_credit`)."""
        for link in connection.credit_due:
            credit = self.credit_for(link)
            if link.credit < max(1, credit // 2) and link.state & Endpoint.LOCAL_ACTIVE:
                link.flow(credit - link.credit)
        connection.credit_due.clear()
        self.ask_drain(connection)

    def ask_drain(self, connection: BrokerConnection) -> None:
        """Ask each publisher's link that delivered to a node of the admin's ``drain-publishers`` in this read
        (:attr:`BrokerConnection.drain_due`) to drain: its whole credit again, in a flow that sets drain (2.6.7: the
        receiver sets the drain flag as it likes). The answer, its credit used up, is left as it is: the link gets
        no credit again (a receiver may withhold credit, 2.6.7)."""
        for link in connection.drain_due:
            if link.state & Endpoint.LOCAL_ACTIVE:
                link.drain_mode = True  # the flow goes out with drain set
                link.flow(self.credit_for(link) - link.credit)
        connection.drain_due.clear()

    def credit_for(self, link: Link) -> int:
        """The credit a publisher's ``link`` is given and topped up to: :attr:`publisher_credit`, or 1 on a node
        whose publishers get one credit at a time (admin provocation; 2.6.7 lets a receiver set the credit as it
        likes)."""
        return 1 if (link.remote_target.address or "") in self.single_credit else self.publisher_credit

    def _on_pn_connection_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        conn = event.connection
        conn.container = PRODUCT
        conn.properties = {symbol("product"): PRODUCT, symbol("version"): _version()}
        conn.open()

    def _on_pn_connection_remote_close(self, connection: BrokerConnection, event: Event) -> None:
        event.connection.close()

    def _on_pn_session_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        event.session.open()

    def _on_pn_session_remote_close(self, connection: BrokerConnection, event: Event) -> None:
        event.session.close()

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            self._open_consumer(connection, link)
        else:
            link.open()
            if (link.remote_target.address or "") not in self.withheld_credit:
                link.flow(self.credit_for(link))

    def _open_consumer(self, connection: BrokerConnection, link: Link) -> None:
        address = link.remote_source.address or ""
        error = self.subscribe_error(connection, link, address)  # UM 10.11 Rejected/Subscription row 1
        if error is not None:
            self.refuse_subscription(link, error)
            return
        node = self.live_node(address)
        assert node is not None
        durable = link.remote_source.durability in (Terminus.CONFIGURATION, Terminus.DELIVERIES)
        durable_name = f"{link.connection.remote_container}/{link.name}" if durable else None
        connection.consumers[link.name] = Consumer(link, node, node.subscription(durable_name),
                                                   selector=self.consumer_selector(link))
        link.open()

    def _on_pn_link_remote_detach(self, connection: BrokerConnection, event: Event) -> None:
        self._end_link(connection, event.link, closed=False)

    def _on_pn_link_remote_close(self, connection: BrokerConnection, event: Event) -> None:
        self._end_link(connection, event.link, closed=True)

    def _end_link(self, connection: BrokerConnection, link: Link, closed: bool) -> None:
        if link.is_receiver:
            connection.forget_link(link.name)
        consumer = connection.consumers.pop(link.name, None) if link.is_sender else None
        if consumer is not None:
            self._release_consumer(consumer)
            if consumer.subscription.durable and (closed or not self.keeps_durable_on_detach()):
                consumer.node.durable.pop(consumer.subscription.name, None)
        if link.state & Endpoint.LOCAL_ACTIVE:
            if closed:
                link.close()
            else:
                link.detach()
        if self.is_coordinator(link):  # AMQP 1.0 4.1: a closed control link rolls back its open transactions
            # (a detach without closed ends it too: a link to a coordinator cannot be resumed, 4.2)
            self.transactions.abandon(connection, link.name)

    def _release_consumer(self, consumer: Consumer) -> None:
        for outstanding in consumer.outstanding.values():
            outstanding.subscription.requeue(outstanding.message.eid)
        consumer.outstanding.clear()

    def _on_pn_transport_closed(self, connection: BrokerConnection, event: Event) -> None:
        self.forget(connection)

    def _on_pn_delivery(self, connection: BrokerConnection, event: Event) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver:
            self._on_published(connection, delivery)
        elif delivery.updated:
            self._on_consumer_disposition(connection, delivery)

    # -- publishing (the broker receives) ------------------------------------------------------------

    def _on_published(self, connection: BrokerConnection, delivery: Delivery) -> None:
        link = delivery.link
        if self.is_coordinator(link):
            self.on_coordinator_delivery(connection, delivery)
            return
        if delivery.aborted:  # 004 pn_delivery_aborted / 2.6.14: discard what arrived, settle; credit is used
            delivery.settle()
            self.give_credit_back(connection, link)
            return
        second_key = (connection, link.name, delivery_tag(delivery))
        if second_key in self.second_pending:  # rcv-settle-mode second: we settle once the publisher has
            if delivery.settled:
                self.second_pending.discard(second_key)
                delivery.settle()
            return
        if connection.was_multi_frame(delivery) and self.refuses_multi_frame(delivery):
            # UM 10.11 Accepted/Publishing row 1 and Rejected/Publishing row 1: rejected, settled, fatal. The
            # rest of the delivery never reaches here: the link is detached with an error, so the guard ends the
            # session on any later transfer on it (errant-link, 2.8.16)
            error = self.condition("amqp:not-implemented", "multi-frame transfers are not supported")
            self.refuse_delivery(link, delivery, error)
            return
        if delivery.partial:
            if (link.remote_target.address or "") in self.reports_received:  # 3.4.1: how much has arrived
                delivery.local.section_number = 0
                delivery.local.section_offset = delivery.pending
                delivery.update(Delivery.RECEIVED)
            return  # wait for the rest
        encoded = link.recv(delivery.pending)
        link.advance()
        self.give_credit_back(connection, link)
        address = link.remote_target.address or ""
        if address in self.drains_publishers and link in connection.credit_due:  # admin: asked to drain, once
            connection.drain_due.append(link)  # the read is done (top_up)
        if self.transformer_yields_null(address, delivery):  # UM 10.11 Accepted/Publishing row 2
            self._settle(delivery, Delivery.REJECTED, self.transformer_failure())
            return
        txn_id = self.txn_of(delivery)
        error = self.publish_error(address, encoded)  # UM 10.11 Rejected/Publishing rows 2 and 3
        if error is not None:
            self.refuse_delivery(link, delivery, error, txn_id)
        elif txn_id is not None:
            self.publish_transactional(delivery, txn_id, address, encoded)  # Accepted/Publishing row 6
        else:
            self._publish(link, delivery, address, encoded, second_key)

    def give_credit_back(self, connection: BrokerConnection, link: Link) -> None:
        """A whole or aborted delivery used one of ``link``'s credit: top the link up at the end of the read
        (:meth:`top_up`), unless its node's publishers get no credit (admin provocation)."""
        if (link.remote_target.address or "") not in self.withheld_credit and link not in connection.credit_due:
            connection.credit_due.append(link)

    def _publish(self, link: Link, delivery: Delivery, address: str, encoded: bytes,
                 second_key: tuple[BrokerConnection, str, bytes]) -> None:
        node = self.live_node(address)
        assert node is not None
        provoked = self.provoked_outcomes.get(address)
        if provoked is not None and not delivery.settled:  # core.outcomes: the broker refuses as told
            give_provoked(delivery, provoked, settle=not self.settles_second(link))
            if self.settles_second(link):
                self.second_pending.add(second_key)
            return
        node.publish(encoded)
        if delivery.settled:
            delivery.settle()  # pre-settled by the publisher: no further action, no disposition
        elif address in self.settles_without_outcome:  # the admin's settle-without-outcome (the client grid):
            delivery.settle()  # stored, and settled with no state (AMQP 1.0 2.7.6: a disposition's state is optional)
        elif address in self.settles_after_outcome:  # the admin's settle-after-outcome (the client grid):
            self._settle_after_outcome(second_key[0], delivery)
        elif address in self.closes_publisher_connections:  # the admin's close- or fail-publisher-connection (the
            # client grid): stored, never settled; the publisher's connection closed with the node's error
            self._close_publisher_connection(link, self.closes_publisher_connections[address])
        elif address in self.drops_publisher_connections:  # the admin's drop-publisher-connection (the client grid):
            second_key[0].close_after_write = True  # stored, never settled; the socket ends with no close frame
        elif address in self.ends_publisher_sessions:  # the admin's end-publisher-session (the client grid):
            self._end_publisher_session(link)  # stored, never settled; the publisher's session ended
        elif self.settles_second(link):
            delivery.update(Delivery.ACCEPTED)  # 2.6.12 / 003 exactly-once: the sender settles first
            self.second_pending.add(second_key)
        else:
            self._settle(delivery, Delivery.ACCEPTED)

    @staticmethod
    def _settle_after_outcome(connection: BrokerConnection, delivery: Delivery) -> None:
        """Accept ``delivery`` in one disposition (unsettled) and settle it in a second that carries no state: the
        outcome is given, then the settlement alone (AMQP 1.0 2.7.6: a disposition's state is optional; 2.6.12)."""
        delivery.update(Delivery.ACCEPTED)
        connection.take_output()  # proton writes the accepted disposition now, not merged with the settlement
        delivery.update(0)  # no local state left, so the settling disposition carries none
        delivery.settle()

    @staticmethod
    def _close_publisher_connection(link: Link, error: tuple[str, str]) -> None:
        """Close ``link``'s connection with ``error`` (condition, description: :data:`FORCED_CLOSE`, AMQP 1.0 2.8.16,
        an operator intervened; or :data:`FAILED_CLOSE`), its deliveries left unsettled: the broker then awaits the
        client's close (2.4.3) before the socket ends."""
        connection = link.connection
        connection.condition = Condition(error[0], error[1])
        connection.close()

    @staticmethod
    def _end_publisher_session(link: Link) -> None:
        """End ``link``'s session with amqp:internal-error (AMQP 1.0 2.8.15), its deliveries left unsettled and its
        links detached with it (2.5.2: the end disassociates the session from its channel): the connection stays
        open, and the broker then awaits the client's end."""
        session = link.session
        session.condition = Condition(ENDED_SESSION[0], ENDED_SESSION[1])
        session.close()

    @staticmethod
    def _settle(delivery: Delivery, outcome: int, condition: Condition | None = None) -> None:
        if condition is not None:
            delivery.local.condition = condition
        delivery.update(outcome)
        delivery.settle()

    # -- subscribing (the broker sends) --------------------------------------------------------------

    def _on_consumer_disposition(self, connection: BrokerConnection, delivery: Delivery) -> None:
        consumer = connection.consumers.get(delivery.link.name)
        if consumer is None:
            return
        outstanding = consumer.outstanding.get(delivery_tag(delivery))
        if outstanding is None:
            return
        if self.um_consumer_disposition(consumer, delivery, outstanding):
            return  # transactional, or a durable ACK that failed (um_rules.py)
        state = self.terminal_state(delivery.remote_state)
        if state is None:
            return  # non-terminal (received, 3.4.1): nothing to do yet
        subscription = outstanding.subscription
        if state == 0:
            # no state: the source's default outcome, accepted (UM 10.11 Accepted/Subscription row 1)
            state = self.default_outcome()
        if state in (Delivery.ACCEPTED, Delivery.REJECTED):
            subscription.acknowledge(outstanding.message.eid)
            answer = state
        elif state in (Delivery.RELEASED, Delivery.MODIFIED):
            self._redeliver(connection, consumer, outstanding, state, Modification.of(delivery))
            answer = state
        else:
            return
        del consumer.outstanding[delivery_tag(delivery)]
        if delivery.settled:
            delivery.settle()  # the consumer settled already: no further action (row 2)
        else:
            delivery.update(answer)
            delivery.settle()

    def dispatch(self) -> None:
        """Send pending messages on every consumer link that has credit."""
        for connection in self.connections:
            for consumer in connection.consumers.values():
                link = consumer.link
                while link.credit > 0 and link.state & Endpoint.LOCAL_ACTIVE:
                    message = self.take_for(consumer, self.undeliverable.get((connection, link.name), ()))
                    if message is None:
                        break
                    if consumer.node.address in self.aborts_first_delivery:  # the admin's abort-first-delivery
                        self.aborts_first_delivery.discard(consumer.node.address)
                        self.abort_delivery(connection, consumer, message)
                        continue
                    delivery = link.delivery(self.delivery_tag(consumer.node, message))
                    self.send_message(link, message.encoded)
                    link.advance()
                    if self.presettles(link):
                        consumer.subscription.acknowledge(message.eid)
                        delivery.settle()
                    else:
                        consumer.outstanding[delivery_tag(delivery)] = Outstanding(consumer.node, consumer.subscription,
                                                                         message)
                self.finish_drain(link)

    def abort_delivery(self, connection: BrokerConnection, consumer: Consumer, message: StoredMessage) -> None:
        """Begin a delivery of ``message`` on ``consumer``'s link and abort it (the admin's abort-first-delivery, the
        client grid): its first half goes in a transfer that says more, then a transfer with aborted set ends the
        delivery (AMQP 1.0 2.6.14, 2.7.5: the receiver discards what came; 004 pn_delivery_aborted: the delivery
        consumed a credit, as a whole one would). The message goes back on its subscription, first in line, for
        the link's next credit. Its tag is the message's own with ``/aborted`` after it (2.6.12: the aborted delivery
        is settled, yet a tag of its own keeps the two deliveries apart in any client's bookkeeping)."""
        link = consumer.link
        delivery = link.delivery(self.delivery_tag(consumer.node, message) + b"/aborted")
        link.send(message.encoded[:max(1, len(message.encoded) // 2)])
        connection.take_output()  # proton writes the begun delivery's transfer (more) before the abort
        delivery.abort()  # settles it, uses the credit and moves the delivery-count on; the next transfer says aborted
        consumer.subscription.requeue(message.eid)

    def due_in(self) -> float | None:
        """Seconds until the broker next acts by time rather than on input (None: it never does, as the reference
        never does): the server wakes by then, and its idle probe is unsure until then. Asked under :attr:`lock`."""
        return None

    def finish_drain(self, link: Link) -> None:
        """``link`` (a consumer's, nothing left to send it) uses up the credit left when its receiver asked it to
        drain (2.6.7; proton's ``drained`` is a no-op without drain), unless the broker does not honour drains."""
        if link.credit > 0 and link.state & Endpoint.LOCAL_ACTIVE and self.honours_drain():
            link.drained()


    # -- the behaviours a mutant (peers/reference/mutants.py) may replace, one guarantee each ------------

    def honours_drain(self) -> bool:
        """2.6.7: with drain set and no message left, advance the delivery-count until the credit is used up
        and send the flow state."""
        return True

    def send_message(self, link: Link, encoded: bytes) -> None:
        """Give ``link``'s current delivery the whole of ``encoded`` at once: proton writes it in as few transfer
        frames as the receiver's max-frame-size allows. How a message is split into transfers is the sender's
        choice (AMQP 1.0 2.6.14, 2.7.5 ``more``); a conformant variant makes it otherwise."""
        link.send(encoded)

    def delivery_tag(self, node: Node, message: StoredMessage) -> bytes:
        """The tag of an outgoing delivery: ``<store-uid>:<eid>`` (UM 10.11, durable subscriptions)."""
        return node.delivery_tag(message)

    def presettles(self, link: Link) -> bool:
        """Whether the broker settles outgoing deliveries on ``link`` when sending: only when it must."""
        return link.snd_settle_mode == Link.SND_SETTLED

    def policy_for(self, expectation_set: str) -> Policy:
        """The policy under which this broker meets ``expectation_set``."""
        return Policy.for_set(expectation_set)

    def refuses_multi_frame(self, delivery: Delivery) -> bool:
        """Whether a delivery of more than one transfer frame is refused (UM 10.11 Accepted/Publishing row 1 and
        Rejected/Publishing row 1, in force under the ``um-10.11`` policy): every one, whatever the link's sender
        settle mode and whether the publisher settled it (both rows give the sender settle mode as N/A)."""
        return self.policy.partial_delivery == "reject"

    def transformer_yields_null(self, address: str, delivery: Delivery) -> bool:
        """Whether the node's UM transformer returns null for ``delivery`` (the admin's transformer-null provocation
        of ``address``): for every publish there, whatever the sender settle mode and whether the publisher settled
        it (UM 10.11 Accepted/Publishing row 2 gives the sender settle mode as N/A)."""
        return address in self.failing_transforms

    def transformer_failure(self) -> Condition:
        """The error a publish gets when the node's transformer returns null (UM 10.11: precondition-failed)."""
        return Condition("amqp:precondition-failed", "the message transformer returned null")

    def default_outcome(self) -> int:
        """The outcome applied to a delivery the consumer disposed of with no state: the source's default.

        0 (no outcome) leaves the delivery outstanding and unanswered.
        """
        return Delivery.ACCEPTED

    def keeps_durable_on_detach(self) -> bool:
        """Whether a durable subscription outlives a detach with closed=false (it must)."""
        return True

    def _redeliver(self, connection: BrokerConnection, consumer: Consumer, outstanding: Outstanding, state: int,
                   modification: Modification) -> None:
        """Released or modified (3.4.4, 3.4.5): rewrite the stored message as the outcome asks, requeue it."""
        message = outstanding.message
        failed = self.counts_as_failed(state, modification)
        annotations = modification.annotations if self.merges_annotations() else None
        message.encoded = redelivery_bytes(message.encoded, failed, annotations)
        if failed:
            message.delivery_count += 1
        if modification.undeliverable_here and self.honours_undeliverable_here():
            self.undeliverable.setdefault((connection, consumer.link.name), set()).add(message.eid)
        outstanding.subscription.requeue(message.eid)

    def counts_as_failed(self, state: int, modification: Modification) -> bool:
        """Whether an outcome increments the message's delivery-count: only modified with delivery-failed."""
        return state == Delivery.MODIFIED and modification.delivery_failed

    def honours_undeliverable_here(self) -> bool:
        """Whether modified with undeliverable-here keeps the message from that link (it must, 3.4.5)."""
        return True

    def merges_annotations(self) -> bool:
        """Whether modified's message-annotations are merged into the redelivered message (they must, 3.4.5)."""
        return True

    def settles_second(self, link: Link) -> bool:
        """Whether, receiving on ``link``, the broker waits for the sender to settle before it settles
        (receiver settle mode second, 2.8.3; the exactly-once ordering of 003)."""
        return link.rcv_settle_mode == Link.RCV_SECOND

    def answer_violation(self, violation: Violation) -> Violation | None:
        """How bad input is answered: as the guard found it, with the condition the specification names.

        None lets proton take the frame as if it were good.
        """
        return violation

    def terminal_state(self, state: int) -> int | None:
        """The outcome a consumer's remote state stands for; None for the non-terminal received (3.4.1)."""
        return None if state == Delivery.RECEIVED else state


@functools.lru_cache(maxsize=1)  # importlib.metadata reads files: once per process, not per connection
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("amqp-conformance")
    except Exception:
        return "0+unknown"
