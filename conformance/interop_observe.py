"""What a grid cell observed, from the frames of its two connections (sans-I/O).

Both connections are captured by the interposer (peers/relay.py) with the client's frames as ``out`` and
the broker's as ``in``. The sending connection carries one link with role sender, the receiving one a link
with role receiver; the message is the first transfer on each. A row's ``first_link`` puts a link of the other
role on each connection before it, which carries no message: a link of the client's role is still the row's.
Each connection is indexed once (:func:`connection_frames`: its links, its deliveries, its dispositions, its
errors) and every observation and check reads that index. Everything here is computed from those frame lists:
nothing waits, nothing reads a socket. What each client's API told is held to these observations in
:mod:`.interop_told` and :mod:`.interop_told_errors`; what each library did on the wire of its own accord in
:mod:`.interop_library`, and the flow control it stated in :mod:`.interop_flow`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqp_conformance.peers.frames import Frame, first_frame
from amqp_conformance.peers.sequence import in_span, span, span_length
from amqp_conformance.peers.transfers import came_settled, deliveries

from .interop_links import ConnectionLinks, WireLink, connection_links

ERROR_PERFORMATIVES = ("detach", "end", "close")

KEPT_FIELDS = {  # the fields an observation keeps (the rest of a frame is in the frame log)
    "attach": ("role", "snd-settle-mode", "rcv-settle-mode"),
    "transfer": ("delivery-id", "settled", "more", "aborted", "state"),
    "disposition": ("role", "first", "last", "settled", "state", "batchable"),
}


def _kept(frame: Frame) -> dict[str, Any]:
    fields = KEPT_FIELDS.get(frame.performative)
    return dict(frame.fields) if fields is None else {k: frame.fields.get(k) for k in fields}


def _kept_delivery(transfers: list[Frame]) -> dict[str, Any]:
    """A delivery's first transfer as an observation keeps it, settled as the whole delivery came: a sender may
    set settled on any of a delivery's transfers, and once set it holds (AMQP 1.0 2.7.5)."""
    kept = _kept(transfers[0])
    if not kept.get("settled") and came_settled(transfers):
        kept["settled"] = True
    return kept


@dataclass(frozen=True)
class LinkView:
    """One connection's link and its first delivery, as the frames show them."""

    attach: Frame | None  # the broker's attach answering the client's
    transfers: list[Frame]  # every transfer of the link's delivery (by whichever end sends on it), the first first
    broker_dispositions: list[Frame]  # the broker's dispositions covering that delivery, in order
    client_dispositions: list[Frame]  # the client's, in order
    errors: list[dict[str, Any]]  # the broker's detach/end/close frames that carry an error
    client_errors: list[dict[str, Any]]  # the client's own detach/end/close frames that carry an error

    @property
    def transfer(self) -> Frame | None:
        """The delivery's first transfer (its delivery-id, tag and message-format); None when none came."""
        return self.transfers[0] if self.transfers else None


def _covers(frame: Frame, delivery_id: int) -> bool:
    first = frame.fields.get("first")
    last = frame.fields.get("last")
    if first is None:
        return False
    return in_span(delivery_id, int(first), int(first if last is None else last))


@dataclass(frozen=True)
class ConnectionFrames:
    """One connection's frames and what every check of it shares, found once: its links
    (:func:`.interop_links.connection_links`), the broker's attach answering the client's of ``role`` (the row's
    link, :attr:`row_link`), the transfers of each delivery on it
    (:func:`~amqp_conformance.peers.transfers.deliveries`) and the first of each, the dispositions, and the error
    frames of each end."""

    frames: list[Frame]
    role: str
    links: ConnectionLinks
    row_link: WireLink | None  # the client's first link of ``role`` (ConnectionLinks.of_role); None if it attached none
    deliveries: list[list[Frame]]  # the transfers of each delivery the link of ``role`` carried, whatever attached it,
    # but those its sender aborted (a message's deliveries: the views of index 0, 1, ... are of the messages)
    starts: list[Frame]  # the first transfer of every delivery it carried, the aborted ones too (each used a credit
    # and had a tag)
    dispositions: list[Frame]
    errors: list[dict[str, Any]]
    client_errors: list[dict[str, Any]]
    covering: dict[int, list[Frame]]  # each started delivery's id -> the dispositions whose range holds it, in order
    aborted: list[list[Frame]]  # the transfers of each delivery its sender aborted (a last transfer with aborted set:
    # AMQP 1.0 2.6.14, the receiver discards what came), in order

    @property
    def attach(self) -> Frame | None:
        """The broker's attach answering the row's link (:attr:`row_link`); None when it has none."""
        return None if self.row_link is None else self.row_link.broker_attach


def connection_frames(frames: list[Frame], client_role: str) -> ConnectionFrames:
    """``frames`` of the connection whose client holds a link of ``client_role`` ("sender" or "receiver"),
    indexed once for the views of its deliveries (:func:`link_view`) and for every check of its links (one walk,
    :func:`.interop_links.connection_links`)."""
    links = connection_links(frames)
    transfers = deliveries(frames, "out" if client_role == "sender" else "in")
    starts = [delivery[0] for delivery in transfers]
    whole: list[list[Frame]] = []
    aborted: list[list[Frame]] = []
    for delivery in transfers:  # a delivery whose last transfer says aborted was no delivery of a message (2.6.14)
        (aborted if delivery[-1].fields.get("aborted") else whole).append(delivery)
    dispositions = [f for f in frames if f.performative == "disposition"]
    return ConnectionFrames(frames, client_role, links, links.of_role(client_role), whole, starts, dispositions,
                            carried_errors(frames, "in"), carried_errors(frames, "out"),
                            _covering(starts, dispositions), aborted)


def _covering(starts: list[Frame], dispositions: list[Frame]) -> dict[int, list[Frame]]:
    """For each delivery-id of ``starts``, the dispositions whose range holds it (:func:`_covers`), in order: one
    pass over the dispositions, each walking the shorter of its range and the ids, so a cell of many deliveries
    is not judged by every disposition again for each."""
    ids = {int(t.fields["delivery-id"]) for t in starts if t.fields.get("delivery-id") is not None}
    covering: dict[int, list[Frame]] = {delivery_id: [] for delivery_id in ids}
    for frame in dispositions:
        first = frame.fields.get("first")
        if first is None:
            continue
        last = frame.fields.get("last")
        first, last = int(first), int(first if last is None else last)
        if span_length(first, last) <= len(ids):
            held = [n for n in span(first, last) if n in covering]
        else:
            held = [n for n in ids if in_span(n, first, last)]
        for delivery_id in held:
            covering[delivery_id].append(frame)
    return covering


def link_view(connection: ConnectionFrames, index: int = 0) -> LinkView:
    """The connection's client link, its delivery ``index`` (0: the first) and the dispositions covering it on
    the link's session (matched by role and delivery-id)."""
    client_role = connection.role
    transfers = connection.deliveries[index] if index < len(connection.deliveries) else []
    transfer = transfers[0] if transfers else None  # the one that carries the delivery-id
    broker_dispositions: list[Frame] = []
    client_dispositions: list[Frame] = []
    if transfer is not None and transfer.fields.get("delivery-id") is not None:
        delivery_id = int(transfer.fields["delivery-id"])
        # the peer's channel numbers differ per direction; a disposition is matched by its role and range
        other_role = "receiver" if client_role == "sender" else "sender"
        for frame in connection.covering.get(delivery_id, ()):
            if frame.direction == "in" and frame.fields.get("role") == other_role:
                broker_dispositions.append(frame)
            elif frame.direction == "out" and frame.fields.get("role") == client_role:
                client_dispositions.append(frame)
    return LinkView(connection.attach, transfers, broker_dispositions, client_dispositions, connection.errors,
                    connection.client_errors)


def carried_errors(frames: list[Frame], direction: str) -> list[dict[str, Any]]:
    """The detach, end and close frames of ``direction`` that carry an error: performative, condition, description
    (and a detach's ``closed``: whether it closed the link)."""
    return [{"performative": f.performative, "condition": (f.fields.get("error") or {}).get("condition"),
             "description": (f.fields.get("error") or {}).get("description"),
             **({"closed": f.fields.get("closed")} if f.performative == "detach" else {})}
            for f in frames if f.direction == direction and f.performative in ERROR_PERFORMATIVES
            and f.fields.get("error")]


def link_settlement(connection: ConnectionFrames) -> dict[str, Any]:
    """On the connection's row link (:attr:`ConnectionFrames.row_link`), walked once: how many deliveries it
    carried (:attr:`ConnectionFrames.starts`), how many ``clashes`` (a delivery whose tag, its first transfer's, is
    the tag of a delivery of the link that was still unsettled when it began), ``most_unsettled``: the most of its
    deliveries unsettled at once (below 2, no tag could clash whatever the library chose), and
    ``unsettled_at_detach``: how many of its deliveries were still unsettled when the client wrote its first detach on
    that link (None when it wrote none).
    A delivery is settled once a transfer or disposition covering it says settled, whichever end sent it: frames of
    a connection are processed in order, so the other end has settled too before it reads anything sent after
    (AMQP 1.0 2.6.12: a tag is unique among all deliveries either end could consider unsettled; 004, pn_delivery:
    among the delivery objects the link holds; 2.6.6: a closed link's endpoint is destroyed with whatever it still
    held unsettled)."""
    frames = connection.frames
    sending = "out" if connection.role == "sender" else "in"
    starts = {id(frame) for frame in connection.starts}
    link = connection.row_link
    detached = link.first_detach("out") if link is not None else None
    detach_at = None if detached is None else detached[0]  # the position of the client's first detach of the link
    unsettled: dict[int, Any] = {}
    deliveries, clashes, most, last = 0, 0, 0, None
    at_detach: int | None = None
    # the frames are in the order the relay read them (peers/relay.py), so a settlement, which the broker writes
    # only after it read the delivery, never precedes the delivery it settles. One that covers a delivery not yet
    # begun settles nothing
    for position, frame in enumerate(frames):
        fields = frame.fields
        if frame.performative == "transfer" and frame.direction == sending:
            if id(frame) in starts and fields.get("delivery-id") is not None:
                last = int(fields["delivery-id"])
                tag = bytes(fields["delivery-tag"]) if fields.get("delivery-tag") is not None else None
                deliveries += 1
                clashes += tag in unsettled.values()
                unsettled[last] = tag
                most = max(most, len(unsettled))
            if fields.get("settled") and last is not None:
                unsettled.pop(last, None)
        elif frame.performative == "disposition" and fields.get("settled"):
            for delivery_id in list(unsettled):
                if _covers(frame, delivery_id):
                    del unsettled[delivery_id]
        elif position == detach_at:
            at_detach = len(unsettled)
    return {"deliveries": deliveries, "clashes": clashes, "most_unsettled": most, "unsettled_at_detach": at_detach}


def link_closes(connection: ConnectionFrames) -> list[dict[str, Any]]:
    """Every detach on the connection's row link (:attr:`ConnectionFrames.row_link`; a detach on a handle no attach
    gave is counted with it, never dropped), in order: who wrote it (``client`` or ``broker``), its ``closed``
    flag as the wire has it (absent: false, its default, AMQP 1.0 2.7.7 detach) and its error ``condition`` (None
    when it carries no error). A client closes its link with a detach closed=true; the broker then destroys its
    endpoint and answers with its own detach closed=true (2.6.6). A row's ``first_link`` and its detaches are not
    the row link's."""
    link = connection.row_link
    detaches = sorted((link.detaches if link is not None else []) + connection.links.stray_detaches,
                      key=lambda d: d[0])
    return [{"by": "client" if f.direction == "out" else "broker",
             "closed": False if f.fields.get("closed") is None else f.fields["closed"],
             "condition": (f.fields.get("error") or {}).get("condition")}
            for _, f in detaches]


def client_closed(frames: list[Frame]) -> bool:
    """Whether the client sent its ``close`` on this connection: AMQP 1.0 2.4.3, a peer ends a connection by
    writing close (whether it closes first or answers the broker's close), never by dropping the socket."""
    return first_frame(frames, "close", "out") is not None


OTHER_ROLE = {"sender": "receiver", "receiver": "sender"}


def row_link_beside_first(connection: ConnectionFrames) -> bool | None:
    """Whether the client attached its row link on the session of its first link (a row's ``first_link``: its link
    of the other role, attached before), so that the two are told apart by their handles alone (AMQP 1.0 2.6.2: a
    handle names one attached link of a session): True on the same channel, False on another (a session of its
    own, where the handle may be the first link's number without naming it); None when either attach is missing."""
    first = connection.links.of_role(OTHER_ROLE[connection.role])
    row = connection.row_link
    if first is None or row is None or first.client_attach is None or row.client_attach is None:
        return None
    return first.client_attach.channel == row.client_attach.channel


# the terminus a client's own attach must carry for its link to move messages at all (AMQP 1.0 2.7.3: "a link
# with no source will never produce outgoing messages", "a link with no target will never permit incoming
# messages"): the sender's source, the receiver's target
OWN_TERMINUS = {"sender": "source", "receiver": "target"}


def client_terminus(connection: ConnectionFrames) -> bool | None:
    """Whether the client's own attach of its row link carries the terminus that link needs
    (:data:`OWN_TERMINUS`); None when it sent no such attach."""
    ours = None if connection.row_link is None else connection.row_link.client_attach
    return None if ours is None else ours.fields.get(OWN_TERMINUS[connection.role]) is not None


def settled_at(dispositions: list[Frame]) -> int | None:
    """When the first of ``dispositions`` that settles came (its ``t_ns``); None when none settles."""
    return next((f.t_ns for f in dispositions if f.fields.get("settled")), None)


def _settled_before(client: list[Frame], final_at: int | None) -> bool:
    """True when the client sent a settling disposition before ``final_at`` (or with none to wait for)."""
    settled = settled_at(client)
    return settled is not None and (final_at is None or settled < final_at)


TERMINAL_STATES = ("accepted", "rejected", "released", "modified")  # 3.4: received is the one non-terminal state


def _final_at(dispositions: list[Frame]) -> int | None:
    """When the other end first settled or gave a terminal state (3.4), from its dispositions."""
    return next((f.t_ns for f in dispositions if f.fields.get("settled")
                 or (f.fields.get("state") or {}).get("@type") in TERMINAL_STATES), None)


def answered_after_outcome(answers: list[Frame], outcomes: list[Frame]) -> bool | None:
    """Whether the broker's first disposition to the sending client for the delivery (``answers``) came after the
    receiving client's first disposition for it (``outcomes``) had left: True after, False before (an answer no
    consumer's outcome could have caused), None when either side wrote none. A router propagates the consumer's
    outcome to the producer (001, "Message settlement and reliability": the final disposition, Anycast column), so
    its answer follows that outcome on the frames' one clock: the relay stamps the outcome as it arrives and passes it
    on only once it has read it, and the answer it caused arrives after that, so its stamp is later up to the error
    of converting kernel stamps to that clock (a few microseconds: peers/recvtime.py). Measured: the answer 386 us
    after the outcome at the least, over 120 cells against the reference's router (6 Dec 2026)."""
    if not answers or not outcomes:
        return None
    return answers[0].t_ns > outcomes[0].t_ns


def _ordering(view: LinkView) -> dict[str, Any] | None:
    """The sending link's settlement ordering (003, "Delivery guarantees"): the receiver settle mode the broker's
    attach put in use (absent: first, AMQP 1.0 2.7.3), the broker's first disposition for the delivery, and
    whether the client settled it with a disposition of its own. None before the broker answered the attach."""
    if view.attach is None:
        return None
    return {"rcv-settle-mode": view.attach.fields.get("rcv-settle-mode") or "first",
            "broker-first": _kept(view.broker_dispositions[0]) if view.broker_dispositions else None,
            "client-settled": settled_at(view.client_dispositions) is not None}


@dataclass(frozen=True)
class CellFrames:
    """Both connections of a cell, indexed once (:func:`connection_frames`), with the observations that do not
    depend on which delivery is looked at."""

    sending: ConnectionFrames
    receiving: ConnectionFrames
    sender_tags: dict[str, int]
    client_closed: dict[str, bool]
    client_terminus: dict[str, bool | None]
    link_closes: dict[str, list[dict[str, Any]]]
    unsettled_at_detach: dict[str, int | None]
    row_link_beside_first: dict[str, bool | None]

    @property
    def by_role(self) -> dict[str, ConnectionFrames]:
        """Both connections by their client's role ("sender", "receiver"), as the checks of a cell take them."""
        return {"sender": self.sending, "receiver": self.receiving}


def cell_frames(sending: list[Frame], receiving: list[Frame]) -> CellFrames:
    """The cell's two connections (the sending client's frames, the receiving client's), indexed once."""
    connections = {"sender": connection_frames(sending, "sender"), "receiver": connection_frames(receiving, "receiver")}
    walked = {role: link_settlement(connection) for role, connection in connections.items()}
    return CellFrames(connections["sender"], connections["receiver"],
                      {key: walked["sender"][key] for key in ("deliveries", "clashes", "most_unsettled")},
                      {role: client_closed(c.frames) for role, c in connections.items()},
                      {role: client_terminus(c) for role, c in connections.items()},
                      {role: link_closes(c) for role, c in connections.items()},
                      {role: walked[role]["unsettled_at_detach"] for role in connections},
                      {role: row_link_beside_first(c) for role, c in connections.items()})


def observe(sending: list[Frame], receiving: list[Frame], index: int = 0) -> dict[str, Any]:
    """The cell's observations (:data:`.interop_scenarios.CROSSING`'s) from both connections' frames, of the
    delivery ``index`` on each link (0: the first, which a row's expectation judges)."""
    return observations(cell_frames(sending, receiving), index)


def observations(cell: CellFrames, index: int = 0) -> dict[str, Any]:
    """:func:`observe` over a cell indexed once, so that looking at each of its deliveries in turn costs one
    pass over the dispositions, not over every frame."""
    return views_observed(cell, link_view(cell.sending, index), link_view(cell.receiving, index))


def views_observed(cell: CellFrames, sent: LinkView, got: LinkView) -> dict[str, Any]:
    """:func:`observations` of one delivery from its two views (:func:`link_view`: ``sent`` of the sending
    connection, ``got`` of the receiving one, the same index), for a caller that reads a view itself too."""
    client_settled = settled_at(got.client_dispositions)
    broker_settled = settled_at(got.broker_dispositions)
    delivered_settled = came_settled(got.transfers)
    return {
        "sender_attach": _kept(sent.attach) if sent.attach else None,
        "sender_transfer": _kept_delivery(sent.transfers) if sent.transfers else None,
        "sender_tags": dict(cell.sender_tags),
        "sender_answers": [_kept(f) for f in sent.broker_dispositions],
        "sender_settles": [_kept(f) for f in sent.client_dispositions],
        "sender_settled_early": _settled_before(sent.client_dispositions, _final_at(sent.broker_dispositions)),
        "sender_ordering": _ordering(sent),
        "sender_answered_after_receiver": answered_after_outcome(sent.broker_dispositions, got.client_dispositions),
        "receiver_attach": _kept(got.attach) if got.attach else None,
        "delivered": _kept_delivery(got.transfers) if got.transfers else None,
        "receiver_answers": [_kept(f) for f in got.client_dispositions],
        "receiver_settled_first": (not delivered_settled and client_settled is not None
                                   and (broker_settled is None or client_settled < broker_settled)),
        "broker_settles_receiver": [_kept(f) for f in got.broker_dispositions],
        "errors": [{"connection": "sender", **e} for e in sent.errors]
                  + [{"connection": "receiver", **e} for e in got.errors],
        "client_errors": [{"connection": "sender", **e} for e in sent.client_errors]
                         + [{"connection": "receiver", **e} for e in got.client_errors],
        "client_closed": dict(cell.client_closed),
        "client_terminus": dict(cell.client_terminus),
        "link_closes": {role: list(closes) for role, closes in cell.link_closes.items()},
        "unsettled_at_detach": dict(cell.unsettled_at_detach),
        "row_link_beside_first": dict(cell.row_link_beside_first),
        "receiver_aborts": len(cell.receiving.aborted),
    }
