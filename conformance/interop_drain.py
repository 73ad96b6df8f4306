"""A receiving client's drain (a row's ``drain_credit``): what the wire shows of it, and what its API told of its end.

AMQP 1.0 2.6.7: a receiver sets drain in its flow; the sender uses what credit it cannot fill with messages by
advancing its delivery-count until its link-credit is 0, and sends its flow state, whose drain field is its actual
drain mode (2.7.4). The grid asks the receiving client's library to drain the row's link (the shim's ``drain``,
peers/shims/README.md) and observes the broker's answer (:func:`receiver_drain`); every cell holds an end of the
drain the API told to the broker's frames that had reached the relay by then (:func:`drained_disagreements`).
Sans-I/O: frames in, observations and lines out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.sequence import MODULUS

from .interop_observe import ConnectionFrames


@dataclass(frozen=True)
class DrainWire:
    """The row's receiving link's drain on the wire: the client's first flow for it that set drain (None: it
    never asked), the broker's flows for it after that one, and the first transfer of each delivery the broker
    began on it after that one, in order; ``after_end``: how many of those it began after a flow of its own that
    said its link-credit was 0 (the drain's end) and before a flow of the client's gave credit again: beyond the
    credit; ``deliveries``: how many deliveries the broker began on the link in all, before the request
    too (a library that grants the credit in one flow and drains in a second may be sent messages on the first
    before the second reaches the broker)."""

    asked: Frame | None
    broker_flows: list[Frame]
    transfers: list[Frame]
    after_end: int = 0
    deliveries: int = 0

    def answer(self) -> Frame | None:
        """The broker's flow that ended the drain: its first after the request with link-credit 0, else its last
        (what it said instead), else None."""
        last = self.broker_flows[-1] if self.broker_flows else None
        return next((f for f in self.broker_flows if _ends_drain(f)), last)

    def credit_used_up_by(self, t_ns: int) -> bool:
        """Whether the broker's frames that had reached the relay by ``t_ns`` had used the drain's credit up: a flow
        with link-credit 0, or as many deliveries begun as the request gave credit."""
        if self.asked is None:
            return False
        if any(_ends_drain(f) and f.t_ns <= t_ns for f in self.broker_flows):
            return True
        return sum(1 for f in self.transfers if f.t_ns <= t_ns) >= int(self.asked.fields.get("link-credit") or 0)


def _ends_drain(flow: Frame) -> bool:
    """Whether a flow of the broker's says the drain's credit is used up (link-credit 0, 2.6.7)."""
    return flow.fields.get("link-credit") == 0


def drain_wire(connection: ConnectionFrames) -> DrainWire:
    """The drain of ``connection``'s row link (:attr:`ConnectionFrames.row_link`, the receiving client's), found by
    each end's (channel, handle) from its attach, up to that end's detach."""
    link = connection.row_link
    if link is None or link.client_attach is None:
        return DrainWire(None, [], [])
    ours = _key(link.client_attach)
    theirs = _key(link.broker_attach) if link.broker_attach is not None else None
    asked: Frame | None = None
    flows: list[Frame] = []
    transfers: list[Frame] = []
    continuing = False
    ended = False  # the broker's flow said the drain's credit is used up, and the client has given none since
    after_end = deliveries = 0
    for frame in connection.frames:
        key = _key(frame)
        if frame.direction == "out" and key == ours:
            if frame.performative == "detach":
                break
            if asked is None and frame.performative == "flow" and frame.fields.get("drain"):
                asked = frame
            elif frame.performative == "flow" and frame.fields.get("link-credit"):
                ended = False  # credit given again
        elif frame.direction == "in" and key == theirs:
            if frame.performative == "detach":
                break
            if frame.performative == "flow" and asked is not None:
                ended = ended or _ends_drain(frame)
                flows.append(frame)
            elif frame.performative == "transfer":
                if not continuing:
                    deliveries += 1
                    if asked is not None:
                        transfers.append(frame)
                        after_end += ended
                continuing = bool(frame.fields.get("more"))
    return DrainWire(asked, flows, transfers, after_end, deliveries)


def _key(frame: Frame) -> tuple[int, Any]:
    return frame.channel, frame.fields.get("handle")


def receiver_drain(wire: DrainWire) -> dict[str, Any] | None:
    """The observation ``receiver_drain``: None when the client never set drain on the row's link, else
    ``asked`` (the link-credit its drain flow gave), ``transfers`` (the deliveries the broker began on the link after
    it), ``after_end`` (:attr:`DrainWire.after_end`: those begun after its flow said the credit was used up),
    ``deliveries`` (all it began on the link, :attr:`DrainWire.deliveries`) and the broker's answer
    (:meth:`DrainWire.answer`): its ``link-credit`` and ``delivery-count`` as typed on the wire, its ``drain`` field,
    and ``unused``: the credit the answer left neither used by a transfer nor advanced through (the request's credit
    less how far the answer's delivery-count moved from the request's, in serial arithmetic, 2.8.7); those are
    absent when the broker sent no flow after the request."""
    if wire.asked is None:
        return None
    asked = wire.asked.fields.get("link-credit")
    seen: dict[str, Any] = {"asked": asked, "transfers": len(wire.transfers), "after_end": wire.after_end,
                            "deliveries": wire.deliveries}
    answer = wire.answer()
    if answer is None:
        return seen
    fields = answer.fields
    seen.update({"link-credit": fields.get("link-credit"), "delivery-count": fields.get("delivery-count"),
                 "drain": fields.get("drain")})
    start, end = wire.asked.fields.get("delivery-count"), fields.get("delivery-count")
    if isinstance(asked, int) and isinstance(start, int) and isinstance(end, int):
        seen["unused"] = int(asked) - (int(end) - int(start)) % MODULUS
    return seen


def receiver_drained(reply: dict[str, Any] | None) -> str | None:
    """The observation ``receiver_drained``: what the receiving client's API told of the drain's end (the shim's
    ``drain`` reply): ``"drained"``, or the error's kind and description; None when no drain was asked."""
    if reply is None:
        return None
    if reply.get("ok"):
        return "drained"
    error = reply.get("error") or {}
    return f"{error.get('kind')}: {error.get('description')}"


def drained_disagreements(wire: DrainWire, reply: dict[str, Any] | None, replied_ns: int | None) -> list[str]:
    """Where the receiving client's API told its drain ended before the broker's frames could have told it, one
    line: the shim replied after its library told it, and the library after the relay forwarded what told it, so
    the broker's frames that had reached the relay by the reply (``replied_ns``, the frames' clock) must have used
    the drain's credit up (AMQP 1.0 2.6.7: a flow with link-credit 0, or transfers using it all), and the client
    must have asked for the drain on the wire at all."""
    if reply is None or not reply.get("ok") or replied_ns is None:
        return []
    api = reply.get("api")
    if wire.asked is None:
        return [f"the receiver client: its API told its drain ended ({api}), but it never set drain in a flow for "
                f"the link (AMQP 1.0 2.6.7: drain is the receiver's flag, set in its flow)"]
    if not wire.credit_used_up_by(replied_ns):
        return [f"the receiver client: its API told its drain ended ({api}) before the broker's frames that had "
                f"reached the relay had used up the {wire.asked.fields.get('link-credit')} credit it asked to drain "
                f"(AMQP 1.0 2.6.7: the sender ends a drain by using the credit up, and its flow says so)"]
    return []
