"""Tests for the reference broker's transactions (AMQP 1.0 section 4; UM 10.11 Accepted/Publishing row 6,
Accepted/Subscription row 8) and UM rejection rules, sans-I/O.

The manager is tested alone; the broker is driven in memory: a client :class:`CapturingEngine` and a
:class:`BrokerConnection` exchange bytes with no socket (as python-qpid-proton's own tests pump engines).
"""

from __future__ import annotations

import pytest
from amqp_conformance.peers.engine import CapturingEngine
from amqp_conformance.peers.frames import described
from amqp_conformance.peers.reference.broker import Broker, Policy
from amqp_conformance.peers.reference.transactions import TransactionManager, UnknownTransaction
from proton import Data, Delivery, Message, Terminus

# -- the manager alone -----------------------------------------------------------------------------------


def test_commit_runs_commit_actions_in_order_and_forgets_the_transaction() -> None:
    manager, log = TransactionManager(), []
    txn = manager.declare(owner="c1")
    manager.stage(txn, lambda: log.append("publish m1"), lambda: log.append("drop m1"))
    manager.stage(txn, lambda: log.append("ack m2"))
    assert manager.discharge(txn, fail=False) == 2
    assert log == ["publish m1", "ack m2"]
    with pytest.raises(UnknownTransaction):
        manager.discharge(txn, fail=False)  # 4.4: a discharged txn-id is unknown from then on


def test_rollback_runs_rollback_actions_only() -> None:
    manager, log = TransactionManager(), []
    txn = manager.declare(owner="c1")
    manager.stage(txn, lambda: log.append("publish"), lambda: log.append("discard"))
    manager.discharge(txn, fail=True)
    assert log == ["discard"]


def test_txn_ids_are_unique_and_unknown_ones_refused() -> None:
    manager = TransactionManager()
    ids = {manager.declare(owner=None) for _ in range(50)}
    assert len(ids) == 50
    with pytest.raises(UnknownTransaction):
        manager.stage(b"never-declared", lambda: None)


def test_abandon_rolls_back_only_the_owners_transactions() -> None:
    manager, log = TransactionManager(), []
    mine, theirs = manager.declare(owner="a"), manager.declare(owner="b")
    manager.stage(mine, lambda: log.append("commit a"), lambda: log.append("rollback a"))
    manager.stage(theirs, lambda: log.append("commit b"), lambda: log.append("rollback b"))
    assert manager.abandon("a") == 1
    assert log == ["rollback a"]
    assert list(manager.open) == [theirs]


def test_abandon_with_a_control_link_rolls_back_only_what_that_link_declared() -> None:
    manager, log = TransactionManager(), []
    closed = manager.declare(owner="a", control="ctl-1")
    kept = [manager.declare(owner="a", control="ctl-2"), manager.declare(owner="b", control="ctl-1")]
    for txn_id in (closed, *kept):
        manager.stage(txn_id, lambda: log.append("commit"), lambda t=txn_id: log.append(t))
    assert manager.abandon("a", "ctl-1") == 1
    assert log == [closed]
    assert sorted(manager.open) == sorted(kept)


# -- the broker in memory ---------------------------------------------------------------------------------


class Pair:
    """A client engine wired to a broker connection in memory."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.server = broker.accept("memory")
        self.client = CapturingEngine(server=False)
        self.client.bind()
        self.client.connection.open()
        self.session = self.client.connection.session()
        self.session.open()
        self.pump()

    def pump(self) -> None:
        for _ in range(20):
            moved = False
            data = self.client.data_to_send()
            if data:
                self.server.receive_data(data)
                moved = True
            with self.broker.lock:
                self.broker.dispatch()
            data = self.server.data_to_send()
            if data:
                self.client.receive_data(data)
                moved = True
            self.client.events()
            if not moved:
                return

    def sender(self, address: str | None, coordinator: bool = False, name: str | None = None):
        link = self.session.sender(name or f"s-{address}-{coordinator}")
        if coordinator:
            link.target.type = Terminus.COORDINATOR
            link.target.capabilities.put_array(False, Data.SYMBOL)
            link.target.capabilities.enter()
            link.target.capabilities.put_symbol("amqp:local-transactions")
            link.target.capabilities.exit()
        else:
            link.target.address = address
        link.open()
        self.pump()
        return link

    def send(self, link, body, tag: bytes, txn_id: bytes | None = None) -> Delivery:
        delivery = link.delivery(tag)
        if txn_id is not None:
            delivery.local.data = [txn_id]
            delivery.update(0x34)
        link.send(Message(body=body).encode())
        link.advance()
        self.pump()
        return delivery

    def stored(self, address: str) -> list:
        node = self.broker.store.nodes.get(address)
        bodies = []
        for stored in (node.queue.pending if node else []):
            message = Message()
            message.decode(stored.encoded)
            bodies.append(message.body)
        return bodies


def _declare(pair: Pair, coordinator) -> bytes:
    delivery = pair.send(coordinator, described("declare"), b"d")
    assert delivery.remote_state == 0x33  # declared (4.5.4)
    return bytes(delivery.remote.data[0])


def test_transactional_publish_is_answered_in_transactional_state_and_visible_on_commit() -> None:
    pair = Pair(Broker(policy=Policy.for_set("um-10.11")))
    coordinator = pair.sender(None, coordinator=True)
    txn_id = _declare(pair, coordinator)
    publisher = pair.sender("q")
    delivery = pair.send(publisher, "m1", b"t1", txn_id)
    assert delivery.remote_state == 0x34 and delivery.settled
    assert bytes(delivery.remote.data[0]) == txn_id
    assert int(delivery.remote.data[1].descriptor) == 0x24  # outcome accepted
    assert pair.stored("q") == []  # not visible before the discharge
    discharge = pair.send(coordinator, described("discharge", txn_id=txn_id, fail=False), b"c")
    assert discharge.remote_state == Delivery.ACCEPTED
    assert pair.stored("q") == ["m1"]


def test_rollback_discards_a_transactional_publish() -> None:
    pair = Pair(Broker(policy=Policy.for_set("um-10.11")))
    coordinator = pair.sender(None, coordinator=True)
    txn_id = _declare(pair, coordinator)
    pair.send(pair.sender("q"), "m1", b"t1", txn_id)
    pair.send(coordinator, described("discharge", txn_id=txn_id, fail=True), b"r")
    assert pair.stored("q") == []


def test_discharge_of_an_unknown_txn_id_is_rejected_with_unknown_id() -> None:
    pair = Pair(Broker())
    coordinator = pair.sender(None, coordinator=True)
    delivery = pair.send(coordinator, described("discharge", txn_id=b"nope", fail=False), b"x")
    assert delivery.remote_state == Delivery.REJECTED
    assert delivery.remote.condition.name == "amqp:transaction:unknown-id"


def test_closing_the_connection_rolls_back_open_transactions() -> None:
    broker = Broker()
    pair = Pair(broker)
    coordinator = pair.sender(None, coordinator=True)
    txn_id = _declare(pair, coordinator)
    pair.send(pair.sender("q"), "m1", b"t1", txn_id)
    broker.forget(pair.server)
    assert broker.transactions.open == {}
    assert pair.stored("q") == []


def test_closing_a_coordinator_link_rolls_back_its_transactions_and_a_later_commit_fails() -> None:
    broker = Broker()
    pair = Pair(broker)
    coordinator, other = pair.sender(None, coordinator=True), pair.sender(None, coordinator=True, name="other")
    txn_id, untouched = _declare(pair, coordinator), _declare(pair, other)
    publisher = pair.sender("q")
    pair.send(publisher, "m1", b"t1", txn_id)
    pair.send(publisher, "m2", b"t2", untouched)
    coordinator.close()
    pair.pump()
    assert list(broker.transactions.open) == [untouched]  # AMQP 1.0 4.1: rolled back at once
    delivery = pair.send(other, described("discharge", txn_id=txn_id, fail=False), b"c1")
    assert delivery.remote_state == Delivery.REJECTED
    assert delivery.remote.condition.name == "amqp:transaction:unknown-id"
    assert pair.stored("q") == []
    assert pair.send(other, described("discharge", txn_id=untouched, fail=False), b"c2").remote_state == \
        Delivery.ACCEPTED
    assert pair.stored("q") == ["m2"]


def test_fatal_publish_error_rejects_settles_and_closes_the_link() -> None:
    broker = Broker(policy=Policy.for_set("um-10.11"))
    pair = Pair(broker)
    publisher = pair.sender("q")
    broker.acl.deny("publish", "q")
    delivery = pair.send(publisher, "m1", b"t1")
    assert delivery.remote_state == Delivery.REJECTED and delivery.settled
    assert delivery.remote.condition.name == "amqp:unauthorized-access"
    assert publisher.remote_condition.name == "amqp:unauthorized-access"
    assert publisher.state & publisher.REMOTE_CLOSED


def test_transient_publish_error_rejects_and_keeps_the_link() -> None:
    broker = Broker(policy=Policy.for_set("um-10.11"))
    pair = Pair(broker)
    publisher = pair.sender("q")
    broker.faults.capacity["q"] = 0
    delivery = pair.send(publisher, "m1", b"t1")
    assert delivery.remote.condition.name == "amqp:resource-limit-exceeded" and delivery.settled
    assert publisher.state & publisher.REMOTE_ACTIVE
    del broker.faults.capacity["q"]
    assert pair.send(publisher, "m2", b"t2").remote_state == Delivery.ACCEPTED
    assert pair.stored("q") == ["m2"]


def test_internal_failure_is_one_shot() -> None:
    broker = Broker()
    broker.faults.fail_next.add("q")
    assert broker.publish_error("q").name == "amqp:internal-error"
    assert broker.publish_error("q") is None


def test_removed_node_is_not_found_and_not_recreated() -> None:
    broker = Broker()
    broker.store.node("q")
    broker.store.remove("q")
    broker.faults.removed.add("q")
    assert broker.publish_error("q").name == "amqp:not-found"
    assert "q" not in broker.store.nodes


def test_a_consumer_with_a_jms_selector_gets_only_what_it_selects() -> None:
    from proton import Described, symbol

    broker = Broker(policy=Policy.for_set("um-10.11"))
    pair = Pair(broker)
    publisher = pair.sender("q")
    for body, color in (("m1", "blue"), ("m2", "red"), ("m3", "red")):
        delivery = publisher.delivery(body.encode())
        publisher.send(Message(body=body, properties={"color": color}).encode())
        publisher.advance()
    pair.pump()
    receiver = pair.session.receiver("selective")
    receiver.source.address = "q"
    receiver.source.filter.put_dict({symbol("jms-selector"): Described(symbol("apache.org:selector-filter:string"),
                                                                       "color = 'red'")})
    receiver.open()
    receiver.flow(10)
    pair.pump()
    bodies = []
    while receiver.current is not None and receiver.current.readable:
        message = Message()
        message.decode(receiver.recv(receiver.current.pending))
        bodies.append(message.body)
        receiver.advance()
    assert delivery.remote_state == Delivery.ACCEPTED
    assert bodies == ["m2", "m3"]
    assert pair.stored("q") == ["m1"]  # the blue one waits for another consumer
