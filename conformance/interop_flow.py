"""The flow control a client's library stated in its flows, held to the frames the relay saw (sans-I/O): its
session's transfer-ids and its receiving links' delivery-counts (AMQP 1.0 2.5.6, 2.6.7, 2.7.4). Each is a count
of frames one end wrote, so the relay, which sees each end's frames in the order written, bounds what the client
may state: exactly, for what it wrote itself; at most what had reached the relay, and never less than it stated
before, for what it read from the broker. Sequence numbers count on through 4294967295 to 0 (2.8.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.sequence import MODULUS, serial_difference

from .interop_observe import ConnectionFrames


@dataclass
class _SessionIds:
    """One client session's transfer-ids as the relay saw them: the client's begin's next-outgoing-id and the
    transfer frames it wrote since; the broker's begin's next-outgoing-id and the broker's transfer frames that
    reached the relay since; the least next-incoming-id (an offset from the broker's) the client's next flow may
    state; and how many transfer frames the broker's incoming-window has allowed the client in all (the most that
    any begin or flow of the broker that reached the relay allowed, counted from the client's begin)."""

    own_next: int | None = None  # the client's begin's next-outgoing-id; None when its begin was not seen
    written: int = 0
    broker_next: int | None = None  # the broker's begin's next-outgoing-id; None until it reached the relay
    seen: int = 0
    stated: int = 0
    allowed: int | None = None  # None until the broker's begin stated its incoming-window


def session_flow_disagreements(connections: dict[str, ConnectionFrames]) -> list[str]:
    """Where a client's session flow control disagreed with its frames and the broker's, one line a connection
    (``connections``: each connection, by role). AMQP 1.0 2.5.6: every transfer frame takes the next transfer-id of
    its sender's session, the first its begin's next-outgoing-id. So (2.7.4, flow) a client's flow states as
    next-outgoing-id its begin's plus the transfer frames it wrote before the flow, exactly (the relay sees one
    end's frames in the order written), and as next-incoming-id the broker's begin's next-outgoing-id plus the
    broker's transfer frames it had received: no more than had reached the relay before the flow, and never fewer
    than an earlier flow of the session stated (a transfer received stays received). And a client may send a
    transfer only while the broker's incoming-window has room for it (2.5.6: the sender "MUST NOT send" when its
    remote-incoming-window is zero): a transfer-id before the broker's next-incoming-id plus incoming-window of a
    begin or flow of the broker's. Judged against the most any of them allowed that had reached the relay before
    the transfer: a later one may have narrowed the window while the transfer was in flight. A flow whose session's
    broker begin had not reached the relay is left to :func:`early_flow_disagreements`; a new begin on a channel
    starts the count again. Transfer-ids are sequence numbers (2.8.7): counted on through 4294967295 to 0."""
    lines = []
    for role, connection in connections.items():
        sessions: dict[int, _SessionIds] = {}  # by the client's channel
        client_channel: dict[int, int] = {}  # the broker's channel -> the client's channel of that session
        broker_begun: dict[int, Frame] = {}  # the broker's own begins not yet answered, by channel
        for frame in connection.frames:
            fields = frame.fields
            found = None
            if frame.performative == "begin":
                answers = fields.get("remote-channel")
                if frame.direction == "out":  # a new session of the client's, or its answer to the broker's begin
                    session = sessions[frame.channel] = _SessionIds(own_next=_id(fields.get("next-outgoing-id")))
                    if answers is not None and int(answers) in broker_begun:
                        _broker_began(session, broker_begun.pop(int(answers)).fields)
                        client_channel[int(answers)] = frame.channel
                elif answers is not None and int(answers) in sessions:  # the broker's answer to the client's begin
                    _broker_began(sessions[int(answers)], fields)
                    client_channel[frame.channel] = int(answers)
                elif answers is None:  # the broker's own begin: the client's answer names its channel
                    broker_begun[frame.channel] = frame
            elif frame.direction == "out" and frame.channel in sessions:
                if frame.performative == "transfer":
                    found = _beyond_window(sessions[frame.channel])
                elif frame.performative == "flow":
                    found = _flow_ids(sessions[frame.channel], fields)
            elif frame.direction == "in" and frame.channel in client_channel:
                session = sessions[client_channel[frame.channel]]
                if frame.performative == "transfer":
                    session.seen += 1
                elif frame.performative == "flow":
                    _broker_allows(session, fields.get("next-incoming-id"), fields.get("incoming-window"))
            if found:
                lines.append(f"the {role} client's {frame.performative} on channel {frame.channel} {found}")
                break
    return lines


def _id(value: Any) -> int | None:
    return None if value is None else int(value) % MODULUS


def _broker_began(session: _SessionIds, fields: dict[str, Any]) -> None:
    """The broker's begin for ``session``: its transfers are counted from its next-outgoing-id, and its
    incoming-window counts from the client's begin's next-outgoing-id (2.5.6: the next-incoming-id it starts at)."""
    session.broker_next, session.seen = _id(fields.get("next-outgoing-id")), 0
    _broker_allows(session, session.own_next, fields.get("incoming-window"))


def _broker_allows(session: _SessionIds, next_incoming: Any, window: Any) -> None:
    """A begin or flow of the broker's for ``session``, stating the transfer-id it expects next and its
    incoming-window: the client may have read it, so the transfers it allows count from then on."""
    if next_incoming is None or window is None or session.own_next is None:
        return
    allowed = (int(next_incoming) - session.own_next) % MODULUS + int(window)
    session.allowed = allowed if session.allowed is None else max(session.allowed, allowed)


def _beyond_window(session: _SessionIds) -> str | None:
    """What is wrong with the client's next transfer frame in ``session``: sent beyond every incoming-window of the
    broker's (:func:`session_flow_disagreements`), or None; the frame is counted as written."""
    session.written += 1
    if session.allowed is None or session.written <= session.allowed:
        return None
    transfer_id = (session.own_next + session.written - 1) % MODULUS
    return (f"takes transfer-id {transfer_id}, beyond the broker's incoming-window: no begin or flow of the broker's "
            f"that had reached the relay allowed more than {session.allowed} transfer frame"
            f"{'' if session.allowed == 1 else 's'} of the session (AMQP 1.0 2.5.6: the sender MUST NOT send a "
            f"transfer while its remote-incoming-window is zero)")


def _flow_ids(session: _SessionIds, fields: dict[str, Any]) -> str | None:
    """What is wrong with one client flow's transfer-ids in ``session`` (:func:`session_flow_disagreements`), or
    None; the least next-incoming-id the session's next flow may state is moved up to this one's."""
    stated_out = _id(fields.get("next-outgoing-id"))
    if session.own_next is not None and stated_out is not None:
        due = (session.own_next + session.written) % MODULUS
        if stated_out != due:
            return (f"states next-outgoing-id {stated_out}, but its begin said {session.own_next} and it had "
                    f"written {session.written} transfer frame{'' if session.written == 1 else 's'} since: "
                    f"{due} (AMQP 1.0 2.5.6, 2.7.4)")
    stated_in = _id(fields.get("next-incoming-id"))
    if stated_in is None or session.broker_next is None:
        return None
    offset = (stated_in - session.broker_next) % MODULUS
    if offset > session.seen:
        return (f"states next-incoming-id {stated_in}, {offset} past the broker's begin's next-outgoing-id "
                f"{session.broker_next}, but only {session.seen} of the broker's transfer frames on the session had "
                f"reached the relay (AMQP 1.0 2.5.6, 2.7.4: the transfer-id it expects next)")
    if offset < session.stated:
        return (f"states next-incoming-id {stated_in}, {session.stated - offset} before the "
                f"{(session.broker_next + session.stated) % MODULUS} an earlier flow of the session stated (AMQP 1.0 "
                f"2.5.6: a transfer received stays received)")
    session.stated = offset
    return None


@dataclass
class _LinkCount:
    """One link of a client's as the relay saw it: the sender's initial-delivery-count (None until its attach reached
    the relay), the deliveries the sender's transfers on it had started, and the least count (an offset from that
    initial value) the client's next flow may state. :attr:`SENDER` is the direction of the sender's frames."""

    SENDER: ClassVar[str]
    name: Any
    initial: int | None = None
    started: int = 0
    continuing: bool = False  # the sender's last transfer on the link said more=true
    stated: int = 0

    def transfer(self, direction: str, fields: dict[str, Any]) -> None:
        """A transfer on the link: the sender's count a delivery it starts (a continuation counts none, 2.6.14)."""
        if direction == self.SENDER:
            self.started += not self.continuing
            self.continuing = bool(fields.get("more"))


@dataclass
class _ReceivingLink(_LinkCount):
    """A receiving link of a client's, and the most the broker's flows had moved its delivery-count on (a sender may
    advance it without a transfer, 2.6.7 drain), counted from the broker's initial-delivery-count."""

    SENDER: ClassVar[str] = "in"
    advanced: int = 0

    def flow(self, direction: str, fields: dict[str, Any]) -> str | None:
        """A flow on the link: the broker's may move its delivery-count on; the client's is judged
        (:func:`link_flow_disagreements`). What is wrong with the client's, or None."""
        count = fields.get("delivery-count")
        if count is None:
            return None
        if direction == "in":
            if self.initial is not None:
                self.advanced = max(self.advanced, (int(count) - self.initial) % MODULUS)
            return None
        return _stated_count(self, int(count))


@dataclass
class _SendingLink(_LinkCount):
    """A sending link of a client's, and the most deliveries the broker's flows had let it count (their
    delivery-count plus link-credit, counted from the client's initial-delivery-count)."""

    SENDER: ClassVar[str] = "out"
    allowed: int = 0
    sent_by_stated: int = 0  # the deliveries it had sent whole when its last flow stated a count
    drain_asked: bool = False  # a flow of the broker's that reached the relay set drain
    drain_withdrawn: bool = False  # ... and a later one cleared it: the client's drain mode when it wrote is unknown

    def flow(self, direction: str, fields: dict[str, Any]) -> str | None:
        """A flow on the link: the broker's gives credit and sets the drain mode it asks for; the client's is judged
        (:func:`link_flow_disagreements`). What is wrong with the client's, or None."""
        if self.initial is None:
            return None
        if direction == "in":
            self.allowed = max(self.allowed, deliveries_allowed(fields, self.initial) or 0)
            drain = bool(fields.get("drain"))
            self.drain_withdrawn |= self.drain_asked and not drain
            self.drain_asked |= drain
            return None
        count = fields.get("delivery-count")
        return _sent_count(self, None if count is None else int(count), bool(fields.get("drain")))


def deliveries_allowed(flow: dict[str, Any], initial: int) -> int | None:
    """How many deliveries, counted from the sender's ``initial``-delivery-count, a receiver's ``flow`` (its fields)
    lets the sender have sent: its delivery-count plus its link-credit (AMQP 1.0 2.6.7; a flow that leaves
    delivery-count out counts from the initial value), in serial arithmetic (2.8.7); None when it states no
    link-credit."""
    credit = flow.get("link-credit")
    if credit is None:
        return None
    count = flow.get("delivery-count")
    return (0 if count is None else (int(count) - initial) % MODULUS) + int(credit)


_Link = _ReceivingLink | _SendingLink


def link_flow_disagreements(connections: dict[str, ConnectionFrames]) -> list[str]:
    """Where a client's link stated a delivery-count its frames do not allow, one line a connection
    (``connections``: each connection, by role). AMQP 1.0 2.6.7: the sender's delivery-count starts at its attach's
    initial-delivery-count and counts each delivery it sends (a transfer that continues one counts no more, 2.6.14),
    or moves on without a transfer when the receiver asked it to drain, "consuming all link-credit".

    A receiving link (2.7.4, flow, delivery-count: "the last known value of the corresponding sending endpoint",
    which "MUST NOT" be set before the receiver has seen the sender's attach): a client's flow states no
    delivery-count before the broker's attach for the link reached the relay; states at most that
    initial-delivery-count plus the most that had reached the relay (the deliveries the broker's transfers started,
    or a count a flow of the broker's stated); and never less than an earlier flow of the link stated (a count the
    sender reached stays reached). A delivery still in flight to the client when it wrote may be left out.

    A sending link (2.7.4: from the sender the field "MUST be set to the current delivery-count of the Link
    Endpoint"): a client's flow states a delivery-count; at least its attach's initial-delivery-count plus the
    deliveries it had sent whole before the flow (the relay sees its frames in the order written); at most that
    value moved on through the credit the broker's flows had given (the most any that reached the relay before the
    flow allowed, as a drain consumes it); and never less than an earlier flow of the link stated. A flow that moves
    the count on by more than the deliveries sent since the link's last flow has drained (2.6.7: a sender moves it on
    without sending only when asked to drain), so it states drain true, the sender's actual drain mode (2.7.4) when it
    answers a broker's drain (unless a later flow of the broker's cleared drain before the answer reached the relay).

    Handles are each end's own (2.6.2): a detach or end frees them."""
    lines = []
    for role, connection in connections.items():
        found = _link_flow_fault(connection.frames)
        if found:
            lines.append(f"the {role} client's {found}")
    return lines


def _link_flow_fault(frames: list[Frame]) -> str | None:
    """The first flow of the client's among ``frames`` whose delivery-count breaks :func:`link_flow_disagreements`,
    described, or None."""
    links: dict[tuple[str, int, Any], _Link] = {}  # (direction, channel, handle) -> the link
    waiting: dict[Any, _Link] = {}  # by name: a link one end has attached and the other not yet
    for frame in frames:
        fields, key = frame.fields, (frame.direction, frame.channel, frame.fields.get("handle"))
        if frame.performative == "attach":
            _attached(links, waiting, frame)
        elif frame.performative == "detach":  # frees its end's handle
            links.pop(key, None)
        elif frame.performative == "end":  # frees every handle of its end's session
            for gone in [k for k in links if k[:2] == key[:2]]:
                del links[gone]
        elif key not in links:
            continue
        elif frame.performative == "transfer":
            links[key].transfer(frame.direction, fields)
        elif frame.performative == "flow":
            found = links[key].flow(frame.direction, fields)
            if found:
                kind = "receiving" if isinstance(links[key], _ReceivingLink) else "sending"
                return f"flow for {kind} link {links[key].name!r} on channel {frame.channel} {found}"
    return None


def _attached(links: dict[tuple[str, int, Any], _Link], waiting: dict[Any, _Link], attach: Frame) -> None:
    """``attach`` joins its link in ``links`` (by its end's handle): the first of the client's and the broker's
    attach of a name begins the link, which then waits in ``waiting`` for the other end's attach of that name. The
    sender's initial-delivery-count starts the count: the broker's for a receiving link of the client's, the
    client's own for a sending one."""
    fields = attach.fields
    ours = attach.direction == "out"
    role = fields.get("role")
    if role not in ("sender", "receiver"):
        return
    receiving = (role == "receiver") == ours  # the client's receiving link: its receiver, or the broker's sender
    name = fields.get("name")
    link = waiting.pop(name, None)
    if link is None or isinstance(link, _ReceivingLink) != receiving:  # the first attach of the link
        link = waiting[name] = _ReceivingLink(name) if receiving else _SendingLink(name)
    if role == "sender":
        link.initial = int(fields.get("initial-delivery-count") or 0)
    links[(attach.direction, attach.channel, fields.get("handle"))] = link


def _stated_count(link: _ReceivingLink, count: int) -> str | None:
    """What is wrong with a delivery-count a client's flow states for ``link``, or None; the least its next flow may
    state is moved up to this one."""
    if link.initial is None:
        return (f"states delivery-count {count} before the broker's attach for the link had reached the relay "
                f"(AMQP 1.0 2.7.4: delivery-count MUST NOT be set if the receiving endpoint has not yet seen the "
                f"sender's attach)")
    offset = (count - link.initial) % MODULUS
    reached = max(link.started, link.advanced)
    if offset > reached:
        from_zero = ", as though it counted from 0, not from the sender's initial value" if count <= reached else ""
        return (f"states delivery-count {count}, {offset} past the broker's initial-delivery-count {link.initial}, "
                f"but the broker's frames that had reached the relay had taken the link's delivery-count only "
                f"{reached} past it{from_zero} (AMQP 1.0 2.6.7, 2.7.4: the last known value of the sender's "
                f"delivery-count)")
    if offset < link.stated:
        return (f"states delivery-count {count}, {link.stated - offset} before the "
                f"{(link.initial + link.stated) % MODULUS} an earlier flow of the link stated (AMQP 1.0 2.6.7: the "
                f"sender's delivery-count only counts on)")
    link.stated = offset
    return None


def _sent_count(link: _SendingLink, count: int | None, drain: bool) -> str | None:
    """What is wrong with a delivery-count a client's flow (stating ``drain``) states for its sending ``link``, or
    None; the least its next flow may state is moved up to this one."""
    if count is None:
        return ("states no delivery-count (AMQP 1.0 2.7.4: from the sending link endpoint it MUST be set to the "
                "current delivery-count)")
    assert link.initial is not None
    offset = serial_difference(count, link.initial)  # serial numbers (2.8.7)
    whole = link.started - link.continuing  # a delivery still being written may not be counted yet
    if offset < 0:
        return (f"states delivery-count {count}, {-offset} before its attach's initial-delivery-count "
                f"{link.initial} (AMQP 1.0 2.6.7: the delivery-count starts there and only counts on)")
    if offset < whole:
        return (f"states delivery-count {count}, {offset} past its attach's initial-delivery-count {link.initial}, "
                f"but it had sent {whole} deliver{'y' if whole == 1 else 'ies'} on the link (AMQP 1.0 2.6.7, 2.7.4: "
                f"the current delivery-count counts every delivery sent)")
    most = max(link.started, link.allowed)
    if offset > most:
        return (f"states delivery-count {count}, {offset} past its attach's initial-delivery-count {link.initial}, "
                f"beyond the {most} the broker's flows that had reached the relay allowed (AMQP 1.0 2.6.7: a sender "
                f"moves its delivery-count on only by sending, or by consuming the link-credit it was given when "
                f"asked to drain)")
    if offset < link.stated:
        return (f"states delivery-count {count}, {link.stated - offset} before the "
                f"{(link.initial + link.stated) % MODULUS} an earlier flow of the link stated (AMQP 1.0 2.6.7: the "
                f"delivery-count only counts on)")
    drained = offset - link.stated - (link.started - link.sent_by_stated)  # beyond the sends since its last flow
    so_far = f"states delivery-count {count}, {drained} beyond what it had sent since it last stated one, so it"
    if drained > 0 and not link.drain_asked:
        return (f"{so_far} drained credit, though no flow of the broker's that had reached the relay asked it to "
                f"drain (AMQP 1.0 2.6.7: a sender moves its delivery-count on without sending only when asked to "
                f"drain)")
    if drained > 0 and not drain and not link.drain_withdrawn:
        return (f"{so_far} drained credit, but states drain false (AMQP 1.0 2.7.4: from the sender, drain is its "
                f"actual drain mode, and the broker's flows had asked it to drain)")
    link.stated, link.sent_by_stated = offset, whole
    return None
