"""Mutants of the reference broker: each breaks exactly one documented guarantee.

The suite proves itself by catching every one: ``--reference-mutant NAME`` runs the catalogue against a
mutant, and the project's own tests assert which cases fail. Each mutant names the guarantee it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from proton import Condition, Delivery, Link

from ..frames import FrameSplitter, FramingError
from ..rawframes import RawContext, frame_bytes
from .broker import Broker, Policy
from .guard import Violation
from .outcomes import Modification
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


# -- core AMQP 1.0 catalogue (issue 4): one mutant (at least) per family of core.* and wire.* -----------


class NeverPresettles(Broker):
    """Sends every delivery unsettled, even on a link whose receiver asked for sender settle mode SETTLED."""

    def presettles(self, link: Link) -> bool:
        return False


class SettlesFirstUnderSecond(Broker):
    """As receiver under receiver settle mode SECOND, settles at once instead of after the sender."""

    def settles_second(self, link: Link) -> bool:
        return False


class CountsReleaseAsFailure(Broker):
    """Increments the delivery-count on every redelivery, released and modified alike."""

    def counts_as_failed(self, state: int, modification: Modification) -> bool:
        return True


class ForgetsUndeliverableHere(Broker):
    """Redelivers a message modified with undeliverable-here to the same link."""

    def honours_undeliverable_here(self) -> bool:
        return False


class IgnoresMessageAnnotations(Broker):
    """Drops the message-annotations of a modified outcome."""

    def merges_annotations(self) -> bool:
        return False


class TreatsReceivedAsTerminal(Broker):
    """Takes the non-terminal received state for accepted."""

    def terminal_state(self, state: int) -> int | None:
        return Delivery.ACCEPTED if state == Delivery.RECEIVED else state


class RejectsMultiFrameUnderCore(Broker):
    """Refuses multi-frame deliveries whatever the expectation set (as UM does)."""

    def policy_for(self, expectation_set: str) -> Policy:
        return Policy(partial_delivery="reject")


class WrongFramingCondition(Broker):
    """Answers framing errors with amqp:decode-error."""

    def answer_violation(self, violation: Violation) -> Violation | None:
        if violation.condition == "amqp:connection:framing-error":
            return replace(violation, condition="amqp:decode-error")
        return violation


class ClosesOnUnattachedHandle(Broker):
    """Closes the whole connection with amqp:invalid-field for a frame on an unattached handle (as proton does)."""

    def answer_violation(self, violation: Violation) -> Violation | None:
        if violation.condition == "amqp:session:unattached-handle":
            return replace(violation, scope="connection", condition="amqp:invalid-field")
        return violation


class TakesTransfersWithoutCredit(Broker):
    """Lets proton take a transfer for which no credit was granted."""

    def answer_violation(self, violation: Violation) -> Violation | None:
        return None if violation.condition == "amqp:link:transfer-limit-exceeded" else violation


class List32Dispositions(Broker):
    """Writes dispositions as list32 (0xd0) where the reference writes list8: the same values, other bytes."""

    def encode_outbound(self, data: bytes) -> bytes:
        return _rewrite_dispositions(data)


def _rewrite_dispositions(data: bytes) -> bytes:
    try:
        frames = FrameSplitter("out").feed(data)
    except FramingError:
        return data
    if sum(len(f.raw) for f in frames) != len(data):
        return data  # not frame-aligned: leave it
    out = []
    for frame in frames:
        if frame.performative == "disposition":
            fields = {k: v for k, v in frame.fields.items() if v is not None}
            out.append(frame_bytes({"performative": "disposition", "fields": fields, "channel": frame.channel},
                                   RawContext()))  # proton.Data writes every list as list32
        else:
            out.append(frame.raw)
    return b"".join(out)


CORE_MUTANTS = (
    Mutant("never-presettles", "sends unsettled even when the receiver asked for sender settle mode SETTLED",
           "003 at-most-once; 2.7.3 snd-settle-mode (core.settlement.consume/at-most-once-consume)", NeverPresettles),
    Mutant("settles-first-under-second", "as receiver, settles at once under receiver settle mode SECOND",
           "003 exactly-once; 2.8.3 (core.settlement/exactly-once-publish)", SettlesFirstUnderSecond),
    Mutant("counts-release-as-failure", "increments delivery-count on released and modified without delivery-failed",
           "3.4.4, 3.4.5 (core.outcomes/released, modified-not-failed)", CountsReleaseAsFailure),
    Mutant("forgets-undeliverable-here", "redelivers to the link that said undeliverable-here",
           "3.4.5 undeliverable-here (core.outcomes/modified-undeliverable-here)", ForgetsUndeliverableHere),
    Mutant("ignores-message-annotations", "drops modified's message-annotations",
           "3.4.5 message-annotations (core.outcomes/modified-annotations)", IgnoresMessageAnnotations),
    Mutant("treats-received-as-terminal", "takes received for accepted and settles",
           "3.4.1 received is not terminal (core.outcomes/received)", TreatsReceivedAsTerminal),
    Mutant("rejects-multi-frame-under-core", "refuses multi-frame deliveries under core",
           "2.6.14; 004 pn_delivery_partial (core.transfer/multi-frame-in)", RejectsMultiFrameUnderCore),
    Mutant("wrong-framing-condition", "answers framing errors with amqp:decode-error",
           "2.3.1, 2.7.1, 2.8.16 framing-error (core.errors framing rows)", WrongFramingCondition),
    Mutant("closes-on-unattached-handle", "closes the connection with invalid-field for an unattached handle",
           "2.7.4, 2.8.17 unattached-handle (core.errors/*-unattached-handle)", ClosesOnUnattachedHandle),
    Mutant("takes-transfers-without-credit", "accepts a transfer sent with no link credit",
           "2.6.7, 2.8.18 transfer-limit-exceeded (core.errors/transfer-without-credit)", TakesTransfersWithoutCredit),
    Mutant("list32-dispositions", "encodes dispositions as list32 instead of list8 (same decoded values)",
           "002 byte walk-through; 2.7.6 (wire.disposition/accepted, wire.performatives/broker-disposition-*)",
           List32Dispositions),
)
MUTANTS.update({m.name: m for m in CORE_MUTANTS})
