"""Router scenario scripts: one producer and several consumers, each on its own connection, through a router.

A row scripts every consumer (``given.consumers``: accept, reject with a condition, release, modify with
flags and annotations, hold the delivery unsettled, or leave while holding it: detach the link closing it,
detach it without closing (suspend), close the connection, drop the socket) and says how the producer sends
(pre-settled or not; whole, one or two messages, in two transfer frames, or aborted and followed by a whole
one). Peers are labelled ``producer``, ``consumer-1``, ...;
their frames form the case's one time-ordered log (:meth:`CaseContext.frames`). Addresses are built from
the profile's anycast and multicast prefixes, so the same rows run against any router.

Like every script, these observe and never judge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.peer import UNSTATED_LIMIT_PIECE, ExpectationFailed, ScriptedPeer
from amqp_conformance.peers.sequence import in_span
from proton import Delivery, Message, Receiver, Session, symbol

from .context import CaseContext, SetupFailed, open_session, setup_step
from .scripts import broker_handle

OUTCOME_ACTIONS = {"accept": "accepted", "reject": "rejected", "release": "released", "modify": "modified"}
LEAVING_ACTIONS = ("detach", "suspend", "close", "disconnect")  # suspend: detach with closed=false (2.6.5)
ACTIONS = (*OUTCOME_ACTIONS, "settle", "hold", *LEAVING_ACTIONS)  # settle: settled with no state (2.7.6)
ACTION_FIELDS = {"action": str, "condition": str, "description": str, "info": dict, "delivery_failed": bool,
                 "undeliverable_here": bool, "annotations": dict, "credit": int, "elsewhere": bool, "namesake": bool}
ONLY_FOR = {"condition": "reject", "description": "reject", "info": "reject", "delivery_failed": "modify",
            "undeliverable_here": "modify", "annotations": "modify"}
TERMINAL = ("accepted", "rejected", "released", "modified")
CONSUMER_CREDIT = 5

GIVEN: dict[str, Any] = {
    "address_kind": ("anycast", "multicast"),
    "settlement": ("unsettled", "presettled"),
    "transfer": ("whole", "multi-frame", "aborted"),
    "messages": (1, 2),  # whole messages the producer sends, m1 then m2 (transfer "whole" only)
    "frames": None,  # replaced below by check_frames (a validator)
    "consumers": None,  # replaced below by check_consumers (a validator)
}
MAX_FRAMES = 64
# address_kind and consumers have no default: a row that leaves one out fails loading (None is not allowed)
DEFAULTS: dict[str, Any] = {"settlement": "unsettled", "transfer": "whole", "messages": 1, "frames": 2,
                            "address_kind": None, "consumers": None}
OBSERVATIONS = ("producer_credit", "producer_disposition", "producer_outcome", "producer_error", "producer_modified",
                "producer_premature", "producer_earlier", "received", "consumer_settled", "delivered_to",
                "consumer_detach", "before_credit", "m1_fate", "streamed")


def check_frames(value: Any) -> str | None:
    """Why ``value`` is not a valid ``given.frames`` (how many transfer frames m1 takes, for ``multi-frame``, or
    goes out in before its abort, for ``aborted``), or None: a whole number from 2 to :data:`MAX_FRAMES`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_FRAMES:
        return f"expected a whole number of transfer frames from 2 to {MAX_FRAMES}, got {value!r}"
    return None


def check_consumers(value: Any) -> str | None:
    """Why ``value`` is not a valid ``given.consumers`` list, or None when it is.

    Each entry is a table with ``action`` (one of :data:`ACTIONS`) and, for ``reject``, an optional ``condition``,
    ``description`` and ``info`` (a table of symbol keys: the error's info map); for ``modify``, optional
    ``delivery_failed``, ``undeliverable_here`` and ``annotations`` (a table of symbol keys). Any consumer may set
    ``credit`` (default :data:`CONSUMER_CREDIT`): the credit it grants when it attaches; 0 means starved, given
    credit only when its turn to act comes (a starved consumer whose action is to leave leaves without ever
    granting credit, so it goes away holding copies the router never sent). ``elsewhere = true``: the consumer
    attaches to another routed address of the same kind (one the producer never sends to), so it must get nothing.
    ``namesake = true``: once the consumer is attached, a sending link with its link name (so a link of the other
    direction, 2.6.1) is attached on its session to another routed address of the same kind and closed again,
    before the producer sends: ending that link must leave the consumer's alone. An empty list means no consumer
    at all.
    """
    if value is None:
        return "required: a list of consumer scripts, e.g. [{ action = \"accept\" }] ([] for no consumer)"
    if not isinstance(value, list):
        return f"expected a list of consumer scripts (tables with 'action'), got {type(value).__name__}"
    for index, entry in enumerate(value, start=1):
        where = f"consumer {index}"
        if not isinstance(entry, dict) or "action" not in entry:
            return f"{where}: expected a table with 'action' (one of {', '.join(ACTIONS)})"
        if entry["action"] not in ACTIONS:
            return f"{where}: action {entry['action']!r} is not one of {', '.join(ACTIONS)}"
        for key, item in entry.items():
            if key not in ACTION_FIELDS:
                return f"{where}: unknown field {key!r} (fields: {', '.join(ACTION_FIELDS)})"
            if not isinstance(item, ACTION_FIELDS[key]):
                return f"{where}: field {key!r} must be a {ACTION_FIELDS[key].__name__}"
            if key in ONLY_FOR and entry["action"] != ONLY_FOR[key]:
                return f"{where}: field {key!r} only goes with action {ONLY_FOR[key]!r}"
            if key == "credit" and item < 0:
                return f"{where}: credit must be 0 or more (0: starved until its turn; default {CONSUMER_CREDIT})"
    return None


GIVEN["consumers"] = check_consumers
GIVEN["frames"] = check_frames


@dataclass
class Received:
    """A whole message a consumer received: proton's delivery, the body, and whether it arrived settled."""

    delivery: Delivery
    body: Any
    settled: bool


@dataclass
class Consumer:
    """One scripted consumer: its peer, link, script, and the messages it has received (whole ones)."""

    label: str
    script: dict[str, Any]
    peer: ScriptedPeer
    receiver: Receiver
    received: list[Received] = field(default_factory=list)
    aborted: int = 0
    streamed: int | None = None  # transfer frames of m1 it had when the producer wrote m1's last frame (or abort)
    detach_answer: dict[str, Any] | None = None  # the router's detach answering ours (action "detach")
    before_credit: list[Any] | None = None  # a starved consumer: the bodies it got before it gave credit

    @property
    def starved(self) -> bool:
        """True when the consumer attached with no credit (it gets credit when its turn to act comes)."""
        return self.script.get("credit") == 0

    def holds(self, body: Any) -> Received | None:
        """The last received message with this body, if any."""
        return next((r for r in reversed(self.received) if r.body == body), None)

    def m1_fate(self) -> str:
        """What became of m1 here: ``whole`` (received as a message), ``aborted`` (frames of it, then its abort),
        ``dangling`` (frames of a delivery that neither completed nor was aborted) or ``untouched``."""
        if self.holds("m1") is not None:
            return "whole"
        if self.aborted:
            return "aborted"
        current = self.receiver.current
        return "dangling" if current is not None and current.partial else "untouched"

    def take(self) -> bool:
        """Read every whole message now on the link (discarding aborted ones); True if anything was read."""
        took = False
        while True:
            current = self.receiver.current
            if current is None:
                return took
            if current.aborted:
                current.settle()  # discard what arrived (004: the receiver should discard an aborted delivery)
                self.aborted += 1
                took = True
                continue
            if not current.readable or current.partial:
                return took
            data = self.receiver.recv(current.pending)
            self.receiver.advance()
            self.received.append(Received(current, _body(data), bool(current.settled)))
            took = True


def _body(data: bytes) -> Any:
    message = Message()
    try:
        message.decode(data)
    except Exception:  # proton raises its own codec errors; a broken message is an observation
        return f"(undecodable: {len(data)} bytes)"
    return message.body


def run_router(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Consumers attach, then the producer sends; each consumer acts as scripted, in row order. Observes:

    ``producer_credit`` (whether the router let the producer send), ``producer_disposition`` (the first
    settled or terminal disposition the producer got for its last message, or nothing), with its
    ``producer_outcome`` (the state's name), ``producer_error`` (a rejection's error) and
    ``producer_modified`` (a modified state's flags and annotations); ``producer_earlier`` (the same as
    ``producer_disposition`` for each message before the last, by body, read after a quiet time: the consumers act
    on the last one only, which must settle nothing else); ``producer_premature`` (a final
    disposition seen before a consumer holding the message had acted, with where it was seen);
    ``received`` (per consumer, the bodies of the whole messages it got), ``consumer_settled`` (per
    consumer, whether the last message arrived settled; null if it never arrived) and ``delivered_to``
    (how many consumers got the last message) and ``consumer_detach`` (per consumer, the router's detach
    answering the consumer's detach, closing or not, as ``{closed}``; null for a consumer that did not detach) and
    ``before_credit`` (per consumer, for one attached starved: the bodies it got before it granted credit;
    null for the others), ``m1_fate`` (per consumer, :meth:`Consumer.m1_fate`) and ``streamed`` (per consumer,
    for a row whose m1 takes more than two frames: how many transfer frames it had before the producer wrote
    m1's last frame or its abort; null for the others).
    """
    address = ctx.routed_address(given["address_kind"])
    consumers = []
    for index, script in enumerate(given["consumers"], start=1):
        label = f"consumer-{index}"
        peer, session = open_session(ctx, label)
        credit = script.get("credit", CONSUMER_CREDIT)
        where = f"{address}-elsewhere" if script.get("elsewhere") else address
        receiver, _ = setup_step(f"attach {label}", peer.attach_receiver, session, where, credit=credit)
        if script.get("namesake"):
            _attach_and_close_namesake(peer, session, receiver, f"{address}-namesake", label)
        consumers.append(Consumer(label, script, peer, receiver))

    presettled = given["settlement"] == "presettled"
    producer, session = open_session(ctx, "producer")
    sender, _ = setup_step("attach producer", producer.attach_sender, session, address,
                           snd_settle_mode="settled" if presettled else "unsettled")
    observed: dict[str, Any] = {"producer_premature": None}
    try:
        producer.wait_for_credit(sender, ctx.timeout)
        observed["producer_credit"] = True
    except ExpectationFailed:
        observed["producer_credit"] = False
    ids, since, bodies = [], producer.mark(), []
    if observed["producer_credit"]:
        ids, bodies = _send(ctx, producer, sender, given["transfer"], presettled, given["messages"],
                            given["frames"], consumers)
    last_id = ids[-1] if ids else None
    observed["streamed"] = [c.streamed for c in consumers]

    _receive_all(ctx, consumers, len(bodies))
    last = bodies[-1] if bodies else None

    def note_premature(before: str) -> None:
        """Record a final disposition the producer got before ``before`` happened (once, first seen)."""
        if observed["producer_premature"] is None and last_id is not None and not presettled:
            early = _final_disposition(producer, last_id, since, ctx.quiet)
            if early is not None:
                observed["producer_premature"] = {"seen-before": before, **_disposition(early)}

    for consumer in consumers:
        leaves_starved = consumer.starved and consumer.script["action"] in LEAVING_ACTIONS
        if consumer.starved and (last is not None or leaves_starved):
            note_premature(f"{consumer.label} {consumer.script['action'] if leaves_starved else 'credit'}")
            consumer.peer.pump(lambda c=consumer: c.take(), timeout=0)
            consumer.before_credit = [r.body for r in consumer.received]
            if leaves_starved:
                _act(ctx, consumer, last)  # it leaves never having granted credit
                continue
            consumer.receiver.flow(CONSUMER_CREDIT)  # its turn: the starved consumer gets credit now
            consumer.peer.pump(lambda c=consumer: (c.take() or True) and c.holds(last) is not None, ctx.timeout)
        if consumer.holds(last) is None or consumer.script["action"] == "hold" or presettled:
            continue
        note_premature(f"{consumer.label} {consumer.script['action']}")
        _act(ctx, consumer, last)
    holders = [c for c in consumers if c.holds(last) is not None]

    final = None
    if last_id is not None:
        final = _final_disposition(producer, last_id, since, ctx.wait_for("producer_disposition"))
    observed["producer_disposition"] = _disposition(final)
    observed["producer_earlier"] = {  # one watch for all: a disposition for them comes with or after the last's
        body: _disposition(_final_disposition(producer, delivery_id, since, ctx.quiet if index == 0 else 0))
        for index, (body, delivery_id) in enumerate(zip(bodies[:-1], ids[:-1], strict=True))}
    state = (final.fields.get("state") or {}) if final is not None else {}
    observed["producer_outcome"] = state.get("@type")
    observed["producer_error"] = state.get("error")
    observed["producer_modified"] = {k: state.get(k) for k in ("delivery-failed", "undeliverable-here",
                                                                "message-annotations")} \
        if state.get("@type") == "modified" else None
    observed["received"] = [[r.body for r in c.received] for c in consumers]
    observed["consumer_settled"] = [c.holds(last).settled if c.holds(last) else None for c in consumers]
    observed["delivered_to"] = len(holders)
    observed["consumer_detach"] = [c.detach_answer for c in consumers]
    observed["before_credit"] = [c.before_credit for c in consumers]
    observed["m1_fate"] = [c.m1_fate() for c in consumers]
    return observed


def _attach_and_close_namesake(peer: ScriptedPeer, session: Session, receiver: Receiver, address: str,
                               label: str) -> None:
    """Attach a sending link named as ``receiver`` on ``session`` to ``address``, close it, and wait for the
    router's detach of it (by the router's handle for it)."""
    since = peer.mark()
    sender, attach = setup_step(f"attach {label}'s namesake sender", peer.attach_sender, session, address,
                                name=receiver.name)
    sender.close()
    setup_step(f"close {label}'s namesake sender", peer.expect, "detach", since, handle=broker_handle(attach))


def _send(ctx: CaseContext, producer: ScriptedPeer, sender: Any, transfer: str, presettled: bool,
          messages: int = 1, frames: int = 2, consumers: list[Consumer] | None = None) -> tuple[list[int], list]:
    """Send the row's message(s); returns the bodies consumers may get and, in the same order, their delivery-ids.

    ``multi-frame``: m1 in ``frames`` transfer frames (2: a small m1 split in two; more: an m1 padded, in an
    application property, to fill that many frames at the router's max-frame-size, so that a router streams
    it). ``aborted``: m1's first ``frames - 1`` frames' worth (at least one frame), then the abort, then m2
    whole. Each consumer's :attr:`Consumer.streamed` records how many of m1's frames it had by then.
    """
    if transfer == "whole":
        bodies, ids = [f"m{n}" for n in range(1, messages + 1)], []
        for body in bodies:
            _, frame = setup_step(f"send {body}", producer.send, sender, body, settled=presettled)
            ids.append(frame.fields["delivery-id"])
        return ids, bodies
    encoded, first_part = _m1_parts(producer, transfer, frames)
    since = producer.mark()
    delivery = setup_step("send the first part of m1", producer.send_partial, sender, first_part, b"m1-part")
    first = producer.find("transfer", since, direction="out", delivery_tag=b"m1-part")
    if frames > 2:
        setup_step("write the first part of m1", producer.pump, lambda: _written(producer, since) >= frames - 1,
                   ctx.timeout)
        _watch_streaming(ctx, consumers or [])
    if transfer == "multi-frame":
        if frames == 2:
            producer.pump(timeout=min(ctx.quiet, 0.1))  # let the router see the first frame on its own
        if presettled:
            delivery.settle()
        setup_step("send the rest of m1", producer.finish_partial, sender, encoded[len(first_part):])
        if _written(producer, since) < frames:
            raise SetupFailed(f"m1 went out in {_written(producer, since)} transfer frames, not {frames}")
        return [first.fields["delivery-id"]], ["m1"]
    since = producer.mark()
    delivery.abort()  # proton sends a transfer with aborted=true for the part already written
    setup_step("send the abort of m1", producer.expect, "transfer", since, direction="out", aborted=True)
    _, frame = setup_step("send m2", producer.send, sender, "m2", settled=presettled)
    return [frame.fields["delivery-id"]], ["m2"]


def _m1_parts(producer: ScriptedPeer, transfer: str, frames: int) -> tuple[bytes, bytes]:
    """m1 encoded, and the part of it sent before the rest (or the abort)."""
    if frames == 2:
        encoded = Message(body="m1").encode()
        return encoded, encoded[:len(encoded) // 2]
    broker_open = producer.find("open")
    # a frame's payload is at most its max-frame-size less its header; where the router states none, the producer
    # writes pieces of its own size (ScriptedPeer.give)
    size = (broker_open.fields.get("max-frame-size") if broker_open else None) or UNSTATED_LIMIT_PIECE
    encoded = Message(body="m1", properties={"padding": "x" * (size * frames)}).encode()
    return encoded, encoded[:size * (frames - 1)]


def _written(producer: ScriptedPeer, since: int) -> int:
    """How many transfer frames of m1 the producer has written since ``since``."""
    return sum(1 for f in producer.frames[since:] if f.direction == "out" and f.performative == "transfer"
               and f.fields.get("delivery-tag") == b"m1-part")


def _watch_streaming(ctx: CaseContext, consumers: list[Consumer]) -> None:
    """Record how many transfer frames each consumer has had before m1's last frame or its abort goes out:
    a router that streams has sent some; one that stores and forwards has sent none. The wait is short and
    bounded: it ends when every consumer has had a frame (the quiet time at most)."""
    deadline = time.monotonic() + ctx.quiet
    while consumers and time.monotonic() < deadline:
        for consumer in consumers:
            consumer.peer.pump(timeout=0.01)
        if all(_incoming_transfers(c) for c in consumers):
            break
    for consumer in consumers:
        consumer.streamed = _incoming_transfers(consumer)


def _incoming_transfers(consumer: Consumer) -> int:
    return sum(1 for f in consumer.peer.frames if f.direction == "in" and f.performative == "transfer")


def _receive_all(ctx: CaseContext, consumers: list[Consumer], sent: int) -> None:
    """Let every consumer take what the router sends: until each has what the row expects (then the quiet
    time more, to catch extras), or the time-out when the row expects something not yet arrived; or until
    the broker is idle for every consumer, when it can say so."""
    if not consumers:
        return
    expected = ctx.expected.get("received")
    wanted = [len(e) if isinstance(e, list) else None for e in expected] if isinstance(expected, list) else None
    if wanted is not None and len(wanted) == len(consumers):  # a starved consumer gets nothing before its turn
        wanted = [None if c.starved else w for w, c in zip(wanted, consumers, strict=True)]
    wants_any = sent > 0 and (wanted is None or any(wanted)) and ctx.expected.get("delivered_to") != 0
    deadline = time.monotonic() + (ctx.timeout if wants_any else ctx.quiet)
    satisfied_at = None
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.peer.pump(lambda c=consumer: c.take(), timeout=0.02)
        if all(consumer.peer.went_idle for consumer in consumers):
            break  # the broker is provably idle for every consumer (peers/idle.py): nothing more can come
        if satisfied_at is None and _satisfied(consumers, wanted, ctx.expected.get("delivered_to")):
            satisfied_at = time.monotonic()
            deadline = min(deadline, satisfied_at + ctx.quiet)


def _satisfied(consumers: list[Consumer], wanted: list | None, delivered_to: Any) -> bool:
    if wanted is not None and len(wanted) == len(consumers):
        return all(w is None or len(c.received) >= w for c, w in zip(consumers, wanted, strict=True))
    if isinstance(delivered_to, int):
        return sum(1 for c in consumers if c.received) >= delivered_to
    return all(c.received for c in consumers)  # the row names neither: every consumer got something


def _act(ctx: CaseContext, consumer: Consumer, last: Any) -> None:
    """Do what the consumer's script says with the last message it received."""
    script = consumer.script
    action = script["action"]
    if action in OUTCOME_ACTIONS or action == "settle":  # settle: no outcome, settled (dispose with None)
        delivery = consumer.holds(last).delivery
        local = delivery.local
        if action == "modify":
            local.failed = script.get("delivery_failed", False)
            local.undeliverable = script.get("undeliverable_here", False)
            if script.get("annotations"):
                local.annotations = {symbol(k): v for k, v in script["annotations"].items()}
        info = {symbol(k): v for k, v in script["info"].items()} if script.get("info") else None
        condition = (script["condition"], script.get("description"), info) if "condition" in script else None
        consumer.peer.dispose(delivery, OUTCOME_ACTIONS.get(action), settle=True, condition=condition)
        consumer.peer.pump(timeout=0)
    elif action in ("detach", "suspend"):
        since = consumer.peer.mark()
        consumer.receiver.close() if action == "detach" else consumer.receiver.detach()
        answer = setup_step(f"{consumer.label} detach", consumer.peer.expect, "detach", since)
        consumer.detach_answer = {"closed": answer.fields.get("closed")}
    elif action == "close":
        consumer.peer.close()
    elif action == "disconnect":
        consumer.peer.close(graceful=False)


def _final_disposition(peer: ScriptedPeer, delivery_id: int, since: int, timeout: float) -> Frame | None:
    """The first disposition from the router after ``since`` covering ``delivery_id`` that settles it or
    carries a terminal state (waiting up to ``timeout``); None if none arrives."""
    def final() -> Frame | None:
        for frame in peer.frames[since:]:
            fields = frame.fields
            if frame.direction != "in" or frame.performative != "disposition" or fields.get("role") != "receiver":
                continue
            first = fields.get("first")
            last = fields.get("last") if fields.get("last") is not None else first
            state = (fields.get("state") or {}).get("@type")
            if isinstance(first, int) and in_span(delivery_id, first, last) \
                    and (fields.get("settled") or state in TERMINAL):
                return frame
        return None

    peer.pump(lambda: final() is not None, timeout)
    return final()


def _disposition(frame: Frame | None) -> dict | None:
    if frame is None:
        return None
    return {key: frame.fields.get(key) for key in ("role", "settled", "state")}
