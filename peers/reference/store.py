"""The reference broker's store: nodes by address, events with ids, and subscriptions. No I/O.

Each node keeps a store unique id and numbers its events (EIDs), so deliveries can be tagged
``<store-uid>:<eid>`` as the UM 10.11 guide requires of durable subscriptions. A node feeds one shared
queue (competing non-durable consumers) and each durable subscription its own copy of every event.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from dataclasses import dataclass, field


@dataclass
class StoredMessage:
    """One event on a node: its id, the encoded AMQP message, and how often delivery failed."""

    eid: int
    encoded: bytes
    delivery_count: int = 0
    # (encoded, what a selector reads of it), kept by um_rules.take_for; stale once ``encoded`` is replaced
    selector_env: tuple[bytes, dict] | None = field(default=None, repr=False, compare=False)


@dataclass
class Subscription:
    """A source of messages for consumer links: the shared queue of a node, or one durable subscription.

    ``pending`` is what is waiting to be delivered, oldest first; ``outstanding`` what was delivered and
    is not yet settled, by EID.
    """

    name: str
    durable: bool
    pending: deque[StoredMessage] = field(default_factory=deque)
    outstanding: dict[int, StoredMessage] = field(default_factory=dict)

    def take(self) -> StoredMessage | None:
        """The next message to deliver (now outstanding), or None."""
        if not self.pending:
            return None
        message = self.pending.popleft()
        self.outstanding[message.eid] = message
        return message

    def acknowledge(self, eid: int) -> StoredMessage | None:
        """Forget an outstanding message for good (accepted, rejected, or settled by the consumer)."""
        return self.outstanding.pop(eid, None)

    def requeue(self, eid: int) -> None:
        """Put an outstanding message back, in EID order, for redelivery."""
        message = self.outstanding.pop(eid, None)
        if message is not None:
            self.pending.append(message)
            self.pending = deque(sorted(self.pending, key=lambda m: m.eid))

    def requeue_all(self) -> None:
        """Put every outstanding message back (the consumer went away without settling)."""
        for eid in list(self.outstanding):
            self.requeue(eid)


@dataclass
class Node:
    """A destination addressed by name: its store uid, EID counter, shared queue and durable subscriptions."""

    address: str
    store_uid: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    queue: Subscription = field(default_factory=lambda: Subscription("(shared)", durable=False))
    durable: dict[str, Subscription] = field(default_factory=dict)
    _eids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def publish(self, encoded: bytes) -> StoredMessage:
        """Store one message: it joins the shared queue and every durable subscription."""
        message = StoredMessage(next(self._eids), encoded)
        self.queue.pending.append(message)
        for subscription in self.durable.values():
            subscription.pending.append(StoredMessage(message.eid, encoded))
        return message

    def delivery_tag(self, message: StoredMessage) -> bytes:
        """The UM delivery tag of a message on this node: ``<store-uid>:<eid>``."""
        return f"{self.store_uid}:{message.eid}".encode()

    def subscription(self, durable_name: str | None) -> Subscription:
        """The shared queue (``None``), or the durable subscription of that name, created if new."""
        if durable_name is None:
            return self.queue
        if durable_name not in self.durable:
            self.durable[durable_name] = Subscription(durable_name, durable=True)
        return self.durable[durable_name]

    def parse_tag(self, tag: bytes) -> int | None:
        """The EID from a ``<store-uid>:<eid>`` tag of this node; None when the tag is not of that form."""
        uid, sep, eid = tag.decode("utf-8", "replace").rpartition(":")
        if not sep or uid != self.store_uid or not eid.isdigit():
            return None
        return int(eid)


class Store:
    """All nodes of the broker, by address. Nodes are created on first use when ``auto_create`` is set."""

    def __init__(self, auto_create: bool = True) -> None:
        self.auto_create = auto_create
        self.nodes: dict[str, Node] = {}

    def node(self, address: str) -> Node | None:
        """The node at ``address`` (created if allowed), or None when there is none."""
        if address not in self.nodes and self.auto_create:
            self.nodes[address] = Node(address)
        return self.nodes.get(address)

    def remove(self, address: str) -> None:
        """Delete a node and everything on it."""
        self.nodes.pop(address, None)
