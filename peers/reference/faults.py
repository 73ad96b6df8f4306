"""Provoked conditions of the reference broker: store capacity, one-shot internal failures, removed nodes.

Sans-I/O state the broker consults before each UM native operation (publish, subscribe, ACK), and the
classification of the resulting AMQP error conditions into fatal (the link is closed) and transient (the
delivery is rejected and settled, the link advances), as the UM 10.11 "Rejected" tables give them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# UM 10.11, "Rejected" subscription and publishing tables: the conditions marked (fatal) and (transient).
FATAL = frozenset({"amqp:unauthorized-access", "amqp:internal-error", "amqp:not-found", "amqp:invalid-field",
                   "amqp:illegal-state", "amqp:not-implemented"})
TRANSIENT = frozenset({"amqp:resource-limit-exceeded"})


def is_fatal(condition: str) -> bool:
    """True when the UM guide makes ``condition`` fatal (the link is closed with it)."""
    return condition in FATAL


@dataclass
class Faults:
    """What the admin has provoked, by address.

    ``capacity``: the most messages the node's store may hold (absent: unlimited); ``fail_next``: addresses
    whose next operation fails internally (once); ``removed``: addresses whose node was removed and must not
    be created again on use.
    """

    capacity: dict[str, int] = field(default_factory=dict)
    fail_next: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)

    def full(self, address: str, stored: int) -> bool:
        """True when a node holding ``stored`` messages has reached its capacity."""
        limit = self.capacity.get(address)
        return limit is not None and stored >= limit

    def take_failure(self, address: str) -> bool:
        """True (once) when the next operation on ``address`` must fail internally; the fault is used up."""
        if address in self.fail_next:
            self.fail_next.discard(address)
            return True
        return False
