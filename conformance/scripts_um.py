"""Scenario scripts for the UM 10.11 rejection and transaction rows (``000_ce67ac77056e886e.txt``).

Like :mod:`scripts`, each script drives scripted peers and returns observations; it never judges. The
broker admin (``ctx.admin``) provokes what a row's ``given.provocation`` names, at the moment the row
describes: before the subscription request, before the publish (after the publisher attached), or before
the durable ACK (after the message arrived). Transaction ids the peer declared are shown as ``txn1``,
``txn2``... in observations, so a table can require "the txn-id that was declared" exactly.
"""

from __future__ import annotations

import uuid
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.peer import ScriptedPeer
from amqp_conformance.peers.transactions import (
    attach_coordinator,
    declare,
    discharge,
    dispose_transactional,
    send_transactional,
)
from proton import Message, Receiver

from .context import CaseContext, SetupFailed, expects_nothing, open_session, setup_step
from .scripts import body_of, collect, disposition_seen, publish_setup, remaining_on_node, send_in_two_frames

SELECTOR_DESCRIPTOR = "apache.org:selector-filter:string"


class TxnNames:
    """Names the txn-ids a case declared (``txn1``, ...) wherever they appear in observed data."""

    def __init__(self) -> None:
        self.names: dict[bytes, str] = {}

    def add(self, txn_id: bytes | None) -> None:
        """Remember a declared txn-id under the next name."""
        if txn_id is not None and txn_id not in self.names:
            self.names[txn_id] = f"txn{len(self.names) + 1}"

    def show(self, value: Any) -> Any:
        """``value`` with every declared txn-id (bytes) replaced by its name."""
        if isinstance(value, (bytes, bytearray)) and bytes(value) in self.names:
            return self.names[bytes(value)]
        if isinstance(value, dict):
            return {k: self.show(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.show(v) for v in value]
        return value


def broker_handle(attach: Frame) -> int | None:
    """The handle the broker chose for a link (its attach): the handle of its transfers and detach."""
    return attach.fields.get("handle")


def detach_seen(peer: ScriptedPeer, handle: int | None, since: int) -> dict | None:
    """The broker's detach on ``handle`` after ``since`` as {closed, error}, or None while attached."""
    frame = peer.find("detach", since, handle=handle)
    if frame is None:
        return None
    return {"closed": frame.fields.get("closed"), "error": frame.fields.get("error")}


def delivered_on(peer: ScriptedPeer, handle: int | None, since: int) -> list[Any]:
    """The bodies of the messages the broker transferred on ``handle`` after ``since`` (first frames)."""
    bodies = []
    for frame in peer.frames[since:]:
        if frame.direction == "in" and frame.performative == "transfer" and frame.fields.get("handle") == handle \
                and frame.fields.get("delivery-id") is not None:
            message = Message()
            try:
                message.decode(frame.payload)
                bodies.append(body_of(message))
            except Exception:  # a partial first frame: the body is not whole here
                bodies.append("(partial)")
    return bodies


def sent_after_detach(peer: ScriptedPeer, handle: int | None, since: int) -> list[str]:
    """Performatives the broker sent on ``handle`` after its detach (there must be none)."""
    frames = [f for f in peer.frames[since:] if f.direction == "in" and f.fields.get("handle") == handle]
    for index, frame in enumerate(frames):
        if frame.performative == "detach":
            return [f.performative for f in frames[index + 1:]]
    return []


def _provoke(ctx: CaseContext, provocation: str, **details: str) -> None:
    if provocation != "none":
        ctx.admin.provoke(provocation, ctx.node, **details)


# -- um.rejected.subscribe ------------------------------------------------------------------------------


def run_subscription_fault(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """A subscription request (``when = "subscribe"``) or a durable ACK (``when = "ack"``) fails. Observes:

    ``detach`` (the broker's detach of the subscriber link: closed, error), ``delivered_after`` (bodies the
    broker transferred on that link after the failing operation, until the quiet time after the detach),
    and for ``ack``: ``delivery_tag`` and ``broker_disposition`` (its answer to our unsettled accepted);
    for a second subscription: ``first_subscriber`` ("attached" or "detached").
    """
    if given["when"] == "ack":
        return _ack_fault(ctx, given)
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "subscriber")
    publish_setup(ctx, peer, session, ["m1"])
    first: Receiver | None = None
    first_handle = None
    if given["already_subscribed"]:
        first, first_attach = setup_step("attach the first subscriber", peer.attach_receiver, session, ctx.node)
        first_handle = broker_handle(first_attach)
    _provoke(ctx, given["provocation"])
    filters = None
    if given["selector"]:
        from proton import Described, symbol

        filters = {symbol("jms-selector"): Described(symbol(SELECTOR_DESCRIPTOR), given["selector"])}
    since = peer.mark()
    _, attach = setup_step("attach subscriber", peer.attach_receiver, session, ctx.node,
                           rcv_settle_mode=given["rcv_settle_mode"], durable=given["durable"],
                           name=f"sub-{uuid.uuid4().hex[:8]}", credit=10, filter=filters)
    handle = broker_handle(attach)
    peer.pump(lambda: detach_seen(peer, handle, since) is not None, ctx.wait_for("detach"))
    peer.pump(timeout=ctx.quiet)  # absence: nothing may be delivered on a link whose subscription failed
    observed["detach"] = detach_seen(peer, handle, since)
    observed["delivered_after"] = delivered_on(peer, handle, since)
    if first is not None:
        observed["first_subscriber"] = "detached" if detach_seen(peer, first_handle, since) else "attached"
    return observed


def _ack_fault(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "subscriber")
    name = f"sub-{uuid.uuid4().hex[:8]}"
    receiver, attach = setup_step("attach durable subscriber", peer.attach_receiver, session, ctx.node, name=name,
                                  rcv_settle_mode=given["rcv_settle_mode"], durable=given["durable"])
    handle = broker_handle(attach)
    publish_setup(ctx, peer, session, ["m1", "m2"])
    since = peer.mark()
    receiver.flow(1)
    first = setup_step("receive m1", peer.receive, receiver, since)
    observed["delivery_tag"] = first.transfer.fields.get("delivery-tag")
    _provoke(ctx, given["provocation"], subscription=name, container=peer.connection.container)
    since = peer.mark()
    peer.dispose(first.delivery, "accepted", settle=False)
    answer = peer.wait_for_disposition(first.delivery_id, since, ctx.wait_for("broker_disposition"), role="sender")
    observed["broker_disposition"] = disposition_seen(answer)
    if answer is not None and answer.fields.get("settled"):
        first.delivery.settle()
    receiver.flow(1)  # credit for m2: a link that stayed attached would deliver it
    peer.pump(lambda: detach_seen(peer, handle, since) is not None, ctx.wait_for("detach"))
    peer.pump(timeout=ctx.quiet)
    observed["detach"] = detach_seen(peer, handle, since)
    observed["delivered_after"] = delivered_on(peer, handle, since)
    return observed


# -- um.rejected.publish and um.transactions.publish ----------------------------------------------------


def run_um_publish(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The peer publishes ``transfers`` (in a transaction when ``transactional``), the admin having provoked
    ``provocation`` after the attach (and relieved it after the first answer when ``relieve``). Observes:

    ``declared`` (the coordinator's answer to declare), ``dispositions`` (per transfer), ``detach`` (the
    broker's detach of the publisher link), ``after_detach`` (what the broker sent on that link after its
    detach), ``visible_before_discharge`` (what a consumer gets before the discharge), ``discharge`` (the
    answer to discharge) and ``stored`` (what a consumer of the node gets at the end).
    """
    observed: dict[str, Any] = {}
    names = TxnNames()
    peer, session = open_session(ctx, "publisher")
    coordinator = None
    txn_id = b""
    if given["transactional"]:
        coordinator, _ = setup_step("attach coordinator", attach_coordinator, peer, session)
        declared, frame = declare(peer, coordinator, ctx.timeout)
        names.add(declared)
        txn_id = declared if declared is not None else b"(none declared)"
        observed["declared"] = names.show(disposition_seen(frame))
    sender, attach = setup_step("attach publisher", peer.attach_sender, session, ctx.node,
                                snd_settle_mode=given["snd_settle_mode"])
    handle = broker_handle(attach)
    attached_at = peer.mark()
    _provoke(ctx, given["provocation"])
    expected = ctx.expected.get("dispositions")
    dispositions = []
    for index, kind in enumerate(given["transfers"]):
        body = f"m{index + 1}"
        since = peer.mark()
        if detach_seen(peer, handle, attached_at) is not None:
            dispositions.append(None)
            continue
        if kind == "partial":
            delivery_id = send_in_two_frames(ctx, peer, sender, body, f"p{index + 1}".encode(), since,
                                             finish=lambda: detach_seen(peer, handle, attached_at) is None)
        elif given["transactional"]:
            _, transfer = setup_step(f"send {body} in the transaction", send_transactional, peer, sender, body,
                                     txn_id, settled=(kind == "settled"))
            delivery_id = transfer.fields["delivery-id"]
        else:
            _, transfer = setup_step(f"send {body}", peer.send, sender, body, settled=(kind == "settled"))
            delivery_id = transfer.fields["delivery-id"]
        wants = expected[index] if isinstance(expected, list) and index < len(expected) else None
        wait = ctx.quiet if expects_nothing(wants) else ctx.timeout
        dispositions.append(names.show(disposition_seen(
            peer.wait_for_disposition(delivery_id, since, wait, role="receiver"))))
        if index == 0 and given["relieve"]:
            ctx.admin.relieve(given["provocation"], ctx.node)
    observed["dispositions"] = dispositions
    peer.pump(lambda: detach_seen(peer, handle, attached_at) is not None, ctx.wait_for("detach"))
    observed["detach"] = detach_seen(peer, handle, attached_at)
    if coordinator is not None and given["discharge"] != "none":
        observed["visible_before_discharge"] = remaining_on_node(ctx)
        frame = discharge(peer, coordinator, txn_id, given["discharge"] == "rollback", ctx.timeout)
        observed["discharge"] = names.show(disposition_seen(frame))
    observed["stored"] = remaining_on_node(ctx)  # takes the quiet time: also the watch after the detach
    observed["after_detach"] = sent_after_detach(peer, handle, attached_at)
    return observed


# -- um.transactions.subscribe --------------------------------------------------------------------------


def run_txn_acquire(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """A durable subscriber disposes of m1 with ``transactional-state`` (txn-id, accepted), then discharges
    (``commit`` or ``rollback``). Observes ``declared``, ``delivery_tag``, ``broker_disposition`` (an
    answer to the transactional disposition before the discharge), ``discharge``, and ``remaining``
    (what the durable subscriber gets when it re-attaches after the discharge)."""
    observed: dict[str, Any] = {}
    names = TxnNames()
    peer, session = open_session(ctx, "subscriber")
    name = f"sub-{uuid.uuid4().hex[:8]}"
    options = {"name": name, "rcv_settle_mode": given["rcv_settle_mode"], "durable": given["durable"]}
    receiver, attach = setup_step("attach durable subscriber", peer.attach_receiver, session, ctx.node, **options)
    handle = broker_handle(attach)
    publish_setup(ctx, peer, session, ["m1", "m2"])
    coordinator, _ = setup_step("attach coordinator", attach_coordinator, peer, session)
    txn_id, frame = declare(peer, coordinator, ctx.timeout)
    names.add(txn_id)
    observed["declared"] = names.show(disposition_seen(frame))
    if txn_id is None:
        raise SetupFailed("set-up step 'declare': the broker declared no transaction")
    since = peer.mark()
    receiver.flow(1)
    first = setup_step("receive m1", peer.receive, receiver, since)
    observed["delivery_tag"] = first.transfer.fields.get("delivery-tag")
    since = peer.mark()
    setup_step("transactional disposition", dispose_transactional, peer, first.delivery, txn_id, "accepted")
    answer = peer.wait_for_disposition(first.delivery_id, since, ctx.wait_for("broker_disposition"), role="sender")
    observed["broker_disposition"] = names.show(disposition_seen(answer))
    frame = discharge(peer, coordinator, txn_id, given["discharge"] == "rollback", ctx.timeout)
    observed["discharge"] = names.show(disposition_seen(frame))
    since = peer.mark()
    receiver.detach()
    setup_step("detach durable subscriber", peer.expect, "detach", since, handle=handle)
    receiver, _ = setup_step("re-attach durable subscriber", peer.attach_receiver, session, ctx.node, credit=20,
                             **options)
    observed["remaining"] = collect(ctx, peer, receiver)
    receiver.close()
    return observed
