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
from amqp_conformance.peers.peer import ExpectationFailed, PeerError, ScriptedPeer
from amqp_conformance.peers.sections import message_sections
from amqp_conformance.peers.transactions import (
    attach_coordinator,
    declare,
    discharge,
    dispose_transactional,
    send_transactional,
)
from proton import Message, Receiver, Sender, Session, symbol

from .context import CaseContext, SetupFailed, expects_nothing, open_session, setup_step
from .scripts import (
    body_of,
    broker_handle,
    delivered_on,
    disposition_covers,
    disposition_seen,
    each_received,
    link_fate,
    publish_setup,
    remaining_on_node,
    send_in_two_frames,
    send_settled_in_frames,
)

SELECTOR_DESCRIPTOR = "apache.org:selector-filter:string"
# given.discharge of um-publish -> the discharge's fail field: set (rollback), false (commit) or left out
# ("commit-unset": AMQP 1.0 4.5.3 rolls back only when fail is set)
DISCHARGE_FAIL: dict[str, bool | None] = {"commit": False, "rollback": True, "commit-unset": None}
# given.txn -> the txn-id a transactional transfer or disposition names instead of the declared one (None: null)
TXN_NAMED: dict[str, bytes | None] = {"undeclared": b"never-declared", "null": None}
NON_CONTROL_BODY = "not a control message"


class TxnNames:
    """Names the txn-ids a case declared (``txn1``, ...) wherever they appear in observed data.

    A name keeps the type the broker gave the id: a binary txn-id (AMQP 1.0 4.5.6) shows as ``b"txn1"``,
    anything else as the plain string ``"txn1"``, so a row can judge the type with ``@binary``.
    """

    def __init__(self) -> None:
        self.names: dict[tuple[type, Any], str] = {}

    @staticmethod
    def _key(value: Any) -> tuple[type, Any] | None:
        if isinstance(value, (bytes, bytearray)):
            return bytes, bytes(value)
        if isinstance(value, str):
            return type(value), value
        return None

    def add(self, txn_id: Any) -> None:
        """Remember a declared txn-id under the next name."""
        key = self._key(txn_id)
        if key is not None and key not in self.names:
            self.names[key] = f"txn{len(self.names) + 1}"

    def show(self, value: Any) -> Any:
        """``value`` with every declared txn-id replaced by its name (binary ones by a binary name)."""
        key = self._key(value)
        if key is not None and key in self.names:
            return self.names[key].encode() if key[0] is bytes else self.names[key]
        if isinstance(value, dict):
            return {k: self.show(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.show(v) for v in value]
        return value


def sent_after_detach(peer: ScriptedPeer, attach: Frame, since: int) -> list[str]:
    """Performatives the broker sent on the link of its ``attach`` (its channel and handle) after its detach
    (there must be none); a later link on another session may reuse the handle."""
    handle = broker_handle(attach)
    frames = [f for f in peer.frames[since:]
              if f.direction == "in" and f.channel == attach.channel and f.fields.get("handle") == handle]
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
    and for ``ack``: ``delivery_tag``, ``broker_disposition`` (its answer to our unsettled accepted) and
    ``broker_disposition_covers`` (the messages its range names);
    for a second subscription: ``first_subscriber`` ("attached" or "detached"); with ``resubscribe``,
    ``resubscribed``: whether a new subscriber of the node on the same connection (on a new session),
    attached after the broker's detach, stays "attached" or is "detached". A refused subscription's link is
    first detached by the peer too, answering the broker's detach (2.6.6), before the new subscriber attaches;
    it is attached with no credit, so that no flow of ours crosses the broker's error detach (input for a
    link detached with an error may end the session, 2.8.16) and our detach reaches the broker. After a
    failed ACK the peer leaves that detach unanswered.
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
    receiver, attach = setup_step("attach subscriber", peer.attach_receiver, session, ctx.node,
                                  rcv_settle_mode=given["rcv_settle_mode"], durable=given["durable"],
                                  name=f"sub-{uuid.uuid4().hex[:8]}", credit=0 if given["resubscribe"] else 10,
                                  filter=filters)
    handle = broker_handle(attach)
    peer.pump(lambda: link_fate(peer, handle, since) is not None, ctx.wait_for("detach"), session)
    peer.pump(timeout=ctx.quiet, on=session)  # absence: nothing may be delivered on a link whose subscription failed
    observed["detach"] = link_fate(peer, handle, since)
    observed["delivered_after"] = delivered_on(peer, handle, since)
    if first is not None:
        observed["first_subscriber"] = "detached" if link_fate(peer, first_handle, since) else "attached"
    if given["resubscribe"] and observed["detach"] is not None:
        receiver.close()  # the peer's detach answering the broker's: both ends of the refused link are gone
        peer.pump(timeout=0)
        observed["resubscribed"] = _resubscribe(ctx, peer)
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
    observed["broker_disposition_covers"] = disposition_covers(peer, answer)
    if answer is not None and answer.fields.get("settled"):
        first.delivery.settle()
    receiver.flow(1)  # credit for m2: a link that stayed attached would deliver it
    peer.pump(lambda: link_fate(peer, handle, since) is not None, ctx.wait_for("detach"), session)
    peer.pump(timeout=ctx.quiet, on=receiver)
    observed["detach"] = link_fate(peer, handle, since)
    observed["delivered_after"] = delivered_on(peer, handle, since)
    if given["resubscribe"]:
        observed["resubscribed"] = _resubscribe(ctx, peer)
    return observed


def _resubscribe(ctx: CaseContext, peer: ScriptedPeer) -> str:
    """Attach a new (non-durable) subscriber of the node on ``peer``'s connection, on a new session: whether
    it stays "attached" or the broker "detached" it. A row expecting "attached" expects no frame, so the
    watch is the quiet time after the broker's attach (a detach of the new link answers its attach); else
    the case's time-out."""
    session = setup_step("begin a second session", peer.begin)
    since = peer.mark()
    _, attach = setup_step("attach a new subscriber", peer.attach_receiver, session, ctx.node,
                           name=f"sub-{uuid.uuid4().hex[:8]}", credit=0)
    new_handle = broker_handle(attach)
    peer.pump(lambda: link_fate(peer, new_handle, since) is not None,
              ctx.wait_for("resubscribed", when_nothing_comes="attached"), session)
    return "detached" if link_fate(peer, new_handle, since) else "attached"


# -- um.rejected.publish and um.transactions.publish ----------------------------------------------------


def run_um_publish(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The peer publishes ``transfers`` (in a transaction when ``transactional``; with header durable=true
    when ``durable_header``), the admin having provoked
    ``provocation`` after the attach (and relieved it after the first answer when ``relieve``). Observes:

    ``declared`` (the coordinator's answer to declare), ``dispositions`` (per transfer) and
    ``dispositions_cover`` (per transfer, the messages that disposition's range names), ``detach`` (the
    broker's detach of the publisher link), ``after_detach`` (what the broker sent on that link after its
    detach), ``visible_before_discharge`` (what a consumer gets before the discharge), ``discharge`` (the
    answer to discharge: of the declared txn-id, or with ``discharge_id = "never-declared"`` of an id the
    broker never declared), ``second_discharge`` (with ``discharge_again``, the answer to discharging the same
    txn-id a second time) and ``stored`` (what a consumer of the node gets at the end). ``discharge`` says
    how the transaction ends: ``commit``, ``rollback``, ``commit-unset`` (the fail field left out) or
    ``close`` (the publisher's connection closes with no discharge). ``descriptors = "symbolic"`` sends
    declare and discharge with their symbolic descriptors; ``txn = "undeclared"`` (``"null"``) makes the
    transactional transfers name a txn-id the broker never declared (a null txn-id);
    ``coordinator_last = "non-control"`` ends the case by sending the coordinator a message whose body is
    neither declare nor discharge, ``coordinator_answer`` being the broker's disposition of it. ``bystander``
    attaches a second publisher to the node on the same session, after the first (so the two links differ
    only by handle), and once the first link's fate is known sends ``b1`` on it: ``bystander`` is the
    broker's disposition of b1 (what befell the first link must not touch it). ``reattach``: once the
    broker has detached the first link, the peer answers the detach and, on the same connection (a new session),
    attaches a link of the same name and sends ``r1`` with the first transfer's delivery-tag: ``reattached``
    is the broker's disposition of r1 (a new link, and a tag free again once its delivery was settled, 2.6.12).
    ``many_transactions`` first runs empty transactions on the coordinator link (:func:`_many_transactions`):
    ``many_transactions`` is what became of them. ``control_link`` other than ``kept`` ends the control link
    before the discharge, which then goes over another: ``link-closed`` closes it on a live session, beside a
    second coordinator link with a transaction of its own holding ``m2`` (:func:`_close_control_link`;
    ``other_discharge`` is the answer to committing that one after the discharge), ``connection-closed``
    closes the connection and discharges over a second one.
    """
    observed: dict[str, Any] = {}
    names = TxnNames()
    symbolic = given["descriptors"] == "symbolic"
    peer, session = open_session(ctx, "publisher")
    coordinator, coordinator_attach = None, None
    txn_id = b""
    if given["transactional"]:
        coordinator, coordinator_attach = setup_step("attach coordinator", attach_coordinator, peer, session)
        if given["many_transactions"]:
            observed["many_transactions"] = many = _many_transactions(ctx, peer, coordinator, symbolic)
            if many["stalled"] is not None:
                return observed  # the coordinator stalled: what the row does after it cannot be judged
        declared, frame = setup_step("declare", declare, peer, coordinator, ctx.timeout, symbolic=symbolic)
        names.add(declared)
        txn_id = declared if declared is not None else b"(none declared)"
        if given["txn"] != "declared":  # the transfers name a transaction the broker never declared, or none
            txn_id = TXN_NAMED[given["txn"]]
        observed["declared"] = names.show(disposition_seen(frame))
    sender, attach = setup_step("attach publisher", peer.attach_sender, session, ctx.node,
                                snd_settle_mode=given["snd_settle_mode"])
    handle = broker_handle(attach)
    bystander = setup_step("attach the bystander publisher", peer.attach_sender, session, ctx.node)[0] \
        if given["bystander"] else None
    attached_at = peer.mark()
    _provoke(ctx, given["provocation"])
    expected = ctx.expected.get("dispositions")
    dispositions: list[Any] = []
    covers: list[Any] = []
    sent: dict[int, str] = {}
    for index, kind in enumerate(given["transfers"]):
        body = f"m{index + 1}"
        message = Message(body=body, durable=True) if given["durable_header"] else None  # header durable=true
        since = peer.mark()
        if link_fate(peer, handle, attached_at) is not None:
            dispositions.append(None)
            covers.append(None)
            continue
        if kind == "partial":
            delivery_id = send_in_two_frames(ctx, peer, sender, body, f"p{index + 1}".encode(), since,
                                             finish=lambda: link_fate(peer, handle, attached_at) is None)
        elif kind == "partial-settled":
            delivery_id = send_settled_in_frames(peer, sender, body, message)
        elif given["transactional"]:
            _, transfer = setup_step(f"send {body} in the transaction", send_transactional, peer, sender, body,
                                     txn_id, settled=(kind == "settled"), message=message)
            delivery_id = transfer.fields["delivery-id"]
        else:
            _, transfer = setup_step(f"send {body}", peer.send, sender, body, settled=(kind == "settled"),
                                     message=message)
            delivery_id = transfer.fields["delivery-id"]
        wants = expected[index] if isinstance(expected, list) and index < len(expected) else None
        wait = ctx.quiet if expects_nothing(wants) else ctx.timeout
        sent[delivery_id] = body
        answer = peer.wait_for_disposition(delivery_id, since, wait, role="receiver")
        dispositions.append(names.show(disposition_seen(answer)))
        covers.append(disposition_covers(peer, answer, "out", sent))
        if index == 0 and given["relieve"]:
            ctx.admin.relieve(given["provocation"], ctx.node)
    observed["dispositions"] = dispositions
    observed["dispositions_cover"] = covers
    peer.pump(lambda: link_fate(peer, handle, attached_at) is not None, ctx.wait_for("detach"), session)
    observed["detach"] = link_fate(peer, handle, attached_at)
    if bystander is not None:
        since = peer.mark()
        _, transfer = setup_step("send b1 on the bystander link", peer.send, bystander, "b1")
        observed["bystander"] = disposition_seen(
            peer.wait_for_disposition(transfer.fields["delivery-id"], since, ctx.timeout, role="receiver"))
    if given["reattach"] and observed["detach"] is not None:
        first = peer.find("transfer", attached_at, direction="out", handle=peer.handle_of(sender))
        observed["reattached"] = _reattach_and_send(ctx, peer, sender, first.fields["delivery-tag"] if first else None)
    if coordinator is not None and given["discharge"] != "none":
        # not watched: the store after the discharge is, and a late store shows there (the row's watch is paid once)
        observed["visible_before_discharge"] = remaining_on_node(ctx, watch=False)
        if given["discharge"] == "close":
            peer.close()  # the connection ends with the transaction neither committed nor rolled back
        else:
            controller, other_txn = peer, None
            if given["control_link"] == "link-closed":
                coordinator, other_txn = _close_control_link(ctx, peer, session, coordinator, coordinator_attach,
                                                             sender, names)
            elif given["control_link"] == "connection-closed":
                peer.close()  # its control link goes with it
                controller, second_session = open_session(ctx, "second controller")
                coordinator, _ = setup_step("attach a coordinator", attach_coordinator, controller, second_session)
            target = txn_id if given["discharge_id"] == "declared" else \
                f"never-declared-{uuid.uuid4().hex[:8]}".encode()
            fail = DISCHARGE_FAIL[given["discharge"]]
            frame = setup_step("discharge", discharge, controller, coordinator, target, fail, ctx.timeout,
                               symbolic=symbolic)
            observed["discharge"] = names.show(disposition_seen(frame))
            if given["discharge_again"]:  # the same txn-id once more: that transaction is over (4.3)
                frame = setup_step("discharge again", discharge, controller, coordinator, target, fail, ctx.timeout,
                                   symbolic=symbolic)
                observed["second_discharge"] = names.show(disposition_seen(frame))
            if other_txn is not None:  # the transaction of the control link that stayed: untouched (4.1)
                frame = setup_step("commit the second transaction", discharge, controller, coordinator, other_txn,
                                   False, ctx.timeout, symbolic=symbolic)
                observed["other_discharge"] = names.show(disposition_seen(frame))
    observed["stored"] = remaining_on_node(ctx)  # takes the quiet time: also the watch after the detach
    observed["after_detach"] = sent_after_detach(peer, attach, attached_at)
    if coordinator is not None and given["coordinator_last"] == "non-control":
        since = peer.mark()
        _, transfer = setup_step("send a non-control message to the coordinator", peer.send, coordinator,
                                 NON_CONTROL_BODY)
        observed["coordinator_answer"] = disposition_seen(
            peer.wait_for_disposition(transfer.fields["delivery-id"], since, ctx.timeout, role="receiver"))
    return observed


def _close_control_link(ctx: CaseContext, peer: ScriptedPeer, session: Session, coordinator: Sender,
                        coordinator_attach: Frame, publisher: Sender, names: TxnNames) -> tuple[Sender, bytes]:
    """With the transaction of ``coordinator`` open, attach a second coordinator link on ``session``, declare
    a transaction there (shown as ``txn2``) and publish ``m2`` in it on ``publisher``, then close the first
    coordinator link (detach, closed=true) and await the broker's detach on the handle of its attach
    (``coordinator_attach``). Returns the second coordinator and
    its txn-id: closing a control link rolls back the transactions it declared, not another's (AMQP 1.0 4.1)."""
    second, _ = setup_step("attach a second coordinator", attach_coordinator, peer, session)
    other_txn, frame = setup_step("declare on the second coordinator", declare, peer, second, ctx.timeout)
    if other_txn is None:
        raise SetupFailed(f"set-up step 'declare on the second coordinator': the broker answered "
                          f"{disposition_seen(frame)}")
    names.add(other_txn)
    since = peer.mark()
    _, transfer = setup_step("send m2 in the second transaction", send_transactional, peer, publisher, "m2",
                             other_txn)
    if peer.wait_for_disposition(transfer.fields["delivery-id"], since, ctx.timeout, role="receiver") is None:
        raise SetupFailed("set-up step 'send m2 in the second transaction': the broker did not answer it")
    since = peer.mark()
    coordinator.close()  # detach, closed=true
    setup_step("the broker's detach of the closed coordinator link", peer.expect, "detach", since,
               handle=broker_handle(coordinator_attach))
    return second, other_txn


MANY_TRANSACTIONS_CAP = 1000  # transactions at most: 2,000 control messages


def _many_transactions(ctx: CaseContext, peer: ScriptedPeer, coordinator: Sender, symbolic: bool) -> dict[str, Any]:
    """Declare and commit empty transactions one after another on ``coordinator``, each control message sent
    once the last is answered, until one control message more than the credit the broker first granted the
    link has gone (at most :data:`MANY_TRANSACTIONS_CAP` transactions): a coordinator must keep granting credit
    (2.6.7) and answering (4.2, 4.3). Returns ``initial_credit``, ``control_messages`` (sent) and ``stalled``
    (None, or where it stopped: no credit for a control message, no answer to it, or an answer that is not
    ``declared`` or ``accepted``). A broker that stalls costs one time-out."""
    setup_step("wait for the coordinator's credit", peer.wait_for_credit, coordinator)
    initial = coordinator.credit
    sent, txn_id = 0, None

    def outcome(stalled: str | None) -> dict[str, Any]:
        return {"initial_credit": initial, "control_messages": sent, "stalled": stalled}

    # whole transactions only: a declare is sent while no more than the first credit has gone
    while sent < 2 * MANY_TRANSACTIONS_CAP and not (sent % 2 == 0 and sent > initial):
        control = "declare" if sent % 2 == 0 else "discharge"
        if not peer.pump(lambda: coordinator.credit > 0, ctx.timeout):
            return outcome(f"no credit for control message {sent + 1}")
        try:
            if control == "declare":
                txn_id, frame = declare(peer, coordinator, ctx.timeout, symbolic=symbolic)
            else:
                frame = discharge(peer, coordinator, txn_id, False, ctx.timeout, symbolic=symbolic)
        except (ExpectationFailed, PeerError) as exc:  # our control message could not go out
            summary = exc.summary if isinstance(exc, ExpectationFailed) else str(exc)
            return outcome(f"{control} (control message {sent + 1}) not sent: {summary}")
        sent += 1
        state = (frame.fields.get("state") or {}).get("@type") if frame is not None else None
        if state != ("declared" if control == "declare" else "accepted"):
            return outcome(f"{control} (control message {sent}) answered {state or 'nothing'}")
    return outcome(None)


def _reattach_and_send(ctx: CaseContext, peer: ScriptedPeer, sender: Sender, tag: bytes | None) -> dict | None:
    """Answer the broker's detach of ``sender``, attach a link of its name on a new session (proton's session
    still holds the old one's name) and send ``r1`` with ``tag``: the broker's disposition of r1."""
    since = peer.mark()
    sender.close()
    setup_step("answer the broker's detach", peer.expect, "detach", since, direction="out")
    session = setup_step("begin a second session", peer.begin)
    again, _ = setup_step("re-attach the publisher", peer.attach_sender, session, ctx.node, name=sender.name)
    since = peer.mark()
    _, transfer = setup_step("send r1 on the re-attached link", peer.send, again, "r1", tag=tag)
    return disposition_seen(peer.wait_for_disposition(transfer.fields["delivery-id"], since, ctx.timeout,
                                                      role="receiver"))


# -- um.transactions.subscribe --------------------------------------------------------------------------


def run_txn_acquire(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """A durable subscriber disposes of m1 with ``transactional-state`` (txn-id, accepted), then discharges
    (``commit`` or ``rollback``). Observes ``declared``, ``delivery_tag``, ``broker_disposition`` (an
    answer to the transactional disposition before the discharge), ``discharge``, and ``remaining``
    (what the durable subscriber gets when it re-attaches after the discharge). m1 is published with a
    header (durable, priority), a message annotation, a message-id and an application property:
    ``first_delivery`` is its sections as first delivered, ``redelivered`` as delivered again after the
    re-attach (None when it does not come back), both decoded from the transfer with types kept.
    ``outcome`` is the outcome inside the transactional state (accepted, released, modified);
    ``descriptors = "symbolic"`` sends declare, discharge and that outcome with their symbolic descriptors;
    ``txn = "undeclared"`` (``"null"``) makes the transactional disposition name a txn-id the broker never
    declared (a null txn-id), the declared transaction being discharged all the same; ``detach_first``
    detaches the subscriber before the discharge."""
    observed: dict[str, Any] = {}
    names = TxnNames()
    symbolic = given["descriptors"] == "symbolic"
    peer, session = open_session(ctx, "subscriber")
    name = f"sub-{uuid.uuid4().hex[:8]}"
    options = {"name": name, "rcv_settle_mode": given["rcv_settle_mode"], "durable": given["durable"]}
    receiver, attach = setup_step("attach durable subscriber", peer.attach_receiver, session, ctx.node, **options)
    handle = broker_handle(attach)
    publish_setup(ctx, peer, session, ["m1", "m2"], messages={"m1": full_message("m1")})
    coordinator, _ = setup_step("attach coordinator", attach_coordinator, peer, session)
    txn_id, frame = setup_step("declare", declare, peer, coordinator, ctx.timeout, symbolic=symbolic)
    names.add(txn_id)
    observed["declared"] = names.show(disposition_seen(frame))
    if txn_id is None:
        raise SetupFailed("set-up step 'declare': the broker declared no transaction")
    since = peer.mark()
    receiver.flow(1)
    first = setup_step("receive m1", peer.receive, receiver, since)
    observed["delivery_tag"] = first.transfer.fields.get("delivery-tag")
    observed["first_delivery"] = message_sections(first.payload)
    since = peer.mark()
    disposed_at = since
    named = TXN_NAMED[given["txn"]] if given["txn"] != "declared" else txn_id
    setup_step("transactional disposition", dispose_transactional, peer, first.delivery, named, given["outcome"],
               symbolic=symbolic)
    answer = peer.wait_for_disposition(first.delivery_id, since, ctx.wait_for("broker_disposition"), role="sender")
    observed["broker_disposition"] = names.show(disposition_seen(answer))
    detached = False
    if given["detach_first"]:  # the subscriber's link goes before the transaction is discharged
        since = peer.mark()
        receiver.detach()
        setup_step("detach durable subscriber", peer.expect, "detach", since, handle=handle)
        detached = True
    frame = setup_step("discharge", discharge, peer, coordinator, txn_id, given["discharge"] == "rollback",
                       ctx.timeout, symbolic=symbolic)
    observed["discharge"] = names.show(disposition_seen(frame))
    since = peer.mark()
    if not detached:
        receiver.detach()
        if link_fate(peer, handle, disposed_at) is None:
            setup_step("detach durable subscriber", peer.expect, "detach", since, handle=handle)
        else:  # the broker detached the link itself: proton's session still holds its name, so use a new one
            session = setup_step("begin a second session", peer.begin)
    receiver, _ = setup_step("re-attach durable subscriber", peer.attach_receiver, session, ctx.node, credit=20,
                             **options)
    with peer.watching(ctx.watch):  # the row's bounded watch (Case.watch): a late redelivery is seen too
        remaining = collect_with_sections(ctx, peer, receiver)
    observed["remaining"] = [body for body, _ in remaining]
    observed["redelivered"] = next((sections for body, sections in remaining if body == "m1"), None)
    receiver.close()
    return observed


def full_message(body: str) -> Message:
    """A message with every part a redelivery must keep: header durable=true (and priority 7), a message
    annotation, a message-id and an application property; the body is ``body``."""
    return Message(body=body, durable=True, priority=7, annotations={symbol("x-opt-conformance"): body},
                   id=f"id-{body}", properties={"color": "red"})


def collect_with_sections(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver) -> list[tuple[Any, dict]]:
    """Like :func:`collect` (accept and settle all that arrives before the quiet time), with each message's
    sections as its transfer carried them (:func:`message_sections`: AMQP types kept)."""
    return [(body_of(received.message), message_sections(received.payload))
            for received in each_received(ctx, peer, receiver)]
