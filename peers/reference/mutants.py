"""Mutants of the reference broker: each breaks exactly one documented guarantee.

The suite proves itself by catching every one: ``--reference-mutant NAME`` runs the catalogue against a
mutant, and the project's own tests assert which cases fail. Each mutant names the guarantee it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from proton import Condition, Link

from .broker import Broker, Policy
from .store import Node, StoredMessage


@dataclass(frozen=True)
class Mutant:
    """A named broker variant, the guarantee it breaks and where that guarantee is written."""

    name: str
    description: str
    breaks: str
    broker: type[Broker]


class SettlesBeforeAccept(Broker):
    """Settles each outgoing delivery as it sends it."""

    def presettles(self, link: Link) -> bool:
        return True  # settles every outgoing delivery before the receiver has decided its outcome


class IgnoresStatelessDisposition(Broker):
    """Leaves a disposition with no state unanswered."""

    def default_outcome(self) -> int:
        return 0  # a disposition without state goes unanswered


class AcceptsPartialDeliveries(Broker):
    """Accepts multi-frame deliveries whatever the expectation set."""

    def policy_for(self, expectation_set: str) -> Policy:
        return Policy(partial_delivery="accept")


class PlainDeliveryTags(Broker):
    """Tags deliveries without the store uid."""

    def delivery_tag(self, node: Node, message: StoredMessage) -> bytes:
        return f"tag{message.eid}".encode()


class WrongTransformerCondition(Broker):
    """Reports a null transformer result as an internal error."""

    def transformer_failure(self) -> Condition:
        return Condition("amqp:internal-error", "the message transformer returned null")


class ForgetsDurableOnDetach(Broker):
    """Drops durable subscriptions on any detach."""

    def keeps_durable_on_detach(self) -> bool:
        return False


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("settles-before-accept", "settles outgoing deliveries when sending, before the receiver's outcome",
           "000 Accepted: Subscription Mapping rows 1, 3-7 (the broker settles after the subscriber's disposition)",
           SettlesBeforeAccept),
    Mutant("ignores-stateless-disposition", "does not answer a disposition that carries no state",
           "000 Accepted: Subscription Mapping row 1 (default outcome applied and settled)",
           IgnoresStatelessDisposition),
    Mutant("accepts-partial-deliveries", "accepts multi-frame deliveries under um-10.11",
           "000 Accepted: Publishing Mapping row 1 (rejected with amqp:not-implemented)", AcceptsPartialDeliveries),
    Mutant("plain-delivery-tags", "tags deliveries 'tagN' instead of <store-uid>:<eid>",
           "000 Accepted: Subscription Mapping rows 5 and 7 (tag form)", PlainDeliveryTags),
    Mutant("wrong-transformer-condition", "answers a null transformer result with amqp:internal-error",
           "000 Accepted: Publishing Mapping row 2 (amqp:precondition-failed)", WrongTransformerCondition),
    Mutant("forgets-durable-on-detach", "drops a durable subscription when its link detaches without closing",
           "000 Accepted: Subscription Mapping rows 5 and 7 (durable subscriber ACKs)", ForgetsDurableOnDetach),
)}


# -- UM 10.11 rejections, link fate and transactions (um_rules.py) -------------------------------------------

from proton import Delivery  # noqa: E402

from .faults import is_fatal  # noqa: E402


class _ConditionSwap(Broker):
    """Answers one error condition with another; the link's fate still follows the original condition."""

    original = ""
    replacement = ""

    def condition(self, name: str, description: str) -> Condition:
        return Condition(self.replacement if name == self.original else name, description)

    def link_fatal(self, error: Condition) -> bool:
        return is_fatal(self.original if error.name == self.replacement else error.name)


def _swap(original: str, replacement: str) -> type[Broker]:
    short = original.split(":")[1].title().replace("-", "")
    return type(f"Swaps{short}", (_ConditionSwap,), {"original": original, "replacement": replacement,
                                                      "__doc__": f"Answers {original} with {replacement}."})


class SettlesRejectionWithoutError(Broker):
    """Settles a refused delivery without rejecting it (no state, no error)."""

    def reject(self, delivery: Delivery, error: Condition) -> None:
        delivery.settle()


class DropsRejectionCondition(Broker):
    """Rejects a refused delivery without its error condition."""

    def reject(self, delivery: Delivery, error: Condition) -> None:
        delivery.update(Delivery.REJECTED)
        delivery.settle()


class KeepsLinkAfterFatal(Broker):
    """Keeps the link attached after a fatal error."""

    def link_fatal(self, error: Condition) -> bool:
        return False


class DetachesOnTransient(Broker):
    """Closes the link on a transient error too."""

    def link_fatal(self, error: Condition) -> bool:
        return True


class WrongTxnId(Broker):
    """Answers transactional deliveries with a txn-id that was never declared."""

    def transactional_answer(self, delivery: Delivery, txn_id: bytes, outcome: int,
                             error: Condition | None = None) -> None:
        super().transactional_answer(delivery, txn_id + b"-other", outcome, error)


class NoTransactionalState(Broker):
    """Answers transactional deliveries with a plain outcome, without transactional-state."""

    def transactional_answer(self, delivery: Delivery, txn_id: bytes, outcome: int,
                             error: Condition | None = None) -> None:
        if error is not None:
            delivery.local.condition = error
        delivery.update(outcome)


class IgnoresRollback(Broker):
    """Commits a transaction that the controller rolls back."""

    def rolls_back(self, fail: bool) -> bool:
        return False


UM_SWAPS = (
    ("amqp:unauthorized-access", "amqp:not-allowed"),
    ("amqp:internal-error", "amqp:precondition-failed"),
    ("amqp:not-found", "amqp:resource-deleted"),
    ("amqp:invalid-field", "amqp:decode-error"),
    ("amqp:illegal-state", "amqp:resource-locked"),
    ("amqp:resource-limit-exceeded", "amqp:resource-locked"),
    ("amqp:not-implemented", "amqp:decode-error"),
)
UM_MUTANTS = tuple(
    Mutant(f"{original.split(':')[1]}-as-{replacement.split(':')[1]}",
           f"answers {original} with {replacement} (the link's fate unchanged)",
           "000 Rejected: Subscription/Publishing Mapping (the error condition of each rejection)",
           _swap(original, replacement))
    for original, replacement in UM_SWAPS
) + (
    Mutant("settles-rejection-without-error", "settles a refused delivery with no state instead of rejecting it",
           "000 Rejected: Subscription row 2, Publishing rows 1-2 (rejected and settled)",
           SettlesRejectionWithoutError),
    Mutant("drops-rejection-condition", "rejects a refused delivery without the error condition",
           "000 Rejected: Subscription row 2, Publishing rows 1-2 (the condition of the rejection)",
           DropsRejectionCondition),
    Mutant("keeps-link-after-fatal", "keeps the link attached after a fatal error",
           "000 Rejected: every (fatal) condition (the link is closed)", KeepsLinkAfterFatal),
    Mutant("detaches-on-transient", "closes the link after a transient error (resource-limit-exceeded)",
           "000 Rejected: Publishing rows 2-3 (transient: the link is advanced)", DetachesOnTransient),
    Mutant("wrong-txn-id", "answers transactional deliveries with another txn-id",
           "000 Accepted: Publishing row 6, Rejected: Publishing row 3 (transaction state set to the TX ID)",
           WrongTxnId),
    Mutant("no-transactional-state", "answers transactional deliveries without transactional-state",
           "000 Accepted: Publishing row 6, Rejected: Publishing row 3 (transaction state set to the TX ID)",
           NoTransactionalState),
    Mutant("ignores-rollback", "commits when the controller rolls back",
           "000 Accepted: Publishing row 6, Subscription row 8 (AMQP 1.0 4.4: rollback discards the work)",
           IgnoresRollback),
)
MUTANTS.update({m.name: m for m in UM_MUTANTS})
# Router mutants (issue 5) live in their own module; registered here so --reference-mutant finds them.
from .router_mutants import ROUTER_MUTANTS  # noqa: E402

MUTANTS.update(ROUTER_MUTANTS)
