"""Delivery-state semantics of the reference broker (AMQP 1.0 part 3.4), sans-I/O.

What a consumer's outcome does to a stored message, and the outcomes an admin can make the broker give
a publisher:

- released (3.4.4): the message goes back for redelivery, its delivery-count unchanged;
- modified (3.4.5): back for redelivery; ``delivery-failed`` increments the header's delivery-count,
  ``undeliverable-here`` keeps it from the link that modified it, ``message-annotations`` are merged into
  the message's own (the modified values win);
- accepted, rejected (3.4.2, 3.4.3): the message is gone;
- received (3.4.1): not terminal, nothing changes.

The stored bytes are rewritten at once, so the next delivery carries the new header and annotations.
"""

from __future__ import annotations

from dataclasses import dataclass

from proton import Condition, Delivery, Message, symbol

# Outcomes an admin provocation makes the broker give every publish to a node (core.outcomes rows).
PROVOKED = {
    "reject-publish": "rejected",
    "release-publish": "released",
    "modify-publish": "modified",
}
REJECT_CONDITION = Condition("amqp:precondition-failed", "refused by the broker's admin",
                             {symbol("x-opt-reason"): "provoked"})
MODIFY_ANNOTATIONS = {symbol("x-opt-modified-by"): "reference"}


def redelivery_bytes(encoded: bytes, delivery_failed: bool, annotations: dict | None) -> bytes:
    """The message as it must be redelivered: delivery-count + 1 when the delivery failed, the outcome's
    message-annotations merged over its own. Unchanged bytes when neither applies."""
    if not delivery_failed and not annotations:
        return encoded
    message = Message()
    message.decode(encoded)
    if delivery_failed:
        message.delivery_count = (message.delivery_count or 0) + 1
    if annotations:
        merged = dict(message.annotations or {})
        merged.update({symbol(str(k)): v for k, v in annotations.items()})
        message.annotations = merged
    return message.encode()


@dataclass
class Modification:
    """What a released or modified outcome asks of the stored message."""

    delivery_failed: bool = False
    undeliverable_here: bool = False
    annotations: dict | None = None

    @classmethod
    def of(cls, delivery: Delivery) -> Modification:
        """Read the remote modified (or released) state of ``delivery``."""
        if delivery.remote_state != Delivery.MODIFIED:
            return cls()
        remote = delivery.remote
        annotations = remote.annotations if isinstance(remote.annotations, dict) else None
        return cls(bool(remote.failed), bool(remote.undeliverable), annotations)


def give_provoked(delivery: Delivery, outcome: str, settle: bool) -> None:
    """Give ``delivery`` the provoked outcome ("rejected", "released", "modified") with its fields."""
    if outcome == "rejected":
        delivery.local.condition = REJECT_CONDITION
        delivery.update(Delivery.REJECTED)
    elif outcome == "released":
        delivery.update(Delivery.RELEASED)
    else:
        delivery.local.failed = True
        delivery.local.undeliverable = True
        delivery.local.annotations = dict(MODIFY_ANNOTATIONS)
        delivery.update(Delivery.MODIFIED)
    if settle:
        delivery.settle()
