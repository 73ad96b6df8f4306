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

# Router mutants (issue 5) live in their own module; registered here so --reference-mutant finds them.
from .router_mutants import ROUTER_MUTANTS  # noqa: E402

MUTANTS.update(ROUTER_MUTANTS)
