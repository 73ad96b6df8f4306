"""Access control for the reference broker: which operations are denied on which addresses. No I/O.

UM 10.11 ("Rejected" tables of ``000_ce67ac77056e886e.txt``) names three ACL-governed operations: publishing
to a subject, subscribing to it, and durable subscribing (the durable ACK). Everything is allowed until the
broker admin denies it; a denied operation is answered with ``amqp:unauthorized-access``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPERATIONS = ("publish", "subscribe", "durable-subscribe")


@dataclass
class Acl:
    """The denied (operation, address) pairs; all else is allowed."""

    denied: set[tuple[str, str]] = field(default_factory=set)

    def deny(self, operation: str, address: str) -> None:
        """Deny ``operation`` on ``address`` from now on; ValueError for an unknown operation."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; known: {', '.join(OPERATIONS)}")
        self.denied.add((operation, address))

    def allow(self, operation: str, address: str) -> None:
        """Lift a denial (no-op when there is none)."""
        self.denied.discard((operation, address))

    def allows(self, operation: str, address: str) -> bool:
        """True unless ``operation`` was denied on ``address``."""
        return (operation, address) not in self.denied
