"""Mutants of the reference broker: each breaks exactly one documented guarantee.

The suite proves itself by catching every one: ``--reference-mutant NAME`` runs the catalogue against a
mutant, and the project's own tests assert which cases fail. Each mutant names the guarantee it breaks.
"""

from __future__ import annotations

from dataclasses import replace

from proton import Condition, Delivery, Described, Link, symbol, ulong

from ..frames import Frame
from ..rawframes import RawContext, frame_bytes
from .broker import Broker, BrokerConnection, Policy
from .faults import is_fatal
from .guard import Violation
from .mutant_kit import (
    DISPOSITION_SETTLED,
    DISPOSITION_STATE,
    FLOW_DRAIN,
    Mutant,
    RewritingBroker,
    RewritingConnection,
    reframed,
    with_field,
)
from .mutants_core import CORE_ROW_MUTANTS, RedeliversRejectedLater
from .mutants_errorswire import ERRORSWIRE_MUTANTS
from .mutants_sasl import SASL_MUTANTS
from .mutants_umrouter import UMROUTER_MUTANTS
from .outcomes import Modification
from .router_mutants import ROUTER_MUTANTS
from .store import Node, StoredMessage


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

MUTANTS.update(ROUTER_MUTANTS)
# -- mutants added for the self-test (issue 9); each still breaks one guarantee -------------------------------


class AnswersStatelessWithReleased(Broker):
    """Applies released, not the source's default outcome, to a disposition with no state."""

    def default_outcome(self) -> int:
        return Delivery.RELEASED


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


class PresettlesUnderSecond(Broker):
    """Settles outgoing deliveries when sending on links whose receiver asked for settle mode SECOND."""

    def presettles(self, link: Link) -> bool:
        return link.rcv_settle_mode == Link.RCV_SECOND or super().presettles(link)


class DashedDeliveryTags(Broker):
    """Tags deliveries `<store-uid>-<eid>`: the right parts, the wrong separator."""

    def delivery_tag(self, node: Node, message: StoredMessage) -> bytes:
        return f"{node.store_uid}-{message.eid}".encode()


class InternalErrorForPartial(RewritingBroker):
    """Rejects a multi-frame delivery with ``amqp:internal-error`` where ``amqp:not-implemented`` is due."""

    def rewrite(self, frame: Frame) -> bytes:
        state = frame.fields.get("state") if frame.performative == "disposition" else None
        error = state.get("error") if isinstance(state, dict) and state.get("@type") == "rejected" else None
        if not isinstance(error, dict) or error.get("condition") != "amqp:not-implemented":
            return frame.raw
        condition = Described(ulong(0x1d), [symbol("amqp:internal-error"), error.get("description")])
        return with_field(frame, DISPOSITION_STATE, Described(ulong(0x25), [condition]))


class IgnoresNullTransformer(Broker):
    """Stores and accepts a message whose node's transformer returned null (the failure goes unnoticed)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failing_transforms = _Forgetful()


class _Forgetful(set):
    """A set that keeps nothing: a provoked transformer failure is forgotten at once."""

    def add(self, element: object) -> None:
        return None


class SmalluintDispositionFirst(RewritingBroker):
    """Encodes a disposition's ``first`` of 0 as smalluint (0x52 0x00) where the seed has uint0 (0x43)."""

    def rewrite(self, frame: Frame) -> bytes:
        body = frame.raw[frame.raw[4] * 4:]
        if frame.performative != "disposition" or body[3:4] != b"\xc0" or body[7:8] != b"\x43":
            return frame.raw
        widened = body[:3] + b"\xc0" + bytes([body[4] + 1, body[5]]) + body[6:7] + b"\x52\x00" + body[8:]
        return reframed(frame, widened)


class LeavesConsumerAnswerUnsettled(RewritingBroker):
    """Answers a subscriber's disposition with the right outcome but settled=false."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "disposition" or frame.fields.get("role") != "sender":
            return frame.raw
        return with_field(frame, DISPOSITION_SETTLED, False)


class LeavesPublishAnswerUnsettled(RewritingBroker):
    """Answers a publisher's transfer with the right outcome but settled=false."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "disposition" or frame.fields.get("role") != "receiver":
            return frame.raw
        return with_field(frame, DISPOSITION_SETTLED, False)


MUTANTS.update({m.name: m for m in (
    Mutant("answers-stateless-with-released", "applies released, not accepted, to a disposition with no state",
           "000 Accepted: Subscription Mapping row 1 (the source's default outcome, accepted, and settled)",
           AnswersStatelessWithReleased),
    Mutant("presettles-under-second", "settles outgoing deliveries when sending on rcv-settle-mode SECOND links",
           "000 Accepted: Subscription Mapping rows 6, 7 (SECOND: the broker settles after the subscriber's "
           "accepted)", PresettlesUnderSecond),
    Mutant("uid-dash-eid-delivery-tags", "tags deliveries '<store-uid>-<eid>' instead of '<store-uid>:<eid>'",
           "000 Accepted: Subscription Mapping rows 5 and 7 (tag form <store-uid>:<eid>)", DashedDeliveryTags),
    Mutant("internal-error-for-partial", "rejects a multi-frame delivery with amqp:internal-error",
           "000 Accepted: Publishing Mapping row 1 (amqp:not-implemented)", InternalErrorForPartial),
    Mutant("ignores-null-transformer", "stores and accepts a message its transformer turned to null",
           "000 Accepted: Publishing Mapping row 2 (rejected, amqp:precondition-failed, nothing stored)",
           IgnoresNullTransformer),
    Mutant("smalluint-disposition-first", "encodes a disposition's first=0 as smalluint",
           "002 the disposition byte walk-through (first 0 as uint0, 0x43)", SmalluintDispositionFirst),
    Mutant("unsettled-consumer-answer", "answers a subscriber's accepted without settling",
           "000 Accepted: Subscription Mapping rows 1, 3-7 (accepted and settled by the broker)",
           LeavesConsumerAnswerUnsettled),
    Mutant("unsettled-publish-answer", "answers a publisher's transfer without settling",
           "000 Accepted: Publishing Mapping rows 4, 5 (accepted and settled); 002 (settled true)",
           LeavesPublishAnswerUnsettled),
)})
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


class List32Dispositions(RewritingBroker):
    """Writes dispositions as list32 (0xd0) where the reference writes list8: the same values, other bytes."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "disposition":
            return frame.raw
        fields = {k: v for k, v in frame.fields.items() if v is not None}
        return frame_bytes({"performative": "disposition", "fields": fields, "channel": frame.channel},
                           RawContext())  # proton.Data writes every list as list32


class IgnoresDrain(Broker):
    """Leaves a draining receiver's credit unused (no delivery-count advance, no flow state)."""

    def honours_drain(self) -> bool:
        return False


class DrainAnswerSaysNoDrain(RewritingBroker):
    """Answers a receiver's drain with a flow whose drain field is false, though its drain mode is still the
    receiver's true (AMQP 1.0 2.7.4: from the sender, drain is its actual drain mode)."""

    def rewrite(self, frame: Frame) -> bytes:
        if frame.performative != "flow" or not frame.fields.get("drain"):
            return frame.raw
        return with_field(frame, FLOW_DRAIN, False)


class FlowFirstConnection(RewritingConnection):
    """A connection that writes a drain's answering flow (drain set, link-credit 0) before the transfers that went
    out with it on its link, instead of after them: the flow says the credit is used up, then transfers come."""

    def __init__(self, broker: Broker, peer_name: str) -> None:
        super().__init__(broker, peer_name, lambda frame: frame.raw)

    def data_to_send(self) -> bytes:
        data = BrokerConnection.data_to_send(self)
        if not data:
            return data
        frames = self._splitter.feed(data)
        for index, frame in enumerate(list(frames)):
            if frame.performative != "flow" or not frame.fields.get("drain") or frame.fields.get("link-credit"):
                continue
            link = (frame.channel, frame.fields.get("handle"))
            first = next((i for i, f in enumerate(frames[:index])
                          if f.performative == "transfer" and (f.channel, f.fields.get("handle")) == link), None)
            if first is not None:
                frames.insert(first, frames.pop(index))
        return b"".join(frame.raw for frame in frames)


class DrainAnswerBeforeMessages(Broker):
    """Answers a drain with its flow state (link-credit 0, the delivery-count past the whole credit) before the
    messages it sends on that credit (AMQP 1.0 2.6.7: the sender advances the delivery-count only after sending
    all available messages; a transfer after a flow that said link-credit 0 is beyond the credit)."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        return FlowFirstConnection(self, peer_name)


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
    Mutant("redelivers-rejected-later", "puts a rejected message back for redelivery 0.25 s after settling it",
           "3.4.3 rejected is terminal, the message is not redelivered (core.outcomes/rejected, its bounded watch)",
           RedeliversRejectedLater),
    Mutant("ignores-drain", "keeps the credit a draining receiver gave when it has no message left",
           "2.6.7 drain (core.flow/drain-*)", IgnoresDrain, scope=("core.flow",)),
    Mutant("drain-answer-says-no-drain", "answers a receiver's drain with drain=false in its flow",
           "2.7.4 flow drain: the sender's actual drain mode (core.flow/drain-*)", DrainAnswerSaysNoDrain,
           scope=("core.flow",)),
    Mutant("drain-answer-before-messages", "answers a drain with link-credit 0 before the messages it sends on it",
           "2.6.7 drain: messages first, then the delivery-count advanced (core.flow/drain-fewer-messages)",
           DrainAnswerBeforeMessages, scope=("core.flow",)),
)
MUTANTS.update({m.name: m for m in CORE_MUTANTS})


# -- scope: where each family's guarantees are checked (selftest runs a mutant against these tables) -------


def _family_scope(mutant: Mutant) -> tuple[str, ...]:
    if mutant.name in ROUTER_MUTANTS:
        return ("router.",)
    if mutant in CORE_MUTANTS:
        return ("core.", "wire.")
    return ("um.", "wire.")  # the UM 10.11 mappings and the seed-002 bytes


MUTANTS.update({name: replace(m, scope=m.scope or _family_scope(m)) for name, m in MUTANTS.items()})

MUTANTS.update(UMROUTER_MUTANTS)


MUTANTS.update({m.name: m for m in CORE_ROW_MUTANTS})


MUTANTS.update({m.name: m for m in ERRORSWIRE_MUTANTS})


MUTANTS.update({m.name: m for m in SASL_MUTANTS})
