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
from amqp_conformance.peers.sequence import MODULUS, serial_difference

from .interop_links import link_frames
from .interop_observe import ConnectionFrames


@dataclass(frozen=True)
class DrainWire:
    """The row's receiving link's drain on the wire: the client's first flow for it that set drain (None: it never
    asked), the broker's flows for it after that one (but those that may predate the request, :func:`drain_wire`),
    and the first transfer of each delivery the broker began on it after that one, in order; ``after_end``: how many
    of those it began after a flow of its own that ended the drain (:func:`ends_drain`) and before a flow of
    the client's gave credit again: beyond the credit; ``begun_ns``: when each delivery the broker began on the link
    reached the relay, in order, before the request too (a library that grants the credit in one flow and drains in
    a second may be sent messages on the first before the second reaches the broker); ``initial``: the
    initial-delivery-count of the broker's attach (None where it gave none); ``client_flows``: the client's flows
    for the link, in order (with ``asked`` None, what credit it gave, if any)."""

    asked: Frame | None
    broker_flows: list[Frame]
    transfers: list[Frame]
    after_end: int = 0
    begun_ns: tuple[int, ...] = ()
    initial: int | None = None
    client_flows: tuple[Frame, ...] = ()

    @property
    def deliveries(self) -> int:
        """How many deliveries the broker began on the link in all (:attr:`begun_ns`)."""
        return len(self.begun_ns)

    def answer(self) -> Frame | None:
        """The broker's flow that ended the drain: its first after the request that used the request's credit up
        (:func:`ends_drain`), else its last (what it said instead), else None."""
        last = self.broker_flows[-1] if self.broker_flows else None
        return next((f for f in self.broker_flows if self.asked is not None and ends_drain(f, self.asked)), last)

    def credit_used_up_by(self, t_ns: int) -> bool:
        """Whether the broker's frames that had reached the relay by ``t_ns`` had used the drain's credit up: a flow
        that says so (:func:`ends_drain`), or deliveries that took the broker's delivery-count (its attach's
        initial-delivery-count and one a delivery begun, 2.6.7) to the end of the credit the request gave (its
        delivery-count and link-credit, in serial arithmetic, 2.8.7). Deliveries begun before the request count too:
        a library that grants credit in one flow and drains in a second may be sent the messages on the first, and
        its drain flow, crossing them, then states credit they already used. Without the counts on the wire, as many
        deliveries begun after the request as it gave credit."""
        if self.asked is None:
            return False
        if any(ends_drain(f, self.asked) and f.t_ns <= t_ns for f in self.broker_flows):
            return True
        return self.used_up(self.asked, t_ns)

    def credit_given_used_up_by(self, t_ns: int) -> bool:
        """With no drain asked (``asked`` None): whether the client had given credit on the link, by a flow before
        ``t_ns``, and the broker's deliveries that had reached the relay by ``t_ns`` had used up what the last of
        those flows gave (as :meth:`credit_used_up_by` reckons them): a library asked to drain credit it had given
        and that messages already used may send no drain flow, since nothing is left to drain."""
        given = [f for f in self.client_flows if f.t_ns <= t_ns and f.fields.get("link-credit")]
        if not given:
            return False
        return self.used_up(given[-1], t_ns)

    def used_up(self, request: Frame, t_ns: int) -> bool:
        """Whether the deliveries begun by ``t_ns`` used up the credit ``request`` (a flow of the client's) gave: the
        broker's delivery-count they reached against the request's delivery-count and link-credit, or, without those
        counts on the wire, as many deliveries begun after the request as it gave credit."""
        credit = int(request.fields.get("link-credit") or 0)
        start = request.fields.get("delivery-count")
        if isinstance(start, int) and isinstance(self.initial, int):
            reached = (int(self.initial) + sum(1 for begun in self.begun_ns if begun <= t_ns)) % MODULUS
            return serial_difference(reached, int(start) + credit) >= 0
        return sum(1 for begun in self.begun_ns if request.t_ns < begun <= t_ns) >= credit


def ends_drain(flow: Frame, request: Frame) -> bool:
    """Whether ``flow``, the sender's, says the credit the receiver's ``request`` gave is used up (AMQP 1.0 2.6.7):
    its delivery-count has reached the request's delivery-count plus its link-credit (serial, 2.8.7), so that the
    credit it has left is 0. A flow the sender wrote before the request reached it (2.7.4 lets it send its state at
    any time, and it may cross the request) states an older delivery-limit, and does not end the drain whatever
    link-credit it says. Without the counts on the wire, a flow with link-credit 0."""
    count, start, credit = (flow.fields.get("delivery-count"), request.fields.get("delivery-count"),
                            request.fields.get("link-credit"))
    if isinstance(count, int) and isinstance(start, int) and isinstance(credit, int):
        return serial_difference(int(count), int(start) + int(credit)) >= 0
    return flow.fields.get("link-credit") == 0


def delivery_limit(flow: Frame, initial: int | None) -> int | None:
    """The delivery-limit ``flow`` states (AMQP 1.0 2.6.7: delivery-count plus link-credit, serial), its
    delivery-count taken as the sender's ``initial`` where the flow has none (a receiver's that had not the
    sender's attach); None when a count or the credit is not to be had."""
    count, credit = flow.fields.get("delivery-count"), flow.fields.get("link-credit")
    count = initial if count is None else count
    if not isinstance(count, int) or not isinstance(credit, int):
        return None
    return (int(count) + int(credit)) % MODULUS


def drain_wire(connection: ConnectionFrames) -> DrainWire:
    """The drain of ``connection``'s row link (:attr:`ConnectionFrames.row_link`, the receiving client's): its frames
    up to either end's detach (:func:`.interop_links.link_frames`). A flow of the broker's after the request that
    does not set drain and states a delivery-limit the client had set before the request (or the link's with no
    credit given) may have been written before the request reached the broker (2.7.4: a sender states its flow at
    any time, its drain field its actual drain mode, and the flow may cross the request): it says nothing of the
    drain, and is left out of :attr:`DrainWire.broker_flows`. (Before the request no flow of the client's set
    drain, so such a flow says drain false; once it has read the request, a sender's flow says drain true.)"""
    link = connection.row_link
    if link is None or link.client_attach is None:
        return DrainWire(None, [], [])
    initial = link.broker_attach.fields.get("initial-delivery-count") if link.broker_attach is not None else None
    # the delivery-limits the broker may have known before the request: the link's with none given, or any the
    # client gave before the request
    earlier: set[int] = {initial} if isinstance(initial, int) else set()
    asked: Frame | None = None
    flows: list[Frame] = []
    transfers: list[Frame] = []
    begun: list[int] = []
    client_flows: list[Frame] = []
    continuing = False
    ended = False  # the broker's flow said the drain's credit is used up, and the client has given none since
    after_end = 0
    for frame in link_frames(connection.frames, link):
        if frame.direction == "out":
            if frame.performative == "flow":
                client_flows.append(frame)
            if asked is None and frame.performative == "flow" and frame.fields.get("drain"):
                asked = frame
            elif asked is None and frame.performative == "flow":
                limit = delivery_limit(frame, initial)
                if limit is not None:
                    earlier.add(limit)
            elif frame.performative == "flow" and frame.fields.get("link-credit"):
                ended = False  # credit given again
        else:
            if frame.performative == "flow" and asked is not None:
                if not frame.fields.get("drain") and delivery_limit(frame, None) in earlier:
                    continue  # may have been written before the request reached the broker
                ended = ended or ends_drain(frame, asked)
                flows.append(frame)
            elif frame.performative == "transfer":
                if not continuing:
                    begun.append(frame.t_ns)
                    if asked is not None:
                        transfers.append(frame)
                        after_end += ended
                continuing = bool(frame.fields.get("more"))
    return DrainWire(asked, flows, transfers, after_end, tuple(begun), initial, tuple(client_flows))


def credit_renewals(wire: DrainWire) -> int:
    """The observation ``receiver_credit_renewed``: how many times the receiving client gave the row's link credit
    again once the broker's deliveries had used up what it gave before (004 pn_delivery_aborted: a delivery
    consumes a credit, pn_link_flow() issues new credit): its flows with link-credit above 0 sent when the deliveries
    that had reached the relay had used up the credit of its previous such flow (:meth:`DrainWire.used_up`). A
    library that grants a thousand credits at once and is sent two messages renews none."""
    renewed, given = 0, None
    for flow in wire.client_flows:
        if not flow.fields.get("link-credit"):
            continue
        if given is not None and wire.used_up(given, flow.t_ns):
            renewed += 1
        given = flow
    return renewed


def receiver_drain(wire: DrainWire) -> dict[str, Any]:
    """The observation ``receiver_drain``: where the client never set drain on the row's link, ``asked`` None and
    ``deliveries`` (:attr:`DrainWire.deliveries`) only, with nothing after a request to count; else
    ``asked`` (the link-credit its drain flow gave), ``transfers`` (the deliveries the broker began on the link after
    it), ``after_end`` (:attr:`DrainWire.after_end`: those begun after its flow said the credit was used up),
    ``deliveries`` (all it began on the link, :attr:`DrainWire.deliveries`) and the broker's answer
    (:meth:`DrainWire.answer`): its ``link-credit`` and ``delivery-count`` as typed on the wire, its ``drain`` field,
    and ``unused`` (:func:`answer_fields`); those are absent when the broker sent no flow after the request."""
    if wire.asked is None:  # no drain flow: what the broker sent on the link, nothing asked of it
        return {"asked": None, "transfers": 0, "after_end": 0, "deliveries": wire.deliveries}
    asked = wire.asked.fields.get("link-credit")
    seen: dict[str, Any] = {"asked": asked, "transfers": len(wire.transfers), "after_end": wire.after_end,
                            "deliveries": wire.deliveries}
    answer = wire.answer()
    return seen if answer is None else {**seen, **answer_fields(wire.asked, answer)}


def answer_fields(request: Frame, answer: Frame) -> dict[str, Any]:
    """What a drain's answer says, for the observations of either end's drain: its ``link-credit`` and
    ``delivery-count`` as typed on the wire, its ``drain`` field, and ``unused``: the credit the answer left neither
    used by a transfer nor advanced through, the request's delivery-count plus its link-credit less the answer's
    delivery-count, in serial arithmetic (2.8.7), negative for a count moved beyond the credit; ``unused`` is absent
    when a count or the credit is not on the wire."""
    fields = answer.fields
    seen = {"link-credit": fields.get("link-credit"), "delivery-count": fields.get("delivery-count"),
            "drain": fields.get("drain")}
    credit, start, end = request.fields.get("link-credit"), request.fields.get("delivery-count"), seen["delivery-count"]
    if isinstance(credit, int) and isinstance(start, int) and isinstance(end, int):
        seen["unused"] = serial_difference(int(start) + int(credit), int(end))
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
        if wire.credit_given_used_up_by(replied_ns):
            return []  # the credit it gave was used up before it was asked to drain: nothing left to drain
        return [f"the receiver client: its API told its drain ended ({api}), but it never set drain in a flow for "
                f"the link, and the broker's frames that had reached the relay had not used up the credit it had "
                f"given (AMQP 1.0 2.6.7: drain is the receiver's flag, set in its flow)"]
    if not wire.credit_used_up_by(replied_ns):
        return [f"the receiver client: its API told its drain ended ({api}) before the broker's frames that had "
                f"reached the relay had used up the {wire.asked.fields.get('link-credit')} credit it asked to drain "
                f"(AMQP 1.0 2.6.7: the sender ends a drain by using the credit up, and its flow says so)"]
    return []
