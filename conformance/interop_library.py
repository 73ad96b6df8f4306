"""What each client's library did on the wire of its own accord, held to AMQP 1.0 whatever its API told (sans-I/O):
the credit it kept to, the handles it gave, the detaches it owed (an answer to the broker's, a close its
application asked for), the detaches and closes no one asked it for, and the hostname its open stated.

A shim does only what the script tells it (peers/shims/README.md), so a frame the library wrote that no command
asked for, or a frame it owed and did not write, is the library's act. Each connection comes indexed once
(:class:`.interop_observe.ConnectionFrames`: its links by handle, its deliveries).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amqp_conformance.peers.frames import first_frame
from amqp_conformance.peers.sequence import serial_difference
from amqp_conformance.peers.shimrun.process import ShimReply

from .interop_flow import deliveries_allowed
from .interop_observe import ConnectionFrames


@dataclass(frozen=True)
class SenderCredit:
    """The sending client's row link held to the credit the broker's flows gave it (:func:`sender_credit`):
    ``beyond``, the line for its first delivery beyond that credit (None: none was); ``flows_used``, how many of the
    broker's flows gave credit its deliveries went out under (a flow that raised what the link may have sent, and
    that some delivery needed: the first flow whose allowance reached it)."""

    beyond: str | None
    flows_used: int


def sender_credit(sending: ConnectionFrames) -> SenderCredit:
    """Whether the sending client kept to the credit the broker gave its link (AMQP 1.0 2.6.7: a sender may
    send a delivery only while its link-credit, ``delivery-count_rcv + link-credit_rcv - delivery-count_snd``
    from the receiver's last flow, is above zero), and under how many of the broker's flows its deliveries went.

    Deliveries are counted from the client's attach's initial-delivery-count (a transfer that continues a
    delivery uses no credit of its own, 2.6.14); a flow of the broker's that leaves delivery-count out counts
    from that initial value. A flow of the client's own for the link counts too: a sender that drains moves its
    delivery-count on through the credit left, consuming it (2.6.7), so a delivery sent after it needs credit a
    later flow of the broker's gave. Against a flow still in flight to the client when it sent (the relay forwarded
    it first), the most any flow so far allowed is the limit: a broker that lowers its credit is never a client's
    fault. Only the broker's flows for the client's link count (``sending``: the sending client's connection, its
    row link the client's sender): those on the handle of the broker's attach answering it, or any flow with a
    handle when the broker's attach is not among the frames. A delivery goes under the first flow whose allowance
    reached it: a broker that gives all its credit in one flow has the deliveries under that one alone.
    """
    attach = None if sending.row_link is None else sending.row_link.client_attach
    initial = int((attach.fields.get("initial-delivery-count") if attach else None) or 0)
    handle = None if sending.attach is None else sending.attach.fields.get("handle")
    own_handle = None if attach is None else attach.fields.get("handle")
    starts = {id(f) for f in sending.starts}  # a continuation uses no credit of its own
    allowed: int | None = None  # the most deliveries any of the broker's flows so far let the client send
    raised: list[int] = []  # each allowance a flow of the broker's raised it to, in order
    used: set[int] = set()  # the flows (their places in ``raised``) that some delivery went out under
    counted = drained = 0  # deliveries counted: sent, or drained by the client's own flow
    for frame in sending.frames:
        if frame.performative == "flow" and frame.fields.get("handle") is not None:
            if frame.direction == "out":
                count = frame.fields.get("delivery-count")
                ours = own_handle is None or frame.fields["handle"] == own_handle
                stated = None if count is None else serial_difference(int(count), initial)  # serial numbers (2.8.7)
                if stated is not None and ours and counted < stated:
                    counted, drained = stated, drained + stated - counted
                continue
            limit = deliveries_allowed(frame.fields, initial)
            if limit is None or (handle is not None and frame.fields["handle"] != handle):
                continue
            if allowed is None or limit > allowed:
                raised.append(limit)
            allowed = limit if allowed is None else max(allowed, limit)
        elif id(frame) in starts:
            counted += 1
            if allowed is None or counted > allowed:
                granted = "no flow of the broker's had given it credit" if allowed is None else \
                    f"the broker's flows had allowed {allowed} deliveries"
                spent = f"its delivery-count at {counted}, {drained} of it drained by its own flow; " if drained else ""
                return SenderCredit(f"the sending client sent delivery {counted - drained} of its link beyond the "
                                    f"credit the broker gave it ({spent}{granted}; AMQP 1.0 2.6.7)", len(used))
            used.add(bisect_left(raised, counted))
    return SenderCredit(None, len(used))


def late_detach_disagreements(replies: Sequence[ShimReply], connections: dict[str, ConnectionFrames],
                              asked_ns: dict[str, int]) -> list[str]:
    """Where a client asked to close its link wrote its detach only once it was asked to close its connection, one
    line each (``replies``: the cell's, both clients'; ``connections``: each connection, by role; ``asked_ns``:
    when each role's shim was asked to close, on the frames' clock). The script waits for the ``detach`` reply (at
    most :data:`.interop_script.DETACH_TIMEOUT_S`) before it asks for the close, so a library that closes its link
    when told has written the detach by then; one that leaves it for the connection's close has not closed its
    link when its application asked (2.6.6: a link is closed by sending a detach with closed=true). A client that
    wrote no detach at all is the row's (``link_closes``)."""
    lines = []
    for asked in replies:
        role = asked.role
        if asked.op != "detach" or role not in asked_ns or role not in connections:
            continue
        link = connections[role].row_link
        first = None if link is None else link.first_detach("out")
        ours = None if first is None else first[1]
        if ours is not None and ours.t_ns >= asked_ns[role]:
            lines.append(f"the {role} client: asked to close its link, its library wrote the detach only "
                         f"{(ours.t_ns - asked_ns[role]) / 1e6:.0f} ms after it was asked to close its connection")
    return lines


def handle_reuse_disagreements(connections: dict[str, ConnectionFrames]) -> list[str]:
    """Where a client attached a link on a handle one of its links still held on that session, one line a
    connection (``connections``: each connection, by role). A handle names one attached link of a session (AMQP 1.0
    2.6.2); the client's own detach frees it, and its end or a new begin on the channel frees them all. A
    library that gives a second link the handle of its first (the broker must then close with
    amqp:session:handle-in-use, 2.7.3) is at fault whatever the broker does about it."""
    lines = []
    for role, connection in connections.items():
        held: dict[int, dict[Any, Any]] = {}  # channel -> handle -> the link's name
        for frame in connection.frames:
            if frame.direction != "out":
                continue
            if frame.performative in ("begin", "end"):
                held.pop(frame.channel, None)
            elif frame.performative == "detach":
                held.get(frame.channel, {}).pop(frame.fields.get("handle"), None)
            elif frame.performative == "attach":
                handle, name = frame.fields.get("handle"), frame.fields.get("name")
                links = held.setdefault(frame.channel, {})
                if handle in links:
                    lines.append(f"the {role} client attached link {name!r} on handle {handle}, which its link "
                                 f"{links[handle]!r} still held (AMQP 1.0 2.6.2: a handle names one attached link "
                                 f"of a session; 2.7.3: handle-in-use)")
                    break
                links[handle] = name
    return lines


def early_flow_disagreements(connections: dict[str, ConnectionFrames]) -> list[str]:
    """Where a client wrote a flow carrying next-incoming-id before the broker's begin for that session had even
    reached the relay, one line a connection (``connections``: each connection, by role). AMQP 1.0 2.7.4 (flow,
    next-incoming-id): "This value MUST be set if the peer has received the begin frame for the session, and MUST
    NOT be set if it has not." The frames are in the order the relay read them, so such a flow was written
    before the client could have read that begin (the broker's begin whose remote-channel is the flow's channel;
    a client's begin that answers a broker's own begin had read it). A flow written after the begin reached the
    relay may have crossed it in flight, so it is not judged; a client's new begin on a channel starts a session
    the broker has not answered yet."""
    lines = []
    for role, connection in connections.items():
        answered: set[int] = set()  # the client's channels whose session the broker's begin has answered
        for frame in connection.frames:
            fields = frame.fields
            if frame.performative == "begin" and frame.direction == "in":
                if fields.get("remote-channel") is not None:
                    answered.add(int(fields["remote-channel"]))
            elif frame.performative == "begin":  # the client's
                if fields.get("remote-channel") is not None:  # it answers the broker's own begin, so it read it
                    answered.add(frame.channel)
                else:  # a new session on the channel, not answered yet
                    answered.discard(frame.channel)
            elif (frame.performative == "flow" and frame.direction == "out" and frame.channel not in answered
                  and fields.get("next-incoming-id") is not None):
                set_to = int(fields["next-incoming-id"])
                lines.append(f"the {role} client wrote a flow with next-incoming-id {set_to} on "
                             f"channel {frame.channel} before the broker's begin for that session had reached it "
                             f"(AMQP 1.0 2.7.4: next-incoming-id MUST NOT be set if the peer has not received the "
                             f"begin frame for the session)")
                break
    return lines


def unanswered_detach_disagreements(connections: dict[str, ConnectionFrames]) -> list[str]:
    """Where a client left a broker's closing detach unanswered, one line a link (``connections``: each
    connection, by role; each link of it looked at on its own, :func:`.interop_links.connection_links`). A broker
    that closes the client's link on its own (a detach with closed=true before any of the client's on that link,
    :meth:`.interop_links.WireLink.broker_closing`) is answered with the client's own detach closed=true (AMQP 1.0
    2.6.6: "the partner will destroy the corresponding link endpoint, and reply with its own detach frame with the
    closed flag set"); a client that ends its session or connection first has not closed its end of the link
    (unless the broker ended them first). Every client library answers so against every broker that detaches (the grid's
    subscription-refused row, 2 Dec)."""
    lines = []
    for role, connection in connections.items():
        frames = connection.frames
        for link in connection.links.links:
            closing = link.broker_closing()
            if closing is None:
                continue
            closed_at, broker_closed = closing
            answer = link.first_detach("out")
            answered_at = len(frames) if answer is None else answer[0]
            for frame in frames[closed_at + 1:answered_at]:
                if frame.performative not in ("end", "close"):
                    continue
                if frame.direction == "in":
                    break  # the broker ended the session or connection itself: the client answers that instead
                condition = (broker_closed.fields.get("error") or {}).get("condition")
                lines.append(f"the {role} client: the broker closed its link (detach closed=true, "
                             f"{'no error' if condition is None else condition}) and the client wrote its "
                             f"{frame.performative} without answering with its own detach (AMQP 1.0 2.6.6)")
                break
    return lines


def unasked_detach_disagreements(replies: Sequence[ShimReply], connections: dict[str, ConnectionFrames],
                                 asked_ns: dict[str, int]) -> list[str]:
    """Where a client's library detached a link on its own, one line a link (``replies``: the cell's, both
    clients'; ``connections``: each connection, by role; ``asked_ns``: when each role's shim was asked to close,
    on the frames' clock): the client's first detach of a link, written before its shim was asked to close and
    before the broker ended its session or closed its connection, on a link the script never asked it to detach
    (the script detaches only the row's link, :attr:`.interop_observe.ConnectionFrames.row_link`, with a
    ``detach`` command) and the broker had not detached first (the client's then answers it, 2.6.6). A shim does
    only what it is told (peers/shims/README.md): a library that closes one link when asked to close another, or
    drops a link its application still holds, ends what the application did not (AMQP 1.0 2.6.6: a peer detaches a
    link when it chooses to). A detach that carries an error is the library's judgement of the broker, held with the
    row's ``client_errors``."""
    lines = []
    for role, connection in connections.items():
        if role not in asked_ns:
            continue
        row = connection.row_link if any(r.role == role and r.op == "detach" for r in replies) else None
        ended_at = next((i for i, f in enumerate(connection.frames)
                         if f.direction == "in" and f.performative in ("end", "close")), len(connection.frames))
        for link in connection.links.links:
            ours = link.first_detach("out")
            if link is row or ours is None or link.detaches[0][1].direction == "in":
                continue
            at, frame = ours
            if at < ended_at and frame.t_ns < asked_ns[role] and not frame.fields.get("error"):
                lines.append(f"the {role} client: its library detached link {link.name!r} before it was asked to close "
                             "its connection, though it was never asked to close that link and the broker had not "
                             "detached it")
    return lines


def asked_hostname_disagreements(connections: dict[str, ConnectionFrames], hostname: str | None) -> list[str]:
    """Where a client's open did not state the hostname its shim's connect command gave (``hostname``; None: none
    was given, nothing to hold), one line each (``connections``: each connection, by role). The open's hostname
    names the host the client is connecting to (AMQP 1.0 2.7.1) and a broker may choose by it what it serves (the
    reference, its expectation set); a library that drops or replaces the name its application gave connects
    somewhere else than asked. A connection without the client's open is judged elsewhere (``client_closed``)."""
    if hostname is None:
        return []
    lines = []
    for role, connection in connections.items():
        ours = first_frame(connection.frames, "open", "out")
        if ours is not None and ours.fields.get("hostname") != hostname:
            lines.append(f"the {role} client: its open states hostname {ours.fields.get('hostname')!r}, not "
                         f"{hostname!r}, which its connect command gave (AMQP 1.0 2.7.1)")
    return lines


def unasked_close_disagreements(connections: dict[str, ConnectionFrames], asked_ns: dict[str, int],
                                dropped_ns: dict[str, int] | None = None) -> list[str]:
    """Where a client's library closed its connection on its own, one line each (``connections``: each
    connection, by role; ``asked_ns``: when each role's shim was asked to close, on the frames' clock; ``dropped_ns``:
    when the broker ended a role's connection without a close, on that clock): a ``close`` the client wrote before
    its shim was asked to close and before the broker's close (which it may answer, 2.4.3) or the end of the broker's
    stream (after which the connection is gone: closing it is no act over the application's head).
    A shim does only what it is told (peers/shims/README.md), so such a close is the library's own act, over the
    head of the application that had not asked for it (a broker's error on a link or a session leaves the
    connection to the application)."""
    lines = []
    for role, connection in connections.items():
        ours = first_frame(connection.frames, "close", "out")
        if ours is None or role not in asked_ns or ours.t_ns >= asked_ns[role]:
            continue
        theirs = first_frame(connection.frames, "close", "in")
        ended_ns = (dropped_ns or {}).get(role)
        if ended_ns is not None and ended_ns <= ours.t_ns:
            continue
        if theirs is None or theirs.t_ns > ours.t_ns:
            condition = (ours.fields.get("error") or {}).get("condition")
            lines.append(f"the {role} client: its library closed its connection before it was asked to and before "
                         f"the broker closed it ({'no error' if condition is None else condition})")
    return lines
