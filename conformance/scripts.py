"""Scenario scripts: each drives scripted peers through one kind of exchange and returns observations.

Observations are plain decoded data keyed by the names the case tables use. A script never compares
them with the row; :mod:`amqp_conformance.fixtures.verdict` does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

from amqp_conformance.peers.frames import Frame, described, encode_frame
from amqp_conformance.peers.peer import ExpectationFailed, ScriptedPeer
from amqp_conformance.peers.sequence import MODULUS, span, span_length
from amqp_conformance.peers.transfers import deliveries, payload_of
from proton import Message, Receiver, Sender, Session, uint

from .context import CaseContext, NotApplicable, SetupFailed, expects_nothing, open_session, setup_step


def body_of(frame_or_message: Message) -> Any:
    """A message's body, as the tables name messages ("m1", "m2", ...)."""
    return frame_or_message.body


def deliveries_on(peer: ScriptedPeer, handle: int | None, since: int) -> list[list[Frame]]:
    """The transfers of each delivery the broker sent on its link ``handle`` (:func:`broker_handle`) after ``since``,
    a list a delivery (:func:`~amqp_conformance.peers.transfers.deliveries`: a message may come in several)."""
    return [transfers for transfers in deliveries(peer.frames[since:], "in")
            if transfers[0].fields.get("handle") == handle]


def delivered_on(peer: ScriptedPeer, handle: int | None, since: int) -> list[Any]:
    """The bodies of the messages the broker delivered on its link ``handle`` after ``since``, each decoded by
    proton from all of its delivery's transfers; ``"(aborted)"`` for a delivery a transfer aborted (AMQP 1.0 2.7.5:
    its data is discarded), ``"(partial)"`` for one not (yet) whole."""
    bodies = []
    for transfers in deliveries_on(peer, handle, since):
        if any(transfer.fields.get("aborted") for transfer in transfers):
            bodies.append("(aborted)")
            continue
        message = Message()
        try:
            message.decode(payload_of(transfers))
            bodies.append(body_of(message))
        except Exception:  # its last transfer said more: no whole message
            bodies.append("(partial)")
    return bodies


def disposition_seen(frame: Frame | None) -> dict | None:
    """The judged part of a disposition: its role, range, settled flag and state."""
    if frame is None:
        return None
    return {key: frame.fields.get(key) for key in ("role", "first", "last", "settled", "state")}


def disposition_covers(peer: ScriptedPeer, frame: Frame | None, direction: str = "in",
                       known: dict[int, str] | None = None) -> list[Any] | None:
    """The messages a disposition's range (first..last, last absent = first) names, in delivery-id order.

    ``direction`` is that of the transfers the range refers to: "in" for the broker's own transfers (its
    answer as sender), "out" for ours (its answer as receiver). Each delivery-id the session carried
    shows as its message's body ("m1"), or as ``known`` names it (the script that sent a delivery, a partial
    one too, knows which message it is); an id no transfer carried shows as ``"delivery-id N"`` (at most 8
    are listed, then ``"... N more"``). None when there is no disposition.
    """
    if frame is None:
        return None
    first, last = frame.fields.get("first"), frame.fields.get("last")
    if not isinstance(first, int):
        return [f"first {first!r}"]
    last = first if last is None else last
    payloads: dict[int, bytes] = {}
    for transfers in deliveries(peer.frames, direction):
        delivery_id = transfers[0].fields.get("delivery-id")
        if delivery_id is None or (direction == "in" and transfers[0].channel != frame.channel):
            continue
        payloads[delivery_id] = payload_of(transfers)
    bodies: dict[int, Any] = {}
    for delivery_id, payload in payloads.items():
        message = Message()
        try:
            message.decode(payload)
            body = body_of(message)
            bodies[delivery_id] = body if isinstance(body, str) else f"delivery-id {delivery_id} (control)"
        except Exception:  # not (yet) a whole message: a multi-frame delivery cut short
            bodies[delivery_id] = f"delivery-id {delivery_id} (partial)"
    if not span_length(first, last):
        return [f"first {first} > last {last}"]
    bodies.update(known or {})
    covered = [bodies.get(i, f"delivery-id {i}") for i in span(first, last, limit=8)]
    if span_length(first, last) > 8:
        covered.append(f"... {span_length(first, last) - 8} more")
    return covered


def frame_body_hex(frame: Frame | None) -> str | None:
    """The performative's bytes (frame body after the header and extended header), hex."""
    if frame is None:
        return None
    return frame.raw[frame.raw[4] * 4:].hex()


def publish_setup(ctx: CaseContext, peer: ScriptedPeer, session: Session, bodies: list[str],
                  messages: dict[str, Message] | None = None) -> None:
    """Set-up: publish ``bodies`` unsettled to the case's node and require each to be accepted; a body
    named in ``messages`` is sent as that whole message (header, annotations, properties)."""
    sender, _ = setup_step("attach publisher", peer.attach_sender, session, ctx.node)
    for body in bodies:
        _, transfer = setup_step(f"publish {body}", peer.send, sender, body, message=(messages or {}).get(body))
        frame = peer.wait_for_disposition(transfer.fields["delivery-id"], 0, ctx.timeout, role="receiver")
        state = (frame.fields.get("state") or {}).get("@type") if frame else None
        if state != "accepted":
            raise SetupFailed(f"set-up step 'publish {body}': the broker answered {state or 'nothing'}, not accepted")
    sender.close()


def each_received(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver) -> Iterator[Any]:
    """Every message that arrives before the quiet time passes, one at a time; each is accepted and settled
    once the caller has read it.

    With the profile's ``absence_barrier = "drain"`` and no bounded watch on the peer, the end is proved
    instead of waited for: :func:`drained`."""
    if ctx.barrier == "drain" and not peer.min_watch:
        yield from drained(ctx, peer, receiver)
        return
    while True:
        try:
            received = peer.receive(receiver, peer.mark(), timeout=ctx.quiet)
        except ExpectationFailed:
            return
        yield received
        peer.dispose(received.delivery, "accepted", settle=True)


DRAIN_CREDIT = 20  # messages asked for in one drain round


def drained(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver) -> Iterator[Any]:
    """Every message the broker has for ``receiver`` now, proved complete by drain (2.6.7): asked to drain, a
    sender sends what it has, then advances its delivery-count to use up the credit left. The proof is a round
    that brings nothing: a round that brought any message asks again, because a broker may answer a drain
    before a message it holds (ActiveMQ Artemis 2.40.0 does, 5 probes in 16, right after streaming a large
    message: docs/brokers.md), and one more round costs a round trip where trusting it would cost a message.
    A broker that leaves the drain unanswered costs the time-out, and what arrived by then is what it had.
    Each message is accepted and settled once the caller has read it."""
    def next_or_drained() -> bool:
        current = receiver.current
        if current is not None and current.partial:
            return False  # a message whose last frames are still coming (its first used the credit)
        return (current is not None and current.readable) or receiver.credit == 0

    receiver.drain(max(0, DRAIN_CREDIT - receiver.credit))  # the credit already granted, topped up, drain set
    while True:
        got = 0
        while True:
            peer.pump(next_or_drained, ctx.timeout, receiver)
            current = receiver.current
            if current is None or not current.readable or current.partial:
                break  # the credit is used up (drained), or the broker left the drain unanswered
            received = peer.receive(receiver, peer.mark(), timeout=0)
            got += 1
            yield received
            peer.dispose(received.delivery, "accepted", settle=True)
        if receiver.credit or not got:
            return  # left unanswered (what came is what it had), or drained with nothing sent: the node is empty
        receiver.drain(DRAIN_CREDIT)


def collect(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver) -> list[Any]:
    """Receive (accept and settle) every message that arrives before the quiet time passes; their bodies."""
    return [body_of(received.message) for received in each_received(ctx, peer, receiver)]


def inspect_node(ctx: CaseContext, seen: Callable[[Any], Any], watch: bool = True) -> list[Any]:
    """``seen(received)`` of each message a fresh, non-durable consumer of the case's node receives now (the
    messages still stored); it watches for at least the row's ``watch`` seconds, so a message put back late
    is seen too (``watch=False``: an inspection a later, watched one of the same case follows)."""
    min_watch = ctx.watch if watch else 0.0  # the row's bounded watch, by the clock
    peer, session = open_session(ctx, "inspector", min_watch=min_watch)
    receiver, _ = setup_step("attach inspector", peer.attach_receiver, session, ctx.node, credit=20)
    found = [seen(received) for received in each_received(ctx, peer, receiver)]
    peer.close()
    return found


def remaining_on_node(ctx: CaseContext, watch: bool = True) -> list[Any]:
    """The bodies of the messages still stored on the case's node (:func:`inspect_node`)."""
    return inspect_node(ctx, lambda received: body_of(received.message), watch)


def send_in_two_frames(ctx: CaseContext, peer: ScriptedPeer, sender: Sender, body: str, tag: bytes, since: int,
                       finish: Callable[[], bool] = lambda: True) -> int:
    """Send ``body`` as a partial delivery: its first half with ``more=true``, a quiet pause (a broker may
    answer the first part at once), then the rest when ``finish()`` still says so. Returns the delivery-id."""
    encoded = Message(body=body).encode()
    setup_step("send first part", peer.send_partial, sender, encoded[: len(encoded) // 2], tag)
    peer.pump(timeout=ctx.quiet)
    delivery_id = peer.find("transfer", since, direction="out", delivery_tag=tag).fields["delivery-id"]
    if finish():
        setup_step("send last part", peer.finish_partial, sender, encoded[len(encoded) // 2:])
    return delivery_id


def send_settled_in_frames(peer: ScriptedPeer, sender: Sender, body: str, message: Message | None = None) -> int:
    """Send ``body`` as one delivery of more than one transfer frame, settled by the publisher from its first frame
    (``settled=true``, ``more=true``: AMQP 1.0 2.7.5, 2.6.14). Returns the delivery-id.

    Proton writes a delivery settled before it goes out in frames of the broker's max-frame-size, each settled,
    so the message carries an application property long enough to need two of them (its body stays ``body``).
    :class:`NotApplicable` where the broker's open states no max-frame-size: proton then writes any delivery in
    one transfer, and a pre-settled one cannot be split. :class:`SetupFailed` unless the first transfer went out
    settled with ``more=true``."""
    limit = peer.broker_max_frame_size()
    if limit is None:
        raise NotApplicable("the broker's open states no max-frame-size (AMQP 1.0 2.7.1: no limit), so proton writes "
                            "a pre-settled delivery in one transfer: the row needs one settled from the first of "
                            "several transfer frames")
    padded = message or Message(body=body)
    padded.properties = {**(padded.properties or {}), "padding": "p" * int(limit)}
    _, transfer = setup_step(f"send {body} settled, in several transfer frames", peer.send, sender, body, settled=True,
                             message=padded)
    if not (transfer.fields.get("settled") and transfer.fields.get("more")):
        raise SetupFailed(f"set-up step 'send {body} settled, in several transfer frames' failed: its first transfer "
                          f"went out with settled={transfer.fields.get('settled')} more={transfer.fields.get('more')}")
    return transfer.fields["delivery-id"]


def flow_seen(frame: Frame | None, initial: int) -> dict[str, Any] | None:
    """The broker's flow state for our link: its fields as typed on the wire, ``advance``: how far its
    delivery-count moved from the attach's initial-delivery-count, and ``limit``: advance + link-credit, the
    delivery-limit, which only the receiver moves (2.6.7); None when it sent none."""
    if frame is None:
        return None
    fields = frame.fields
    count = fields.get("delivery-count")
    credit = fields.get("link-credit")
    advance = (count - initial) % MODULUS if isinstance(count, int) else None
    limit = advance + credit if advance is not None and isinstance(credit, int) else None
    return {"handle": fields.get("handle"), "link-credit": credit, "delivery-count": count, "advance": advance,
            "limit": limit, "drain": fields.get("drain")}


def broker_handle(attach: Frame) -> int | None:
    """The handle the broker chose for a link (its attach): the handle of its flows, transfers and detach on
    that link. 2.6.2 leaves the choice to the broker, so it need not be the handle we chose."""
    return attach.fields.get("handle")


def link_fate(peer: ScriptedPeer, handle: int | None, since: int) -> dict | None:
    """The broker's detach on ``handle`` (the broker's: :func:`broker_handle`) after ``since`` as {closed, error},
    or None while attached."""
    frame = peer.find("detach", since, handle=handle)
    if frame is None:
        return None
    return {"closed": frame.fields.get("closed"), "error": frame.fields.get("error")}


# -- um.accepted.subscribe -----------------------------------------------------------------------------


def run_subscribe(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The broker sends; the peer disposes of the first message as the row says. Observes:

    ``subscribed`` (the broker's attach names the node), ``delivery_tag``, ``broker_disposition`` (its
    answer to our disposition, or nothing) and ``broker_disposition_covers`` (the messages its range
    names), ``link`` (what the next credit brings: "advanced" to the next
    message, "redelivered", "stalled", "detached"), ``detach`` and ``remaining`` (what a re-attached
    subscriber, the same durable one or a fresh one, receives afterwards; it watches for at least the
    row's ``watch`` seconds by the clock, so an event put back late is seen too).
    ``durable_end = "close"``: the durable subscriber closes its link (detach closed=true) instead of
    detaching it; m3 is published while no link of its name is attached, the link of the same name and
    durability attached again, and m4 published after that attach, before ``remaining`` is collected.
    """
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "subscriber")
    name = f"sub-{uuid.uuid4().hex[:8]}"
    durable = given["durable"]
    receiver, attach = setup_step("attach subscriber", peer.attach_receiver, session, ctx.node, name=name,
                                  rcv_settle_mode=given["rcv_settle_mode"], durable=durable)
    source = attach.fields.get("source")
    observed["subscribed"] = isinstance(source, dict) and source.get("address") == ctx.node
    handle = broker_handle(attach)
    attached_at = peer.mark()
    publish_setup(ctx, peer, session, ["m1", "m2"])

    since = peer.mark()
    receiver.flow(1)
    first = setup_step("receive m1", peer.receive, receiver, since)
    observed["delivery_tag"] = first.transfer.fields.get("delivery-tag")

    since = peer.mark()
    settle = given["disposition_settled"]
    if given["disposition_state"] == "none":
        # proton cannot send a disposition without a state; raw mode writes it on our session's channel
        peer.send_raw(encode_frame(described("disposition", role=True, first=uint(first.delivery_id), settled=settle),
                                   channel=_our_channel(peer)))
    else:
        peer.dispose(first.delivery, given["disposition_state"], settle=settle)
    answer = peer.wait_for_disposition(first.delivery_id, since, ctx.wait_for("broker_disposition"), role="sender")
    observed["broker_disposition"] = disposition_seen(answer)
    observed["broker_disposition_covers"] = disposition_covers(peer, answer)
    if answer is not None and answer.fields.get("settled") and not settle:
        first.delivery.settle()  # the broker settled first: we settle second (no frame goes out)

    since = peer.mark()
    receiver.flow(1)
    try:
        following = peer.receive(receiver, since, timeout=ctx.wait_for("link"))
        body = body_of(following.message)
        observed["link"] = "advanced" if body == "m2" else "redelivered" if body == "m1" else f"delivered {body!r}"
    except ExpectationFailed:
        observed["link"] = "detached" if link_fate(peer, handle, attached_at) else "stalled"
    observed["detach"] = link_fate(peer, handle, attached_at)

    if observed["detach"] is None:
        since = peer.mark()
        if durable == "none":
            receiver.close()
            setup_step("detach subscriber", peer.expect, "detach", since, handle=handle)
            receiver, _ = setup_step("attach a new subscriber", peer.attach_receiver, session, ctx.node, credit=20)
        elif given["durable_end"] == "close":  # 2.6.6: closing destroys the link's terminus, and so the subscription
            receiver.close()
            setup_step("close durable subscriber", peer.expect, "detach", since, handle=handle)
            publish_setup(ctx, peer, session, ["m3"])
            receiver, _ = setup_step("attach durable subscriber again", peer.attach_receiver, session, ctx.node,
                                     name=name, rcv_settle_mode=given["rcv_settle_mode"], durable=durable, credit=20)
            publish_setup(ctx, peer, session, ["m4"])
        else:
            receiver.detach()
            setup_step("detach durable subscriber", peer.expect, "detach", since, handle=handle)
            receiver, _ = setup_step("re-attach durable subscriber", peer.attach_receiver, session, ctx.node,
                                     name=name, rcv_settle_mode=given["rcv_settle_mode"], durable=durable, credit=20)
        with peer.watching(ctx.watch):  # the row's bounded watch (Case.watch): a late redelivery is seen too
            observed["remaining"] = collect(ctx, peer, receiver)
        receiver.close()  # closed=true: a durable subscription ends here
    return observed


def _our_channel(peer: ScriptedPeer) -> int:
    for frame in peer.frames:
        if frame.direction == "out" and frame.performative == "begin":
            return frame.channel
    raise SetupFailed("no session was begun")


# -- um.accepted.publish --------------------------------------------------------------------------------


def run_publish(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The peer sends ``transfers`` (settled, unsettled or partial, i.e. in two transfer frames). Observes:

    ``dispositions`` (per transfer, the broker's disposition or nothing), ``dispositions_cover`` (per
    transfer, the messages that disposition's range names), ``detach`` (the broker's detach of
    the link, if any) and ``stored`` (what a consumer of the node receives afterwards).
    """
    observed: dict[str, Any] = {}
    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    peer, session = open_session(ctx, "publisher")
    sender, attach = setup_step("attach publisher", peer.attach_sender, session, ctx.node,
                                snd_settle_mode=given["snd_settle_mode"])
    handle = broker_handle(attach)
    attached_at = peer.mark()
    expected = ctx.expected.get("dispositions")
    dispositions: list[Any] = []
    covers: list[Any] = []
    sent: dict[int, str] = {}
    for index, kind in enumerate(given["transfers"]):
        body = f"m{index + 1}"
        since = peer.mark()
        if link_fate(peer, handle, attached_at) is not None:
            dispositions.append(None)
            covers.append(None)
            continue
        if kind == "partial":
            delivery_id = send_in_two_frames(ctx, peer, sender, body, f"p{index + 1}".encode(), since)
        elif kind == "partial-settled":
            delivery_id = send_settled_in_frames(peer, sender, body)
        else:
            _, transfer = setup_step(f"send {body}", peer.send, sender, body, settled=(kind == "settled"))
            delivery_id = transfer.fields["delivery-id"]
        wants = expected[index] if isinstance(expected, list) and index < len(expected) else None
        wait = ctx.quiet if expects_nothing(wants) else ctx.timeout
        sent[delivery_id] = body
        answer = peer.wait_for_disposition(delivery_id, since, wait, role="receiver")
        dispositions.append(disposition_seen(answer))
        covers.append(disposition_covers(peer, answer, "out", sent))
    observed["dispositions"] = dispositions
    observed["dispositions_cover"] = covers
    peer.pump(timeout=0)
    observed["detach"] = link_fate(peer, handle, attached_at)
    observed["stored"] = remaining_on_node(ctx)
    return observed


# -- wire.disposition -----------------------------------------------------------------------------------


def run_wire_disposition(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """On a fresh session, the broker accepts our first transfer and we accept its first transfer.

    Observes the broker's disposition (decoded, and its bytes) and the bytes of our own peer's.
    """
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "wire")
    sender, _ = setup_step("attach publisher", peer.attach_sender, session, ctx.node)
    _, transfer = setup_step("send m1", peer.send, sender, "m1")
    answer = peer.wait_for_disposition(transfer.fields["delivery-id"], 0, ctx.timeout, role="receiver")
    observed["broker_disposition"] = disposition_seen(answer)
    observed["broker_disposition_bytes"] = frame_body_hex(answer)
    receiver, _ = setup_step("attach subscriber", peer.attach_receiver, session, ctx.node, credit=1)
    since = peer.mark()
    received = setup_step("receive m1", peer.receive, receiver, since)
    peer.dispose(received.delivery, "accepted", settle=True)
    ours = peer.find("disposition", since, direction="out")
    observed["peer_disposition_bytes"] = frame_body_hex(ours)
    return observed
