"""A sending client's answer to the broker's drain (a row's ``await_drain_answer``): what the wire shows of it.

AMQP 1.0 2.6.7: the receiver (here the broker) sets drain in its flow; a sender with too few messages to consume the
credit SHOULD send what it has, then "advance the delivery-count as much as possible, consuming all link-credit, and
send the flow state to the receiver", whose drain field is its actual drain mode (2.7.4). The broker's request states
its last known delivery-count of the sender and the credit it gives from there (2.6.7: the credit runs to that count
plus link-credit), so a sender that used the credit up, by transfers or by advancing its count, states that sum as its
delivery-count and link-credit 0. Every flow a client writes for a sending link is held to its counts in every cell
(:func:`.interop_flow.link_flow_disagreements`); this is the row's observation of the answer itself. Sans-I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqp_conformance.peers.frames import Frame

from .interop_drain import answer_fields, ends_drain
from .interop_links import WireLink, link_frames


@dataclass(frozen=True)
class SenderDrainWire:
    """The sending client's row link after the broker last asked it to drain: ``asked``, the broker's last flow for
    the link that set drain and gave credit (None: it never asked; a broker that asks again, or restates its request,
    is answered by the flows after its last request, which is the row's: the one made once the client had sent what
    it had); ``client_flows``, the client's flows for the link after it, in order; ``transfers``, the deliveries the
    client began on the link after it and before its answer (:meth:`answer`); ``after_answer``, those it began after
    its answer and before a flow of the broker's gave credit again. All up to either end's detach of the link."""

    asked: Frame | None
    client_flows: tuple[Frame, ...] = ()
    transfers: int = 0
    after_answer: int = 0

    def answer(self) -> Frame | None:
        """The client's flow that answered: its first after the request that says the request's credit is used up
        (:func:`.interop_drain.ends_drain`), else its last after the request (what it said instead), else None."""
        last = self.client_flows[-1] if self.client_flows else None
        return next((f for f in self.client_flows if self.asked is not None and ends_drain(f, self.asked)), last)

    @property
    def answered(self) -> bool:
        """Whether a flow of the client's after the request said the request's credit was used up
        (:func:`.interop_drain.ends_drain`)."""
        return self.asked is not None and any(ends_drain(f, self.asked) for f in self.client_flows)


def sender_drain_wire(frames: list[Frame], link: WireLink | None) -> SenderDrainWire:
    """The broker's last drain request on the sending client's row ``link`` (:attr:`.ConnectionFrames.row_link`, or
    :meth:`.ConnectionLinks.of_role` while the connection is live) and what the client wrote after it, among its
    connection's ``frames``, up to either end's detach (:func:`.interop_links.link_frames`)."""
    if link is None:
        return SenderDrainWire(None)
    asked: Frame | None = None
    flows: list[Frame] = []
    transfers = after_answer = 0
    continuing = answered = beyond = False  # beyond: answered, and no flow of the broker's gave credit since
    for frame in link_frames(frames, link):
        fields = frame.fields
        if frame.direction == "in" and frame.performative == "flow":
            if fields.get("drain") and fields.get("link-credit"):  # a request: what came before it answered another
                asked, flows, transfers, after_answer, answered, beyond = frame, [], 0, 0, False, False
            elif fields.get("link-credit"):
                beyond = False  # credit given again: a delivery after it is within credit
        elif frame.direction == "out" and asked is not None and frame.performative == "flow":
            flows.append(frame)
            if ends_drain(frame, asked):
                answered = beyond = True
        elif frame.direction == "out" and frame.performative == "transfer":
            if not continuing and asked is not None:
                transfers += not answered
                after_answer += beyond
            continuing = bool(fields.get("more"))
    return SenderDrainWire(asked, tuple(flows), transfers, after_answer)


def sender_drain(wire: SenderDrainWire) -> dict[str, Any] | None:
    """The observation ``sender_drain``: None when the broker never asked the sending client to drain; else
    ``asked`` (the link-credit the broker's request gave), ``transfers`` and ``after_answer``
    (:class:`SenderDrainWire`), ``answered`` (:attr:`SenderDrainWire.answered`) and the client's answer
    (:meth:`SenderDrainWire.answer`): its ``link-credit``, ``delivery-count``, ``drain`` and ``unused``
    (:func:`.interop_drain.answer_fields`); those are absent when the client wrote no flow after the request."""
    if wire.asked is None:
        return None
    asked = wire.asked.fields.get("link-credit")
    seen: dict[str, Any] = {"asked": asked, "transfers": wire.transfers, "after_answer": wire.after_answer,
                            "answered": wire.answered}
    answer = wire.answer()
    return seen if answer is None else {**seen, **answer_fields(wire.asked, answer)}
