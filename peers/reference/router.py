"""The reference router: the reference broker in router mode, sans-I/O (the server loop moves its bytes).

Addresses under the anycast prefix (default ``anycast.``) and the multicast prefix (default ``multicast.``)
are *routed*: nothing is stored, a message goes to the consumers attached at that moment, and the
producer's delivery state is derived from theirs exactly as ``001_c5e7220407a77440.txt`` ("Message
settlement and reliability", its table of final dispositions) says:

- pre-settled: the router settles the incoming delivery and forwards it settled (at most once, 003/004);
- unsettled, anycast: the incoming delivery is tied to the one outgoing delivery and the consumer's
  outcome (with its error condition, modified flags and annotations) is propagated to the producer;
- unsettled, multicast: the router waits until *every* outgoing delivery has its final state, then gives
  the producer one aggregated outcome: rejected if any consumer rejected, else accepted if any accepted,
  else modified if any modified, else released (:func:`aggregate`);
- no consumer at all: released at once (the message reached no consumer); a consumer that goes away
  holding an unsettled delivery counts as ``modified`` (delivery-failed): the message reached it but its
  fate is in doubt, the seed's definition of ``modified``; one never sent to it counts as ``released``.

Every other address is served by the reference broker behind the router (store, queues, UM mapping),
so the rest of the catalogue still runs against ``reference-router``. The behaviours a mutant may break
are methods (``aggregate``, ``waits_for_all``, ...), one guarantee each (``router_mutants.py``).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from proton import Condition, Delivery, Endpoint, Event, Link

from ..engine import delivery_tag
from .broker import Broker, BrokerConnection

ANYCAST = "anycast"
MULTICAST = "multicast"
TERMINAL = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)
NAMES = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected", Delivery.RELEASED: "released",
         Delivery.MODIFIED: "modified"}


@dataclass(frozen=True)
class Outcome:
    """A terminal delivery state with its details: the error (rejected), flags and annotations (modified)."""

    state: int
    # a rejection's error: (condition, description) or (condition, description, info as (key, value) pairs)
    condition: tuple[Any, ...] | None = None
    failed: bool = False
    undeliverable: bool = False
    annotations: tuple[tuple[Any, Any], ...] = ()

    @property
    def name(self) -> str:
        """"accepted", "rejected", "released" or "modified"."""
        return NAMES[self.state]

    @classmethod
    def of(cls, name: str, **details: Any) -> Outcome:
        """The outcome called ``name`` (tests and tables speak names)."""
        return cls({v: k for k, v in NAMES.items()}[name], **details)

    @classmethod
    def from_remote(cls, delivery: Delivery) -> Outcome | None:
        """The terminal state a consumer gave ``delivery``, with its details; None if it gave none yet."""
        state = delivery.remote_state
        if state not in TERMINAL:
            return None
        remote = delivery.remote
        condition = None
        if state == Delivery.REJECTED and remote.condition is not None:
            info = remote.condition.info
            condition = (str(remote.condition.name), remote.condition.description,
                         tuple(info.items()) if info else ())
        annotations = remote.annotations if state == Delivery.MODIFIED else None
        return cls(state, condition, bool(remote.failed) if state == Delivery.MODIFIED else False,
                   bool(remote.undeliverable) if state == Delivery.MODIFIED else False,
                   tuple((annotations or {}).items()))

    def apply(self, delivery: Delivery) -> None:
        """Set this outcome on ``delivery`` (our side), send it, and settle."""
        local = delivery.local
        if self.condition is not None:
            name, description, *rest = self.condition
            info = dict(rest[0]) if rest and rest[0] else None
            local.condition = Condition(name, description, info)  # the consumer's error whole (info too)
        if self.state == Delivery.MODIFIED:
            local.failed = self.failed
            local.undeliverable = self.undeliverable
            if self.annotations:
                local.annotations = dict(self.annotations)
        delivery.update(self.state)
        delivery.settle()


RELEASED = Outcome(Delivery.RELEASED)
IN_DOUBT = Outcome(Delivery.MODIFIED, failed=True)
AGGREGATION_ORDER = (Delivery.REJECTED, Delivery.ACCEPTED, Delivery.MODIFIED)


def aggregate(outcomes: list[Outcome]) -> Outcome:
    """The producer's final outcome for a multicast delivery from its consumers' final outcomes (001).

    rejected if at least one consumer rejected; else accepted if at least one accepted; else modified if
    at least one modified (none rejected or accepted); else released (it reached no consumer, or there
    were none). The details (error, flags, annotations) are those of the first consumer in ``outcomes``
    with the winning state: the seed is silent on which consumer's details survive.
    """
    for state in AGGREGATION_ORDER:
        for outcome in outcomes:
            if outcome.state == state:
                return outcome
    return RELEASED


@dataclass
class Inbound:
    """An unsettled delivery from a producer, waiting for the final states of its outgoing deliveries."""

    delivery: Delivery
    kind: str
    outcomes: dict[int, Outcome | None] = field(default_factory=dict)  # by outbound id; None: not final yet
    done: bool = False


@dataclass
class Outbound:
    """One copy of a message for one consumer: pending until sent, then unsettled until it has an outcome."""

    id: int
    encoded: bytes
    inbound: Inbound | None  # None: forwarded pre-settled
    delivery: Delivery | None = None


@dataclass
class RoutedConsumer:
    """A link on which the router sends messages of a routed address."""

    connection: BrokerConnection
    link: Link
    address: str
    pending: deque[Outbound] = field(default_factory=deque)
    unsettled: dict[bytes, Outbound] = field(default_factory=dict)  # by delivery tag


class Router(Broker):
    """The reference broker in router mode (see the module docstring). Satisfies the server loop's interface."""

    def __init__(self, users: dict[str, str] | None = None, anycast_prefix: str = "anycast.",
                 multicast_prefix: str = "multicast.") -> None:
        super().__init__(users=users)
        self.anycast_prefix = anycast_prefix
        self.multicast_prefix = multicast_prefix
        self.routed: dict[tuple[BrokerConnection, str], RoutedConsumer] = {}  # by (connection, link name)
        self._ids = itertools.count(1)
        self._turn: dict[str, int] = {}  # anycast round-robin position by address

    def kind_of(self, address: str | None) -> str | None:
        """"anycast" or "multicast" for a routed address, None for one the broker behind serves."""
        if address and self.multicast_prefix and address.startswith(self.multicast_prefix):
            return MULTICAST
        if address and self.anycast_prefix and address.startswith(self.anycast_prefix):
            return ANYCAST
        return None

    def consumers_of(self, address: str) -> list[RoutedConsumer]:
        """The consumers attached to ``address`` now, in attach order."""
        return [c for c in self.routed.values() if c.address == address and c.link.state & Endpoint.LOCAL_ACTIVE]

    # -- links ---------------------------------------------------------------------------------------

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        link = event.link
        address = link.remote_source.address if link.is_sender else link.remote_target.address
        if self.kind_of(address) is None:
            super()._on_pn_link_remote_open(connection, event)
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            self.routed[(connection, link.name)] = RoutedConsumer(connection, link, address)
        link.open()
        if link.is_receiver:
            link.flow(self.publisher_credit)

    def _end_link(self, connection: BrokerConnection, link: Link, closed: bool) -> None:
        consumer = self.routed.pop((connection, link.name), None) if link.is_sender else None
        if consumer is None:
            super()._end_link(connection, link, closed)
            return
        self._consumer_gone(consumer)
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close() if closed else link.detach()

    def forget(self, connection: BrokerConnection) -> None:
        """Drop a connection: its routed consumers are gone (their unsettled deliveries get outcomes)."""
        for key in [k for k, c in self.routed.items() if c.connection is connection]:
            self._consumer_gone(self.routed.pop(key))
        super().forget(connection)

    def _consumer_gone(self, consumer: RoutedConsumer) -> None:
        for outbound in consumer.unsettled.values():
            self._final(outbound, self.gone_outcome(sent=True))
        for outbound in consumer.pending:
            self._final(outbound, self.gone_outcome(sent=False))
        consumer.unsettled.clear()
        consumer.pending.clear()

    # -- deliveries ----------------------------------------------------------------------------------

    def _on_pn_delivery(self, connection: BrokerConnection, event: Event) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver and self.kind_of(link.remote_target.address) is not None:
            self._on_routed_publish(connection, delivery)
        elif link.is_sender and (connection, link.name) in self.routed:
            if delivery.updated:
                self._on_routed_disposition(self.routed[(connection, link.name)], delivery)
        else:
            super()._on_pn_delivery(connection, event)

    def _on_routed_publish(self, connection: BrokerConnection, delivery: Delivery) -> None:
        link = delivery.link
        if delivery.aborted:
            delivery.settle()  # an aborted message is discarded (004): nothing was forwarded, nothing is
        elif delivery.partial:
            return  # multi-frame: forward only the whole message
        else:
            encoded = link.recv(delivery.pending)
            link.advance()
            self.route(delivery, link.remote_target.address, encoded)
        self.give_credit_back(connection, link)

    def route(self, delivery: Delivery, address: str, encoded: bytes) -> None:
        """Forward one whole message from a producer to the consumers of ``address`` (see module docstring)."""
        kind = self.kind_of(address)
        assert kind is not None
        consumers = self.consumers_of(address)
        targets = consumers if kind == MULTICAST else self.anycast_target(address, consumers)
        if delivery.settled:  # pre-settled by the producer: at most once
            delivery.settle()
            for consumer in targets:
                consumer.pending.append(Outbound(next(self._ids), encoded, None))
            return
        inbound = Inbound(delivery, kind)
        for consumer in targets:
            outbound = Outbound(next(self._ids), encoded, inbound)
            inbound.outcomes[outbound.id] = None
            consumer.pending.append(outbound)
        if not targets or self.settles_on_forward():
            self._complete(inbound, Outcome(Delivery.ACCEPTED) if targets else RELEASED)

    def _on_routed_disposition(self, consumer: RoutedConsumer, delivery: Delivery) -> None:
        tag = delivery_tag(delivery)
        outbound = consumer.unsettled.get(tag)
        if outbound is None:
            return
        outcome = Outcome.from_remote(delivery)
        if outcome is None and delivery.settled:
            outcome = Outcome(self.default_outcome())  # settled with no state: the source's default outcome
        if outcome is None:
            return  # a non-terminal state (received): nothing to propagate yet
        del consumer.unsettled[tag]
        delivery.settle()
        self._final(outbound, outcome)

    def _final(self, outbound: Outbound, outcome: Outcome | None) -> None:
        """Record one consumer's final outcome; give the producer its own once every consumer has one."""
        inbound = outbound.inbound
        if inbound is None or inbound.done or outcome is None:
            return
        inbound.outcomes[outbound.id] = outcome
        final = [o for o in inbound.outcomes.values() if o is not None]
        if len(final) == len(inbound.outcomes) or not self.waits_for_all():
            self._complete(inbound, self.propagated(self.aggregate(final)))

    def _complete(self, inbound: Inbound, outcome: Outcome) -> None:
        inbound.done = True
        delivery = inbound.delivery
        if delivery.settled or not delivery.link.state & Endpoint.LOCAL_ACTIVE:
            return  # the producer's link is gone: nobody to tell
        outcome.apply(delivery)

    def dispatch(self) -> None:
        """Send the broker's own consumers their messages, then pending routed messages on every routed consumer
        link with credit; a routed consumer with credit left and drain set has it used up (2.6.7)."""
        super().dispatch()
        for consumer in list(self.routed.values()):
            link = consumer.link
            while consumer.pending and link.credit > 0 and link.state & Endpoint.LOCAL_ACTIVE:
                outbound = consumer.pending.popleft()
                tag = f"r{outbound.id}".encode()
                delivery = link.delivery(tag)
                self.send_message(link, outbound.encoded)
                link.advance()
                if outbound.inbound is None and self.forwards_presettled_settled():
                    delivery.settle()
                elif outbound.inbound is None:
                    consumer.unsettled[tag] = outbound  # (a mutant's) unsettled copy of a pre-settled message
                else:
                    outbound.delivery = delivery
                    consumer.unsettled[tag] = outbound
            self.finish_drain(link)  # as the broker's own consumers do

    # -- the behaviours a router mutant (router_mutants.py) may replace, one guarantee each ----------------

    def aggregate(self, outcomes: list[Outcome]) -> Outcome:
        """The producer's outcome from the consumers' final outcomes: :func:`aggregate` (001's table)."""
        return aggregate(outcomes)

    def propagated(self, outcome: Outcome) -> Outcome:
        """What the producer is told for ``outcome``: the outcome itself, with its details (001, anycast)."""
        return outcome

    def waits_for_all(self) -> bool:
        """Whether the producer's final state waits for every consumer's (it must, 001 multicast)."""
        return True

    def settles_on_forward(self) -> bool:
        """Whether the producer is answered as soon as the message is forwarded (it must not be)."""
        return False

    def forwards_presettled_settled(self) -> bool:
        """Whether a pre-settled message is forwarded settled (it must be: 001 "Pre-settled", 003)."""
        return True

    def gone_outcome(self, sent: bool) -> Outcome | None:
        """A departed consumer's outcome for a delivery it held (``sent``) or never got: modified or released."""
        return IN_DOUBT if sent else RELEASED

    def anycast_target(self, address: str, consumers: list[RoutedConsumer]) -> list[RoutedConsumer]:
        """The one consumer an anycast message goes to (round robin, preferring one with credit); [] if none."""
        if not consumers:
            return []
        turn = self._turn.get(address, 0)
        ordered = consumers[turn % len(consumers):] + consumers[:turn % len(consumers)]
        chosen = next((c for c in ordered if c.link.credit > len(c.pending)), ordered[0])
        self._turn[address] = consumers.index(chosen) + 1
        return [chosen]
