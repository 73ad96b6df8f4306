"""Flow control with the broker as sender (AMQP 1.0 2.6.7 Flow Control, 2.7.4 Flow): credit and drain.

:func:`run_flow` attaches a consumer with no credit, stores the row's messages, watches that nothing comes
before credit, then grants the row's credit (with ``drain`` or not) and observes what the broker sends on
the link: the bodies it delivers and its flow state (link-credit, delivery-count and how far the
delivery-count advanced from the attach's initial-delivery-count, with their AMQP types).
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.frames import Frame

from .context import CaseContext, open_session, setup_step
from .scripts import broker_handle, delivered_on, deliveries_on, flow_seen
from .scripts_core import publish, published_message


def before_our_credit(frame: Frame, initial: int) -> bool:
    """Whether the broker's flow ``frame`` states the link as it was before our credit reached it: its delivery-limit
    (:func:`flow_seen`) is 0, a link given no credit that has sent nothing. AMQP 1.0 2.7.4 lets a sender send its flow
    state at any time, so one written just before our flow reached it crosses ours and says nothing of our credit:
    it is as if it had come before our flow."""
    return (flow_seen(frame, initial) or {}).get("limit") == 0


def over_stated_credit(frames: list[Frame], handle: int, initial: int, limit: int) -> int:
    """How many deliveries the broker began on its link ``handle`` (in ``frames``, after our credit) beyond the
    link-credit its own last flow state before them stated (AMQP 1.0 2.6.7: link-credit is what the sender may still
    send; a drain's answer that says 0 before the messages it sends is the case). Only a flow of the broker's that
    had seen our credit counts, one whose delivery-limit (:func:`flow_seen`) is ours (``limit``, past ``initial``):
    one written before ours reached it may state less, and transfers after it are within our credit."""
    credit: int | None = None
    over = 0
    for frame in frames:
        if frame.direction != "in" or frame.fields.get("handle") != handle:
            continue
        if frame.performative == "flow":
            seen = flow_seen(frame, initial) or {}
            if seen.get("limit") == limit:
                credit = seen["link-credit"]
        elif frame.performative == "transfer" and frame.fields.get("delivery-id") is not None and credit is not None:
            credit -= 1
            over += credit < 0
    return over


def run_flow(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Observes ``before_credit`` (bodies sent while the link had no credit), ``delivered`` (bodies sent
    after the row's credit, ``"(aborted)"`` for a delivery the broker aborted), ``broker_flow`` (the broker's last
    flow on the link after the credit that was not written before the credit reached it,
    :func:`before_our_credit`; or None) and ``over_stated_credit`` (:func:`over_stated_credit`); with drain,
    ``after_drain`` (:func:`_after_drain`). A ``provocation`` (the admin's abort-first-delivery: the broker's next
    delivery on the link is begun and aborted, its message kept) is asked for just before the credit."""
    peer, session = open_session(ctx, "consumer")
    receiver, attach = setup_step("attach consumer", peer.attach_receiver, session, ctx.node, credit=0)
    handle = broker_handle(attach)
    initial = attach.fields.get("initial-delivery-count") or 0
    since = peer.mark()
    if given["messages"]:
        publish(ctx, peer, session, given["messages"], large_first=given["large_first"])
    peer.pump(timeout=ctx.quiet, on=receiver)
    observed: dict[str, Any] = {"before_credit": delivered_on(peer, handle, since)}

    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    since = peer.mark()
    credit = given["credit"]
    if given["drain"]:
        receiver.drain(credit)
    else:
        receiver.flow(credit)
    aborted = 1 if given["provocation"] == "abort-first-delivery" else 0  # a delivery that uses a credit (004)
    expected = min(credit, given["messages"] + aborted)

    def flow_frame() -> Frame | None:
        """The broker's last flow on the link written after our credit reached it (:func:`before_our_credit`)."""
        flows = [f for f in peer.frames[since:] if f.direction == "in" and f.performative == "flow"
                 and f.fields.get("handle") == handle and not before_our_credit(f, initial)]
        return flows[-1] if flows else None

    def answered() -> bool:
        sent = len(deliveries_on(peer, handle, since))
        frame = flow_frame()
        # a drain is answered by a flow spending the credit left, or by transfers that spent all of it (nothing
        # is left to drain, so no flow need follow: a late one is the quiet watch's below)
        drained = (not given["drain"] or sent >= credit
                   or (frame is not None and frame.fields.get("link-credit") == 0))
        return sent >= expected and drained

    peer.pump(answered, ctx.timeout, receiver)
    peer.pump(timeout=ctx.quiet, on=receiver)  # anything more the broker sends (a transfer beyond the credit)
    observed["delivered"] = delivered_on(peer, handle, since)
    observed["broker_flow"] = flow_seen(flow_frame(), initial)
    observed["over_stated_credit"] = over_stated_credit(peer.frames[since:], handle, initial, credit)
    if given["drain"]:
        observed["after_drain"] = _after_drain(ctx, peer, session, receiver, handle, given["messages"] + 1)
    peer.close()
    return observed


def _after_drain(ctx: CaseContext, peer: Any, session: Any, receiver: Any, handle: int | None, index: int) -> list[Any]:
    """What the broker sends on the drained link once one more message, m<index>, is sent to the node: the bodies,
    after a quiet time. A drain leaves the link no credit at both ends (2.6.7: the sender used it up, advancing its
    delivery-count, and our peer grants none), so nothing may come; a broker whose flow said link-credit 0 but
    that kept its credit sends it. The message's own answer is not waited for: a router holds it unanswered while
    its one consumer has no credit (001), a broker stores and accepts it."""
    sender, _ = setup_step("attach the late publisher", peer.attach_sender, session, ctx.node)
    since = peer.mark()
    setup_step(f"send m{index}", peer.send, sender, None, message=published_message(index, f"m{index}"))
    peer.pump(timeout=ctx.quiet, on=receiver)
    return delivered_on(peer, handle, since)
