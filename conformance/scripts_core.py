"""Scripts of the core catalogue: settlement orderings, delivery states and transfers, both directions.

Three generic, data-driven scripts (a row's ``given`` says what to do; the script observes, never judges):

- :func:`run_consume`: the broker sends; the peer applies the row's outcome (any delivery state, with its
  fields, to one delivery or a range, settled or not), then watches what the broker answers and what it
  delivers next on that link and to a fresh consumer;
- :func:`run_produce`: the peer sends; the broker decides (or is told by its admin) the outcome, under the
  row's settle modes; the peer settles second where the broker settles second;
- :func:`run_transfer`: multi-frame, aborted and re-tagged deliveries, seen frame by frame on the wire.
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.peer import ExpectationFailed, ReceivedDelivery, ScriptedPeer
from amqp_conformance.peers.rawframes import RawContext, frame_bytes
from amqp_conformance.peers.sequence import in_span, span_length
from proton import Condition, Delivery, Message, Receiver, Sender, symbol

from .context import CaseContext, NotApplicable, SetupFailed, open_session, setup_step
from .scripts import _our_channel, broker_handle, delivered_on, flow_seen, inspect_node, link_fate, remaining_on_node
from .sections import message_fields

OUTCOMES = ("accepted", "rejected", "released", "modified", "received", "none")
ORIGINAL_ANNOTATIONS = {symbol("x-opt-origin"): "publisher", symbol("x-opt-batch"): "b1"}
LATER_CREDIT = 5  # credit given after the next message, to look for one the link must not get again
ORIGINAL_APPLICATION_PROPERTIES = {"colour": "red", "attempt": 1}  # 3.2.5: string keys, simple values
PROTON_STATES = {"accepted": Delivery.ACCEPTED, "rejected": Delivery.REJECTED, "released": Delivery.RELEASED,
                 "modified": Delivery.MODIFIED, "received": Delivery.RECEIVED}


def allows_nothing(pattern: Any) -> bool:
    """True when a pattern is satisfied by nothing arriving: absent, an empty list, or a @one-of offering one."""
    if pattern is None or pattern == [] or pattern == {"@present": False}:
        return True
    if isinstance(pattern, dict) and set(pattern) == {"@one-of"}:
        return any(allows_nothing(option) for option in pattern["@one-of"])
    return False


def wait_for(ctx: CaseContext, observation: str) -> float:
    """How long to watch for ``observation``: the quiet time when nothing arriving would satisfy the row,
    else the time-out (a script never waits the full time-out for a frame that may rightly never come)."""
    return ctx.quiet if allows_nothing(ctx.expected.get(observation)) else ctx.timeout


def message_seen(received: ReceivedDelivery | None) -> dict[str, Any] | None:
    """A received message as judged, typed as on the wire (:func:`.sections.message_fields`: header durable,
    first-acquirer, delivery-count, message-annotations with their keys' types, body), and whether its transfer
    came settled."""
    if received is None:
        return None
    seen = message_fields(received.payload)
    seen["settled"] = received.settled
    return seen


def disposition_seen(frame: Frame | None) -> dict | None:
    """A disposition as judged, with the specification's defaults applied (settled absent is false, 2.7.6)."""
    if frame is None:
        return None
    fields = frame.fields
    return {"role": fields.get("role"), "first": fields.get("first"), "last": fields.get("last"),
            "settled": bool(fields.get("settled")), "state": fields.get("state")}


def attach_seen(frame: Frame) -> dict[str, Any]:
    """The settle modes of the broker's attach."""
    return {"snd-settle-mode": frame.fields.get("snd-settle-mode"),
            "rcv-settle-mode": frame.fields.get("rcv-settle-mode")}


def broker_dispositions(peer: ScriptedPeer, since: int, role: str) -> list[dict]:
    """Every disposition the broker sent after ``since`` (as judged)."""
    return [disposition_seen(f) for f in peer.frames[since:]
            if f.direction == "in" and f.performative == "disposition" and f.fields.get("role") == role]


LARGE_PADDING = 256 * 1024
"""Bytes of the application property that makes a message large (``publish(large_first=True)``): more than any
max-frame-size a broker here states (32768 to 131072), so the message goes in several transfer frames both ways,
and more than ActiveMQ Artemis's amqpMinLargeMessageSize (102400), so Artemis stores and sends it as a large
message, streamed."""


def publish(ctx: CaseContext, peer: ScriptedPeer, session: Any, count: int, size: int = 0,
            durable: bool = True, name: str | None = None, first: int = 1, large_first: bool = False) -> Frame:
    """Set-up: publish m<first>..m<first + count - 1> (``durable`` in their header, with message annotations,
    a message-id ``id-m<n>`` and application-properties of their own; ``size``: bodies of that many bytes instead,
    :func:`sized_body`; ``large_first``: the first also carries an application property ``padding`` of
    :data:`LARGE_PADDING` bytes, its body unchanged) on a link named ``name`` (None: a fresh name) and require each
    accepted; the link is closed after. Returns the broker's attach of that link."""
    sender, attach = setup_step("attach publisher", peer.attach_sender, session, ctx.node, name=name)
    for index in range(first, first + count):
        body = f"m{index}" if not size else sized_body(size)
        message = published_message(index, body, durable)
        if large_first and index == first:
            message.properties = {**message.properties, "padding": "p" * LARGE_PADDING}
        _, transfer = setup_step(f"publish m{index}", peer.send, sender, None, message=message)
        frame = peer.wait_for_disposition(transfer.fields["delivery-id"], 0, ctx.timeout, role="receiver")
        state = (frame.fields.get("state") or {}).get("@type") if frame else None
        if state != "accepted":
            raise SetupFailed(f"set-up step 'publish m{index}': the broker answered {state or 'nothing'}")
    sender.close()
    return attach


def published_message(index: int, body: Any, durable: bool = True) -> Message:
    """The message :func:`publish` sends as m<index>: ``body``, ``durable`` in its header, the message annotations,
    message-id ``id-m<index>`` and application-properties every published message carries."""
    return Message(body=body, durable=durable, annotations=dict(ORIGINAL_ANNOTATIONS), id=f"id-m{index}",
                   properties=dict(ORIGINAL_APPLICATION_PROPERTIES))


def sized_body(size: int) -> str:
    """A body of ``size`` characters that repeats nothing a chunk could be mistaken for: eight-digit counts of its
    own offset, so a message split over transfers and put together with a chunk misplaced, lost or doubled is
    not the body it was (2.6.14; 004 pn_delivery_pending: all of the bytes)."""
    return "".join(f"{offset:08d}" for offset in range(0, size, 8))[:size]


def _state_spec(given: dict[str, Any]) -> dict[str, Any] | None:
    """The row's outcome as a raw-frame state (for range dispositions and dispositions with no state)."""
    outcome = given["outcome"]
    if outcome == "none":
        return None
    state: dict[str, Any] = {"@type": outcome}
    if outcome == "rejected" and given.get("condition"):
        state["error"] = {"@type": "error", "condition": given["condition"], "description": given.get("description"),
                          "info": given.get("info")}
    if outcome == "modified":
        state.update({"delivery-failed": given["delivery_failed"], "undeliverable-here": given["undeliverable_here"],
                      "message-annotations": given.get("annotations") or None})
    if outcome == "received":
        state.update({"section-number": given["section_number"], "section-offset": given["section_offset"]})
    return state


def _dispose(peer: ScriptedPeer, deliveries: list[ReceivedDelivery], given: dict[str, Any]) -> None:
    """Apply the row's outcome: through proton for one delivery, as one raw frame for a range or no state."""
    settle = given["settle"]
    if given["outcome"] == "none" or len(deliveries) > 1:
        spec = {"performative": "disposition", "fields": {
            "role": "receiver", "first": deliveries[0].delivery_id,
            "last": deliveries[-1].delivery_id if len(deliveries) > 1 else None, "settled": settle,
            "state": _state_spec(given)}}
        peer.send_raw(frame_bytes(spec, RawContext(channel=_our_channel(peer))))
        return
    delivery = deliveries[0].delivery
    outcome = given["outcome"]
    local = delivery.local
    if outcome == "rejected" and given.get("condition"):
        info = {symbol(k): v for k, v in (given.get("info") or {}).items()} or None
        local.condition = Condition(given["condition"], given.get("description"), info)
    if outcome == "modified":
        local.failed = given["delivery_failed"]
        local.undeliverable = given["undeliverable_here"]
        if given.get("annotations"):
            local.annotations = {symbol(k): v for k, v in given["annotations"].items()}
    if outcome == "received":
        local.section_number = given["section_number"]
        local.section_offset = given["section_offset"]
    delivery.update(PROTON_STATES[outcome])
    if settle:
        delivery.settle()
    peer.pump(timeout=0)


def run_consume(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The broker sends ``messages`` messages; the peer applies the row's outcome to the first ``range`` of
    them. Observes ``broker_attach``, ``transfer`` (the first message as delivered), ``sender_settle_mode`` (the
    snd-settle-mode the broker's attach stated beside whether that first transfer came settled: 2.7.3, the
    sender's value is the mode in use, so unsettled and settled each fix it), ``broker_dispositions``
    (the broker's answer, each with ``covers``: which of our disposed deliveries its range holds, by
    position, and ``strays``: how many delivery-ids in its range are not among them), ``after_accept`` (its
    answer to a later accept, when the row gives one), ``next_on_link`` (what one more credit brings on the
    same link), ``later_on_link`` (when the row names it: what more credit then brings, :func:`_later_on_link`),
    ``broker_detach`` (its answer to our closing the link), ``remaining`` (the bodies a fresh
    consumer gets once the link is closed), ``remaining_messages`` (those messages, field by field) and
    ``default_outcome`` (when the row names it: :func:`default_outcome_applied`).

    ``then = "close-link"``: the peer disposes of nothing and closes the link with the deliveries unsettled.
    ``rounds = n`` (n > 1): the outcome is given n times in all, each further time to the copy of the first
    message that one more credit brings on the same link; ``next_on_link`` is what follows the last round.
    ``interloper``: another connection opens and closes before that next credit (:func:`interlope`)."""
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "consumer")
    publish(ctx, peer, session, given["messages"], durable=given["durable"])
    receiver, attach = setup_step("attach consumer", peer.attach_receiver, session, ctx.node,
                                  rcv_settle_mode=given["rcv_settle_mode"], snd_settle_mode=given["snd_settle_mode"])
    observed["broker_attach"] = attach_seen(attach)
    handle = broker_handle(attach)
    count = max(1, given["range"])
    since = peer.mark()
    receiver.flow(count)
    deliveries = [setup_step(f"receive message {i + 1}", peer.receive, receiver, since) for i in range(count)]
    observed["transfer"] = message_seen(deliveries[0])
    observed["sender_settle_mode"] = {"stated": observed["broker_attach"]["snd-settle-mode"],
                                      "transfer-settled": deliveries[0].settled}
    if given["then"] != "close-link":
        _dispose_and_watch(ctx, peer, deliveries, given, observed)
        for _ in range(given["rounds"] - 1):
            _again(ctx, peer, receiver, given)
        if given["interloper"]:
            interlope(ctx)
        observed["next_on_link"] = _next_on_link(ctx, peer, receiver)
        if "later_on_link" in ctx.expected:
            observed["later_on_link"] = _later_on_link(ctx, peer, receiver, handle)
    since = peer.mark()
    receiver.close()
    peer.pump(lambda: peer.find("detach", since, handle=handle) is not None, ctx.timeout, receiver.session)
    observed["broker_detach"] = link_fate(peer, handle, since)
    seen = remaining_messages(ctx)
    observed["remaining_messages"] = seen
    observed["remaining"] = [m["body"] for m in seen]
    if "default_outcome" in ctx.expected:
        observed["default_outcome"] = default_outcome_applied(attach, observed)
    return observed


def default_outcome_applied(attach: Frame, observed: dict[str, Any]) -> dict[str, Any]:
    """The default-outcome the broker's attach declared for its source (3.5.3; None when it declares none) beside
    whether m1 was kept: whether it came next on the link or a fresh consumer got it after the link closed. A
    delivery settled with no state takes that outcome: accepted or rejected retire m1, released or modified give
    it back."""
    declared = (attach.fields.get("source") or {}).get("default-outcome")
    following = observed.get("next_on_link") or {}
    return {"declared": declared, "m1_kept": following.get("body") == "m1" or "m1" in observed["remaining"]}


def interlope(ctx: CaseContext) -> None:
    """Another client's connection comes and goes (open, begin, close) while the case's link holds state: what
    the broker keeps for one connection must not change when another ends."""
    other, _ = open_session(ctx, "interloper")
    other.close()


def publish_twin(ctx: CaseContext, sender: Sender, tag: bytes, given: dict[str, Any]) -> dict[str, Any]:
    """Another client (its own connection and container-id) sends ``twin``, unsettled, over a link named as
    ``sender`` with the row's settle modes and delivery-tag ``tag``: link names are unique per pair of
    containers (2.6.1) and tags per link (2.8.7), so nothing it does is ours. Returns the receiver settle mode
    of the broker's attach and its first disposition (``broker-first``); the twin then settles the delivery
    (as exactly-once asks) and closes its link."""
    other, session = open_session(ctx, "twin")
    twin, attach = setup_step("attach the twin producer", other.attach_sender, session, ctx.node, name=sender.name,
                              snd_settle_mode=given["snd_settle_mode"], rcv_settle_mode=given["rcv_settle_mode"])
    since = other.mark()
    delivery, transfer = setup_step("send twin", other.send, twin, "twin", tag=tag)
    frame = other.wait_for_disposition(transfer.fields["delivery-id"], since, ctx.timeout, role="receiver")
    delivery.settle()
    twin.close()
    other.pump(timeout=0)
    return {"rcv-settle-mode": attach_seen(attach)["rcv-settle-mode"], "broker-first": disposition_seen(frame)}


def _dispose_and_watch(ctx: CaseContext, peer: ScriptedPeer, deliveries: list[ReceivedDelivery],
                       given: dict[str, Any], observed: dict[str, Any]) -> None:
    """Apply the row's outcome and record the broker's answers (and to a later accept, if the row says)."""
    since = peer.mark()
    _dispose(peer, deliveries, given)
    peer.wait_for_disposition(deliveries[0].delivery_id, since, wait_for(ctx, "broker_dispositions"), role="sender")
    peer.pump(timeout=0.05)
    observed["broker_dispositions"] = answers_to(broker_dispositions(peer, since, "sender"), deliveries)
    observed["settled_offsets"] = settled_offsets(observed["broker_dispositions"], deliveries)
    if given["then"] == "accept":
        since = peer.mark()
        peer.dispose(deliveries[0].delivery, "accepted", settle=given["settle"])
        peer.wait_for_disposition(deliveries[0].delivery_id, since, wait_for(ctx, "after_accept"), role="sender")
        peer.pump(timeout=0.05)
        observed["after_accept"] = answers_to(broker_dispositions(peer, since, "sender"), deliveries[:1])
    for received in deliveries:
        if received.delivery.settled:  # the broker settled: we settle too (no frame goes out)
            received.delivery.settle()


def _again(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver, given: dict[str, Any]) -> None:
    """One more round: take the next delivery on the link (one credit) and give it the row's outcome."""
    since = peer.mark()
    receiver.flow(1)
    following = setup_step("receive the redelivered message", peer.receive, receiver, since)
    _dispose(peer, [following], given)
    peer.pump(timeout=0.05)
    if following.delivery.settled:
        following.delivery.settle()


def answers_to(dispositions: list[dict], deliveries: list[ReceivedDelivery]) -> list[dict]:
    """The broker's dispositions, each with ``covers`` (positions of ``deliveries`` in its first..last) and
    ``strays`` (how many delivery-ids in that range are none of ``deliveries``: a range answered wider than
    what it settles)."""
    ids = [d.delivery_id for d in deliveries]
    for seen in dispositions:
        first = seen.get("first")
        last = seen.get("last") if isinstance(seen.get("last"), int) else first
        if not isinstance(first, int):
            seen["covers"], seen["strays"] = [], None
            continue
        seen["covers"] = [i for i, delivery_id in enumerate(ids) if in_span(delivery_id, first, last)]
        seen["strays"] = span_length(first, last) - len(seen["covers"])
    return dispositions


def remaining_messages(ctx: CaseContext) -> list[dict[str, Any]]:
    """The messages still stored on the case's node, each field by field (:func:`message_seen`,
    :func:`.scripts.inspect_node`)."""
    return inspect_node(ctx, message_seen)


def settled_offsets(dispositions: list[dict], deliveries: list[ReceivedDelivery]) -> list[int]:
    """Which of ``deliveries`` (by position) the broker's dispositions settled, a range counting for each id."""
    ids = [d.delivery_id for d in deliveries]
    covered: set[int] = set()
    for seen in dispositions:
        if seen and seen.get("settled") and isinstance(seen.get("first"), int):
            last = seen.get("last") if isinstance(seen.get("last"), int) else seen["first"]
            covered |= {i for i, delivery_id in enumerate(ids) if in_span(delivery_id, seen["first"], last)}
    return sorted(covered)


def _next_on_link(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver) -> dict[str, Any] | None:
    since = peer.mark()
    receiver.flow(1)
    try:
        following = peer.receive(receiver, since, timeout=wait_for(ctx, "next_on_link"))
    except ExpectationFailed:
        return None
    seen = message_seen(following)
    peer.dispose(following.delivery, "accepted", settle=True)
    return seen


def _later_on_link(ctx: CaseContext, peer: ScriptedPeer, receiver: Receiver, handle: int | None) -> list[Any]:
    """The bodies the broker sends on the same link once it has :data:`LATER_CREDIT` more credit, after a quiet
    time: whatever is still stored for the node may come, so a message the link must never get again (3.4.5
    undeliverable-here) is looked for beyond the next credit (a broker may put it at the back of the queue)."""
    since = peer.mark()
    receiver.flow(LATER_CREDIT)
    peer.pump(timeout=ctx.quiet, on=receiver)
    return delivered_on(peer, handle, since)


def run_produce(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """The peer sends ``transfers`` (settled or unsettled) under the row's settle modes; the broker decides
    (``provocation``: its admin makes it reject, release or modify). Observes ``broker_attach``,
    ``dispositions`` (per transfer, the broker's first disposition or nothing), ``progress`` (the first and
    last disposition of the first unsettled transfer, when the row expects it), ``ordering`` (settle modes,
    the broker's first disposition and what it sent after the peer settled), ``answer_counts`` (per transfer,
    how many dispositions of the broker's, over the whole exchange, hold its delivery-id) and ``stored``.
    ``size``: the body's length (0: the bodies are m1, m2, ...). ``twin``: while the first unsettled
    delivery is still unsettled at both ends, another client (:func:`publish_twin`) sends ``twin`` over a
    link of the same name, with the same settle modes and the same delivery-tag: ``twin`` is the
    ``rcv-settle-mode`` of the broker's attach of that link and its first disposition of it
    (``broker-first``)."""
    observed: dict[str, Any] = {}
    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    peer, session = open_session(ctx, "producer")
    sender, attach = setup_step("attach producer", peer.attach_sender, session, ctx.node,
                                snd_settle_mode=given["snd_settle_mode"], rcv_settle_mode=given["rcv_settle_mode"])
    observed["broker_attach"] = attach_seen(attach)
    dispositions: list[dict | None] = []
    delivery_ids: list[int] = []
    first_unsettled: tuple[Delivery, int] | None = None
    for index, kind in enumerate(given["transfers"]):
        since = peer.mark()
        body = sized_body(given["size"]) if given["size"] else f"m{index + 1}"
        delivery, transfer = setup_step(f"send m{index + 1}", peer.send, sender, body, settled=(kind == "settled"))
        delivery_id = transfer.fields["delivery-id"]
        delivery_ids.append(delivery_id)
        wait = ctx.quiet if kind == "settled" else ctx.timeout
        frame = peer.wait_for_disposition(delivery_id, since, wait, role="receiver")
        dispositions.append(disposition_seen(frame))
        if kind == "unsettled" and first_unsettled is None:
            first_unsettled = (delivery, delivery_id)
    observed["dispositions"] = dispositions
    if first_unsettled is not None and "progress" in ctx.expected:
        observed["progress"] = _progress(ctx, peer, first_unsettled[1])
    ordering: dict[str, Any] = {"rcv-settle-mode": observed["broker_attach"]["rcv-settle-mode"],
                                "broker-first": dispositions[0] if dispositions else None, "after-peer-settled": []}
    if given["interloper"]:
        interlope(ctx)
    if given["twin"] and first_unsettled is not None:
        observed["twin"] = publish_twin(ctx, sender, first_unsettled[0].tag, given)
    if first_unsettled is not None:
        delivery, delivery_id = first_unsettled
        since = peer.mark()
        if not delivery.settled:
            delivery.settle()  # the sender settles once it has the receiver's terminal state (or at once)
            peer.pump(timeout=0)
        peer.pump(timeout=ctx.quiet)
        ordering["after-peer-settled"] = broker_dispositions(peer, since, "receiver")
    observed["ordering"] = ordering
    peer.pump(timeout=0)
    observed["answer_counts"] = [len(answers_covering(peer, delivery_id)) for delivery_id in delivery_ids]
    sender.close()
    observed["stored"] = abbreviated(remaining_on_node(ctx))
    return observed


def answers_covering(peer: ScriptedPeer, delivery_id: int) -> list[Frame]:
    """Every disposition of the broker's (as receiver) whose first..last holds ``delivery_id``."""
    found = []
    for frame in peer.frames:
        first = frame.fields.get("first") if frame.direction == "in" and frame.performative == "disposition" \
            and frame.fields.get("role") == "receiver" else None
        if isinstance(first, int):
            last = frame.fields.get("last") if isinstance(frame.fields.get("last"), int) else first
            if in_span(delivery_id, first, last):
                found.append(frame)
    return found


def abbreviated(bodies: list[Any]) -> list[Any]:
    """Message bodies as the tables name them: long ones as ``<N bytes>``."""
    return [b if len(str(b)) <= 16 else f"<{len(b)} bytes>" for b in bodies]


def _progress(ctx: CaseContext, peer: ScriptedPeer, delivery_id: int) -> dict[str, Any]:
    """The broker's first and last disposition of one delivery (waiting for a settled one to be the last)."""
    def covering() -> list[Frame]:
        return [f for f in peer.frames if f.direction == "in" and f.performative == "disposition"
                and f.fields.get("role") == "receiver" and isinstance(f.fields.get("first"), int)
                and f.fields["first"] <= delivery_id <= (f.fields.get("last") if f.fields.get("last") is not None
                                                         else f.fields["first"])]

    peer.pump(lambda: any(f.fields.get("settled") for f in covering()), ctx.timeout)
    frames = covering()
    return {"first": disposition_seen(frames[0]) if frames else None,
            "last": disposition_seen(frames[-1]) if frames else None, "count": len(frames)}


def run_transfer(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Deliveries seen frame by frame. ``kind``:

    - ``multi-frame-in``: the peer sends a ``size``-byte body (:func:`sized_body`), which proton splits at the
      broker's max-frame-size (or, where the broker states none, the peer in pieces: ``ScriptedPeer.give``);
      observes ``frames`` (the peer's transfer frames), ``dispositions``, ``stored`` and ``intact`` (the node
      holds that body exactly);
    - ``multi-frame-out``: the broker sends such a message to a peer that announced a 512-byte
      max-frame-size; observes ``frames`` (the broker's transfer frames) and ``intact``;
    - ``aborted-in``: the peer sends the first part of m1, aborts it, then sends m2 whole; observes
      ``frames``, ``dispositions`` (for m1, m2) and ``stored``; with ``provocation`` credit-one-at-a-time (the
      link has one credit at a time) the peer first sends m0 whole and, as the premise, waits for the broker's new
      credit after it (none: UNSUPPORTED, a receiver may withhold credit); m1 then uses the next credit, the
      observations add ``credit_after_abort`` (:func:`_credit_after_abort`) and m0's disposition, and m2 goes
      only if that credit came;
    - ``tag-reuse``: the peer sends m1 and m2 with the same tag, m2 only after m1 is settled (a tag need
      only be unique among unsettled deliveries); observes ``dispositions`` and ``stored``;
    - ``whole``: one unsettled message in one frame; observes ``shape``, ``dispositions``, ``stored``;
    - ``buffered-until-credit``: m1 waits on the node while the peer's receiving link has no credit;
      observes ``before_credit`` (transfers seen in the quiet time) and ``after_credit`` (the message
      once one credit is granted).
    """
    kind = given["kind"]
    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    if kind == "multi-frame-out":
        return _multi_frame_out(ctx, given)
    if kind == "buffered-until-credit":
        return _buffered_until_credit(ctx)
    observed: dict[str, Any] = {}
    peer, session = open_session(ctx, "transfer")
    sender, attach = setup_step("attach sender", peer.attach_sender, session, ctx.node)
    since = peer.mark()
    ids: list[int] = []
    optional_id: int | None = None  # the aborted delivery's id: the broker need not answer it
    if kind == "multi-frame-in":
        _, transfer = setup_step("send the large message", peer.send, sender, sized_body(given["size"]))
        ids.append(transfer.fields["delivery-id"])
    elif kind == "aborted-in":
        one_at_a_time = given["provocation"] == "credit-one-at-a-time"
        if one_at_a_time:
            _aborted_premise(ctx, peer, sender, ids)
        encoded = Message(body="m1").encode()
        delivery = setup_step("send first part", peer.send_partial, sender, encoded[: len(encoded) // 2], b"abort-me")
        delivery.abort()
        peer.pump(lambda: peer.find("transfer", since, direction="out", aborted=True) is not None, ctx.timeout)
        optional_id = peer.find("transfer", since, direction="out", delivery_tag=b"abort-me").fields["delivery-id"]
        ids.append(optional_id)
        if one_at_a_time:
            observed["credit_after_abort"] = _credit_after_abort(ctx, peer, sender, attach, since)
        if not one_at_a_time or sender.credit > 0:
            _, transfer = setup_step("send m2", peer.send, sender, "m2")
            ids.append(transfer.fields["delivery-id"])
    elif kind == "whole":
        _, transfer = setup_step("send m1", peer.send, sender, "m1")
        ids.append(transfer.fields["delivery-id"])
    elif kind == "tag-reuse":
        for body in ("m1", "m2"):
            _, transfer = setup_step(f"send {body}", peer.send, sender, body, tag=b"same-tag")
            ids.append(transfer.fields["delivery-id"])
            peer.wait_for_disposition(ids[-1], since, ctx.timeout, role="receiver")
    transfers = [f for f in peer.frames[since:] if f.direction == "out" and f.performative == "transfer"]
    start = 0 if optional_id is None else \
        next((i for i, f in enumerate(transfers) if f.fields.get("delivery-id") == optional_id), 0)
    observed["shape"] = shape(transfers[start:])  # the aborted delivery's, where the row has one
    dispositions = []
    for delivery_id in ids:
        frame = peer.wait_for_disposition(delivery_id, since, ctx.quiet if delivery_id == optional_id
                                          else wait_for(ctx, "dispositions"), role="receiver")
        dispositions.append(disposition_seen(frame))
    observed["dispositions"] = dispositions
    remaining = remaining_on_node(ctx)
    observed["stored"] = abbreviated(remaining)
    if kind == "multi-frame-in":  # the body whole, byte for byte, not only its length
        observed["intact"] = remaining == [sized_body(given["size"])]
    return observed


def _aborted_premise(ctx: CaseContext, peer: ScriptedPeer, sender: Sender, ids: list[int]) -> None:
    """The premise of an abort under one credit at a time: the broker gives the link one credit, m0 goes whole
    on it (its delivery-id added to ``ids``), and the broker then issues one credit again, which the aborted m1 will
    use. :class:`NotApplicable` where the link had more than one credit before m0 or after it (the row needs m1 to
    use the link's last credit), or no new credit came: how much credit a receiver gives, and whether it gives any
    again, is its own choice (AMQP 1.0 2.6.7)."""
    _one_credit(peer, sender, "before m0")
    _, transfer = setup_step("send m0", peer.send, sender, "m0")
    ids.append(transfer.fields["delivery-id"])
    _one_credit(peer, sender, "after the whole m0")


def _one_credit(peer: ScriptedPeer, sender: Sender, when: str) -> None:
    """Wait for credit on ``sender``; :class:`NotApplicable` unless the broker gave exactly one (``when``: said in
    the reason)."""
    setup_step(f"credit {when}", peer.wait_for_credit, sender)
    if sender.credit != 1:
        raise NotApplicable(f"the broker's flow gave our link {sender.credit} credits {when}, not one (the admin's "
                            f"credit-one-at-a-time): m1 would not use the link's last credit. How much credit a "
                            f"receiver gives is its own choice (AMQP 1.0 2.6.7)")


def _credit_after_abort(ctx: CaseContext, peer: ScriptedPeer, sender: Sender, attach: Frame,
                        since: int) -> dict[str, Any] | None:
    """The broker's flow state for our sending link once m1, which used the link's one credit (the whole m0 had
    used the first), was aborted: its last flow on the link after our aborted transfer (:func:`.scripts.flow_seen`,
    its ``advance`` counted from our attach's initial-delivery-count), once that flow gives us credit again by our
    own count or the time-out passed; None when it sent none. 004 pn_delivery_aborted: an aborted delivery consumes
    a credit, and the receiver issues new credit as for a successful delivery (the admin's credit-one-at-a-time:
    one more after each delivery); 2.6.7: the receiver's delivery-count is the sender's, so it counts m0 and m1."""
    aborted = next((index for index in range(since, len(peer.frames)) if peer.frames[index].direction == "out"
                    and peer.frames[index].performative == "transfer" and peer.frames[index].fields.get("aborted")),
                   None)
    if aborted is None:  # the abort never went out (the broker ended the connection first): no flow after it
        return None
    handle = broker_handle(attach)
    ours = peer.find("attach", since=0, direction="out", name=sender.name)
    initial = int((ours.fields.get("initial-delivery-count") if ours is not None else 0) or 0)
    peer.pump(lambda: sender.credit > 0, ctx.timeout)
    flows = [f for f in peer.frames[aborted + 1:] if f.direction == "in" and f.performative == "flow"
             and f.fields.get("handle") == handle]
    return flow_seen(flows[-1] if flows else None, initial)


def shape(frames: list[Frame], limit: int | None = None) -> dict[str, Any] | None:
    """How the first delivery among ``frames`` crossed the wire (2.6.14, 2.7.5; 004 pn_delivery_partial):
    how many transfer frames, whether ``more`` was set on all but the last, whether continuation frames
    repeat (or omit) the first frame's delivery-id, whether the last frame aborted it, and whether every
    frame fits ``limit`` (the receiver's max-frame-size)."""
    if not frames:
        return None
    first: list[Frame] = []
    for frame in frames:
        first.append(frame)
        if not frame.fields.get("more") or frame.fields.get("aborted"):
            break
    first_id = first[0].fields.get("delivery-id")
    return {
        "frames": len(first),
        "more-until-last": all(f.fields.get("more") for f in first[:-1]) and not first[-1].fields.get("more"),
        "continuations-consistent": all(f.fields.get("delivery-id") in (None, first_id) for f in first[1:]),
        "aborted": bool(first[-1].fields.get("aborted")),
        "multi-frame": len(first) > 1,
        "within-max-frame-size": limit is None or max(len(f.raw) for f in first) <= limit,
    }


def _buffered_until_credit(ctx: CaseContext) -> dict[str, Any]:
    peer, session = open_session(ctx, "consumer")
    publish(ctx, peer, session, 1)
    since = peer.mark()
    receiver, _ = setup_step("attach consumer", peer.attach_receiver, session, ctx.node)
    peer.pump(timeout=ctx.quiet)
    before = len([f for f in peer.frames[since:] if f.direction == "in" and f.performative == "transfer"])
    since = peer.mark()
    receiver.flow(1)
    try:
        received = peer.receive(receiver, since, timeout=ctx.timeout)
    except ExpectationFailed:
        return {"before_credit": before, "after_credit": None}
    peer.dispose(received.delivery, "accepted", settle=True)
    return {"before_credit": before, "after_credit": message_seen(received)}


def _multi_frame_out(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    peer, session = open_session(ctx, "publisher")
    publish(ctx, peer, session, 1, size=given["size"])
    small, small_session = open_session(ctx, "small-frames", max_frame_size=512)
    since = small.mark()
    receiver, _ = setup_step("attach consumer", small.attach_receiver, small_session, ctx.node, credit=1)
    received = setup_step("receive the large message", small.receive, receiver, since)
    small.dispose(received.delivery, "accepted", settle=True)
    frames = [f for f in small.frames[since:] if f.direction == "in" and f.performative == "transfer"]
    return {"shape": shape(frames, 512), "intact": received.message.body == sized_body(given["size"])}

