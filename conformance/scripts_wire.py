"""The wire-performatives scenario: one fixed exchange, every performative and delivery state captured both ways.

The exchange is deterministic (fixed container-id, link names, node, tags, message bodies), so the bytes
our peer writes, and those of a broker that encodes as the reference does, are the same on every run. A row
names one captured frame (``given.frame``) and the side that wrote it; the script observes its decoded
fields, its performative bytes (frame body without payload, hex) and its encoding form.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.peer import PeerError, ScriptedPeer
from amqp_conformance.peers.turns import waiting
from proton import Condition, Delivery, symbol

from .context import BrokerActed, CaseContext, NotApplicable, SetupFailed, setup_step

NODE = "conformance.wire"  # after the profile's node prefix
FRAMES = ("open", "begin", "attach-sender", "attach-receiver", "flow", "transfer", "disposition-accepted",
          "disposition-rejected", "disposition-released", "disposition-modified", "disposition-received",
          "detach", "end", "close")
LIST_FORMS = {0x45: "list0", 0xC0: "list8", 0xD0: "list32"}


def body_bytes(frame: Frame) -> bytes:
    """The performative's bytes: the frame body after the (extended) header, without the payload."""
    body = frame.raw[frame.raw[4] * 4:]
    return body[: len(body) - frame.payload_len] if frame.payload_len else body


def encoding_form(frame: Frame | None) -> dict[str, str] | None:
    """How the performative is encoded (1.5, 1.6.22-1.6.24): numeric or symbolic descriptor; list form."""
    if frame is None:
        return None
    body = body_bytes(frame)
    if body[:2] == b"\x00\x53":
        descriptor, rest = "smallulong", body[3:]
    elif body[:2] == b"\x00\x80":
        descriptor, rest = "ulong", body[10:]
    elif body[:2] in (b"\x00\xa3", b"\x00\xb3"):
        size = body[2] if body[1] == 0xA3 else int.from_bytes(body[2:6], "big")
        start = 3 if body[1] == 0xA3 else 6
        descriptor, rest = "symbol", body[start + size:]
    else:
        return {"descriptor": f"unknown 0x{body[:2].hex()}", "list": "unknown"}
    return {"descriptor": descriptor, "list": LIST_FORMS.get(rest[0], f"0x{rest[0]:02x}") if rest else "none"}


def _exchange(ctx: CaseContext) -> ScriptedPeer:
    """Run the fixed exchange; returns the peer with every frame captured."""
    peer = setup_step("connect", ctx.peer, "wire", container_id="amqp-conformance-wire")
    setup_step("open", peer.open)
    session = setup_step("begin", peer.begin)
    node = ctx.node_prefix + NODE
    sender, _ = setup_step("attach sender", peer.attach_sender, session, node, name="wire-sender")
    for index in range(1, 6):
        _, transfer = setup_step(f"send m{index}", peer.send, sender, f"m{index}", tag=f"w{index}".encode())
        peer.wait_for_disposition(transfer.fields["delivery-id"], 0, ctx.timeout, role="receiver")
    receiver, _ = setup_step("attach receiver", peer.attach_receiver, session, node, name="wire-receiver", credit=5)
    since = peer.mark()
    received = [setup_step(f"receive m{i}", peer.receive, receiver, since) for i in range(1, 6)]
    accepted, rejected, released, modified, progressed = (r.delivery for r in received)
    accepted.update(Delivery.ACCEPTED)
    rejected.local.condition = Condition("amqp:invalid-field", "wire test")
    rejected.update(Delivery.REJECTED)
    released.update(Delivery.RELEASED)
    modified.local.failed = True
    modified.local.undeliverable = True
    modified.local.annotations = {symbol("x-opt-wire"): "v"}
    modified.update(Delivery.MODIFIED)
    progressed.local.section_number = 0
    progressed.local.section_offset = 2
    progressed.update(Delivery.RECEIVED)
    for received_delivery in received[:4]:  # the terminal ones; received (3.4.1) gets no answer
        peer.wait_for_disposition(received_delivery.delivery_id, since, ctx.timeout, role="sender")
    progressed.update(Delivery.ACCEPTED)
    peer.wait_for_disposition(received[-1].delivery_id, peer.mark(), ctx.timeout, role="sender")
    for delivery in (accepted, rejected, released, modified, progressed):
        delivery.settle()
    sender.close()
    receiver.close()
    peer.pump(lambda: len([f for f in peer.frames if f.direction == "in" and f.performative == "detach"]) >= 2)
    session.close()
    peer.pump(lambda: peer.find("end") is not None)
    peer.close()
    if peer.find("close") is None:  # whatever the transport showed (a reset, or a TLS or TCP end of stream)
        last = next((f for f in reversed(peer.frames) if f.direction == "in"), None)
        raise SetupFailed("the exchange did not complete: the broker ended the connection without an AMQP "
                          f"close (last frame from the broker: {last.describe() if last else 'none'})")
    _drain(ctx)
    return peer


def _drain(ctx: CaseContext) -> None:
    """Take what the exchange left on the node (the released and modified messages), for the next row."""
    from .scripts import collect

    cleaner = setup_step("connect", ctx.peer, "wire-cleanup")
    setup_step("open", cleaner.open)
    session = setup_step("begin", cleaner.begin)
    receiver, _ = setup_step("attach cleaner", cleaner.attach_receiver, session, ctx.node_prefix + NODE, credit=20)
    collect(ctx, cleaner, receiver)


def pick(peer: ScriptedPeer, direction: str, label: str) -> Frame | None:
    """The frame ``label`` names among those captured in ``direction`` ("out": our peer's; "in": the broker's).

    Dispositions are those of the consuming link: ours as receiver, the broker's answers as sender.
    """
    frames = [f for f in peer.frames if f.direction == direction]
    if label.startswith("attach-"):
        name = "wire-sender" if label == "attach-sender" else "wire-receiver"
        return next((f for f in frames if f.performative == "attach" and f.fields.get("name") == name), None)
    if label.startswith("disposition-"):
        state, role = label.split("-", 1)[1], "sender" if direction == "in" else "receiver"
        return next((f for f in frames if f.performative == "disposition" and f.fields.get("role") == role
                     and (f.fields.get("state") or {}).get("@type") == state), None)
    if label == "flow":
        return next((f for f in frames if f.performative == "flow" and f.fields.get("handle") is not None), None)
    return next((f for f in frames if f.performative == label), None)


def link_of(peer: ScriptedPeer, frame: Frame) -> str | None:
    """The name of the link a flow, transfer or detach belongs to: the attach written in the same direction
    (by the same end) with the frame's handle, on the same channel; None when the frame has no handle or no
    such attach came first. Handles are each end's own choice (2.6.2), so a row names the link, not a number."""
    handle = frame.fields.get("handle")
    if handle is None:
        return None
    name = None
    for earlier in peer.frames:
        if earlier is frame:
            break
        if earlier.direction == frame.direction and earlier.performative == "attach" \
                and earlier.channel == frame.channel and earlier.fields.get("handle") == handle:
            name = earlier.fields.get("name")
    return name


@dataclass
class FailedExchange:
    """Why the shared exchange failed, and its peers: their frames, as far as they came, are each row's evidence.
    ``applicable`` is False when the exchange stopped at what the broker may rightly do (it withheld the credit
    a set-up step needed, 2.6.7): a row whose frame never came is then UNSUPPORTED, not the harness failing."""

    reason: str
    peers: list[ScriptedPeer]
    applicable: bool = True

    def wire_peer(self) -> ScriptedPeer | None:
        """The peer that ran the exchange (label "wire"), with every frame it captured before the failure."""
        return next((p for p in self.peers if p.label == "wire"), None)


_EXCHANGES: dict[str, ScriptedPeer | FailedExchange] = {}  # by broker URL
_EXCHANGING = threading.Lock()  # rows run side by side (run -n) wait for the one exchange, never run a second


def forget_exchanges() -> None:
    """Forget every cached exchange: each pytest session (each ``run --repeat`` repetition) runs its own."""
    _EXCHANGES.clear()


def _shared_exchange(ctx: CaseContext) -> ScriptedPeer | FailedExchange:
    """The exchange of this broker, run by the first row that needs it, kept (or its failure, with every frame
    captured up to it) for every row: one exchange, one outcome, each row judged on its own frame."""
    with waiting():  # never wait for the lock holding a turn: its holder needs turns to finish (peers/turns.py)
        _EXCHANGING.acquire()
    try:
        cached = _EXCHANGES.get(ctx.address.url)
        if cached is None:
            try:
                cached = _exchange(ctx)
            except PeerError as exc:
                cached = FailedExchange(f"the shared wire exchange failed (first run for {ctx.case_id}): {exc}",
                                        list(ctx.peers))
            except NotApplicable as exc:
                cached = FailedExchange(f"the shared wire exchange stopped (first run for {ctx.case_id}): {exc}",
                                        list(ctx.peers), applicable=False)
            _EXCHANGES[ctx.address.url] = cached
    finally:
        _EXCHANGING.release()
    peers = cached.peers if isinstance(cached, FailedExchange) else [cached]
    ctx.peers.extend(p for p in peers if p not in ctx.peers)  # the row's frame log: that exchange
    return cached


def broker_settled_first(peer: ScriptedPeer) -> tuple[str, bool] | None:
    """Why our peer disposed of nothing the broker sent in the exchange, when the broker sent it settled: the
    reason, and whether the sender settle mode the broker stated in its attach allows that (settled or mixed, the
    default, 2.8.2); None when it sent nothing settled."""
    sent = [frame for frame in peer.frames if frame.direction == "in" and frame.performative == "transfer"]
    if not any(frame.fields.get("settled") for frame in sent):
        return None
    attaches = [frame for frame in peer.frames if frame.direction == "in" and frame.performative == "attach"
                and frame.fields.get("role") == "sender"]
    mode = (attaches[0].fields.get("snd-settle-mode") if attaches else None) or "mixed"
    return (f"the broker sent its deliveries settled, under the sender settle mode it stated, {mode} (2.8.2), "
            f"so there was none to dispose of", mode != "unsettled")


def run_wire_performatives(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Observe ``decoded``, ``bytes``, ``form`` and ``link`` (the name of the link its handle is on) of the frame
    the row names.

    The exchange runs once per broker (by URL) and pytest session, and its frames serve every row, so 28
    rows cost one exchange; each row's frame log shows that exchange. When the exchange failed part-way (the
    broker reset the connection, or ended it without an AMQP close), a row whose frame was captured before
    that is still judged on it; a row whose frame never came raises :class:`SetupFailed` with the failure
    and the frames that were captured (the harness then judges what the broker did), or :class:`NotApplicable`
    when the exchange stopped at a choice the broker may make (it granted no credit to send with).
    """
    cached = _shared_exchange(ctx)
    peer = cached.wire_peer() if isinstance(cached, FailedExchange) else cached
    frame = pick(peer, "in" if given["side"] == "broker" else "out", given["frame"]) if peer else None
    if frame is None and isinstance(cached, FailedExchange):
        captured = ", ".join(f"{f.direction} {f.performative}" for f in (peer.frames if peer else [])) or "none"
        stopped = SetupFailed if cached.applicable else NotApplicable
        raise stopped(f"{cached.reason}; no {given['side']} {given['frame']} frame was captured before that "
                      f"(captured: {captured})")
    if frame is None and given["side"] == "peer":
        settled = broker_settled_first(peer)
        if settled is not None:  # the broker left our peer nothing to dispose of
            stopped = NotApplicable if settled[1] else BrokerActed
            raise stopped(f"our peer wrote no {given['frame']} frame in the exchange: {settled[0]}")
        raise SetupFailed(f"our peer wrote no {given['frame']} frame in the exchange")
    return {"decoded": dict(frame.fields) if frame else None,
            "bytes": body_bytes(frame).hex() if frame else None,
            "form": encoding_form(frame), "link": link_of(peer, frame) if frame else None}
