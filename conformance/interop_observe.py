"""What a grid cell observed, from the frames of its two connections (sans-I/O), and whether each client's
API told its caller what the wire says.

Both connections are captured by the interposer (peers/relay.py) with the client's frames as ``out`` and
the broker's as ``in``. The sending connection carries one link with role sender, the receiving one a link
with role receiver; the message is the first transfer on each. A row's ``first_link`` puts a link of the other
role on each connection before it, which carries no message: a link of the client's role is still the row's.
Everything here is computed from those frame lists and the shims' reports: nothing waits, nothing reads a
socket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.sequence import in_span, span, span_length
from amqp_conformance.peers.shimrun.process import ShimEvent, ShimReply

from .interop_links import connection_links

ERROR_PERFORMATIVES = ("detach", "end", "close")
KEPT_FIELDS = {  # the fields an observation keeps (the rest of a frame is in the frame log)
    "attach": ("role", "snd-settle-mode", "rcv-settle-mode"),
    "transfer": ("delivery-id", "settled", "more", "aborted", "state"),
    "disposition": ("role", "first", "last", "settled", "state", "batchable"),
}


def _kept(frame: Frame) -> dict[str, Any]:
    fields = KEPT_FIELDS.get(frame.performative)
    return dict(frame.fields) if fields is None else {k: frame.fields.get(k) for k in fields}


@dataclass(frozen=True)
class ApiClaims:
    """What each client's profile claims its API tells, per role ("sender", "receiver"; a role not named claims
    nothing): a check holds a client to what it claims, and to nothing more. Each field is one capability's
    (fixtures/profiles.py): ``remote_state_fields`` (remote-state-fields: every field of a remote outcome),
    ``remote_settlement`` (remote-settlement), ``received_remote_state`` (received-remote-state: the state the
    broker gave a received delivery), ``link_opened`` (link-opened), ``link_close_told`` (link-close-told: a link
    the broker closed on its own), ``remote_settle_modes`` (remote-settle-modes: the broker's attach's modes)."""

    remote_state_fields: dict[str, bool] = field(default_factory=dict)
    remote_settlement: dict[str, bool] = field(default_factory=dict)
    received_remote_state: dict[str, bool] = field(default_factory=dict)
    link_opened: dict[str, bool] = field(default_factory=dict)
    link_close_told: dict[str, bool] = field(default_factory=dict)
    remote_settle_modes: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkView:
    """One connection's link and its first delivery, as the frames show them."""

    attach: Frame | None  # the broker's attach answering the client's
    transfer: Frame | None  # the first transfer of the link (by whichever end sends on it)
    broker_dispositions: list[Frame]  # the broker's dispositions covering that delivery, in order
    client_dispositions: list[Frame]  # the client's, in order
    errors: list[dict[str, Any]]  # the broker's detach/end/close frames that carry an error
    client_errors: list[dict[str, Any]]  # the client's own detach/end/close frames that carry an error


def _covers(frame: Frame, delivery_id: int) -> bool:
    first = frame.fields.get("first")
    last = frame.fields.get("last")
    if first is None:
        return False
    return in_span(delivery_id, int(first), int(first if last is None else last))


def client_attach(frames: list[Frame], client_role: str) -> Frame | None:
    """The client's own attach of its link of ``client_role`` on one connection; None when it sent none."""
    return next((f for f in frames if f.direction == "out" and f.performative == "attach"
                 and f.fields.get("role") == client_role), None)


def answering_attach(frames: list[Frame], ours: Frame | None) -> Frame | None:
    """The broker's attach answering the client's attach ``ours`` on one connection (the same link name); None
    when the client sent none or the broker did not answer it."""
    if ours is None:
        return None
    return next((f for f in frames if f.direction == "in" and f.performative == "attach"
                 and f.fields.get("name") == ours.fields.get("name")), None)


def deliveries(frames: list[Frame], direction: str) -> list[list[Frame]]:
    """The transfers of each delivery sent in ``direction`` ("out": the client's, "in": the broker's), a list a
    delivery, in the order sent. A transfer begins a delivery unless the transfer before it in that direction
    said ``more`` and was not aborted (AMQP 1.0 2.6.14, 2.7.5: a continuation transfer may leave its delivery-id
    out, or repeat it). Each cell's connection carries one link of each role at the most, and only the row's link
    carries messages, so one direction holds one link's transfers."""
    found: list[list[Frame]] = []
    continuing = False
    for frame in frames:
        if frame.performative != "transfer" or frame.direction != direction:
            continue
        if continuing:
            found[-1].append(frame)
        else:
            found.append([frame])
        continuing = bool(frame.fields.get("more")) and not frame.fields.get("aborted")
    return found


def delivery_starts(frames: list[Frame], direction: str) -> list[Frame]:
    """The first transfer of each delivery sent in ``direction``, in order (:func:`deliveries`)."""
    return [transfers[0] for transfers in deliveries(frames, direction)]


@dataclass(frozen=True)
class ConnectionFrames:
    """One connection's frames and what every delivery of its client's link shares, found once: the client's
    attach of ``role`` and the broker's answering it (matched by link name), the first transfer of each
    delivery (:func:`delivery_starts`), the dispositions, and the error frames of each end."""

    frames: list[Frame]
    role: str
    attach: Frame | None
    starts: list[Frame]
    dispositions: list[Frame]
    errors: list[dict[str, Any]]
    client_errors: list[dict[str, Any]]
    covering: dict[int, list[Frame]]  # each started delivery's id -> the dispositions whose range holds it, in order


def connection_frames(frames: list[Frame], client_role: str) -> ConnectionFrames:
    """``frames`` of the connection whose client holds a link of ``client_role`` ("sender" or "receiver"),
    indexed once for the views of its deliveries (:func:`link_view`)."""
    ours = client_attach(frames, client_role)
    answer = answering_attach(frames, ours)
    starts = [] if ours is None else delivery_starts(frames, "out" if client_role == "sender" else "in")
    dispositions = [f for f in frames if f.performative == "disposition"]
    return ConnectionFrames(frames, client_role, answer, starts, dispositions, _errors(frames, "in"),
                            _errors(frames, "out"), _covering(starts, dispositions))


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
    transfer = connection.starts[index] if index < len(connection.starts) else None
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
    return LinkView(connection.attach, transfer, broker_dispositions, client_dispositions, connection.errors,
                    connection.client_errors)


def _errors(frames: list[Frame], direction: str) -> list[dict[str, Any]]:
    """The detach, end and close frames of ``direction`` that carry an error: performative, condition, description
    (and a detach's ``closed``: whether it closed the link)."""
    return [{"performative": f.performative, "condition": (f.fields.get("error") or {}).get("condition"),
             "description": (f.fields.get("error") or {}).get("description"),
             **({"closed": f.fields.get("closed")} if f.performative == "detach" else {})}
            for f in frames if f.direction == direction and f.performative in ERROR_PERFORMATIVES
            and f.fields.get("error")]


def link_settlement(frames: list[Frame], client_role: str) -> dict[str, Any]:
    """On the link of ``client_role``, walked once: how many deliveries it carried (:func:`delivery_starts`), how
    many ``clashes`` (a delivery whose tag, its first transfer's, is the tag of a delivery of the link that was
    still unsettled when it began) and ``unsettled_at_detach``: how many of its deliveries were still unsettled
    when the client wrote its first detach on that link (None when it wrote none). A delivery is settled once a
    transfer or disposition covering it says settled, whichever end sent it: frames of a connection are processed
    in order, so the other end has settled too before it reads anything sent after (AMQP 1.0 2.6.12: a tag is unique
    among all deliveries either end could consider unsettled; 004, pn_delivery: among the delivery objects the
    link holds; 2.6.6: a closed link's endpoint is destroyed with whatever it still held unsettled)."""
    sending = "out" if client_role == "sender" else "in"
    starts = {id(frame) for frame in delivery_starts(frames, sending)}
    link = connection_links(frames).of_role(client_role)
    detached = link.first_detach("out") if link is not None else None
    detach_at = None if detached is None else detached[0]  # the position of the client's first detach of the link
    unsettled: dict[int, Any] = {}
    deliveries, clashes, last = 0, 0, None
    at_detach: int | None = None
    # the frames are in the order they reached the relay: each stamped with its packet's kernel receive time, the
    # clocks converted to within some 5 us (peers/recvtime.py), far less than any reply's round trip, so a
    # settlement never precedes the delivery it settles. One that covers a delivery not yet begun settles nothing
    for position, frame in enumerate(frames):
        fields = frame.fields
        if frame.performative == "transfer" and frame.direction == sending:
            if id(frame) in starts and fields.get("delivery-id") is not None:
                last = int(fields["delivery-id"])
                tag = bytes(fields["delivery-tag"]) if fields.get("delivery-tag") is not None else None
                deliveries += 1
                clashes += tag in unsettled.values()
                unsettled[last] = tag
            if fields.get("settled") and last is not None:
                unsettled.pop(last, None)
        elif frame.performative == "disposition" and fields.get("settled"):
            for delivery_id in list(unsettled):
                if _covers(frame, delivery_id):
                    del unsettled[delivery_id]
        elif position == detach_at:
            at_detach = len(unsettled)
    return {"deliveries": deliveries, "clashes": clashes, "unsettled_at_detach": at_detach}


def link_closes(frames: list[Frame], client_role: str) -> list[dict[str, Any]]:
    """Every detach on the client's link of ``client_role`` on one connection (the row's link,
    :meth:`.interop_links.ConnectionLinks.of_role`; a detach on a handle no attach gave is counted with it, never
    dropped), in order: who wrote it (``client`` or ``broker``), its ``closed`` flag as the wire has it (absent:
    false, its default, AMQP 1.0 2.7.7 detach) and its error ``condition`` (None when it carries no error). A
    client closes its link with a detach closed=true; the broker then destroys its endpoint and answers with its
    own detach closed=true (2.6.6). A row's ``first_link`` and its detaches are not the row link's."""
    links = connection_links(frames)
    link = links.of_role(client_role)
    detaches = sorted((link.detaches if link is not None else []) + links.stray_detaches, key=lambda d: d[0])
    return [{"by": "client" if f.direction == "out" else "broker",
             "closed": False if f.fields.get("closed") is None else f.fields["closed"],
             "condition": (f.fields.get("error") or {}).get("condition")}
            for _, f in detaches]


def client_closed(frames: list[Frame]) -> bool:
    """Whether the client sent its ``close`` on this connection: AMQP 1.0 2.4.3, a peer ends a connection by
    writing close (whether it closes first or answers the broker's close), never by dropping the socket."""
    return any(f.direction == "out" and f.performative == "close" for f in frames)


# the terminus a client's own attach must carry for its link to move messages at all (AMQP 1.0 2.7.3: "a link
# with no source will never produce outgoing messages", "a link with no target will never permit incoming
# messages"): the sender's source, the receiver's target
OWN_TERMINUS = {"sender": "source", "receiver": "target"}


def client_terminus(frames: list[Frame], client_role: str) -> bool | None:
    """Whether the client's own attach of ``client_role`` carries the terminus its link needs
    (:data:`OWN_TERMINUS`); None when it sent no such attach."""
    ours = client_attach(frames, client_role)
    return None if ours is None else ours.fields.get(OWN_TERMINUS[client_role]) is not None


def _settled_at(dispositions: list[Frame]) -> int | None:
    return next((f.t_ns for f in dispositions if f.fields.get("settled")), None)


def _settled_before(client: list[Frame], final_at: int | None) -> bool:
    """True when the client sent a settling disposition before ``final_at`` (or with none to wait for)."""
    settled = _settled_at(client)
    return settled is not None and (final_at is None or settled < final_at)


TERMINAL_STATES = ("accepted", "rejected", "released", "modified")  # 3.4: received is the one non-terminal state


def _final_at(dispositions: list[Frame]) -> int | None:
    """When the other end first settled or gave a terminal state (3.4), from its dispositions."""
    return next((f.t_ns for f in dispositions if f.fields.get("settled")
                 or (f.fields.get("state") or {}).get("@type") in TERMINAL_STATES), None)


def _ordering(view: LinkView) -> dict[str, Any] | None:
    """The sending link's settlement ordering (003, "Delivery guarantees"): the receiver settle mode the broker's
    attach put in use (absent: first, AMQP 1.0 2.7.3), the broker's first disposition for the delivery, and
    whether the client settled it with a disposition of its own. None before the broker answered the attach."""
    if view.attach is None:
        return None
    return {"rcv-settle-mode": view.attach.fields.get("rcv-settle-mode") or "first",
            "broker-first": _kept(view.broker_dispositions[0]) if view.broker_dispositions else None,
            "client-settled": _settled_at(view.client_dispositions) is not None}


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


def cell_frames(sending: list[Frame], receiving: list[Frame]) -> CellFrames:
    """The cell's two connections (the sending client's frames, the receiving client's), indexed once."""
    sent, got = link_settlement(sending, "sender"), link_settlement(receiving, "receiver")
    return CellFrames(connection_frames(sending, "sender"), connection_frames(receiving, "receiver"),
                      {"deliveries": sent["deliveries"], "clashes": sent["clashes"]},
                      {"sender": client_closed(sending), "receiver": client_closed(receiving)},
                      {"sender": client_terminus(sending, "sender"),
                       "receiver": client_terminus(receiving, "receiver")},
                      {"sender": link_closes(sending, "sender"), "receiver": link_closes(receiving, "receiver")},
                      {"sender": sent["unsettled_at_detach"], "receiver": got["unsettled_at_detach"]})


def observe(sending: list[Frame], receiving: list[Frame], index: int = 0) -> dict[str, Any]:
    """The cell's observations (:data:`.interop_scenarios.CROSSING`'s) from both connections' frames, of the
    delivery ``index`` on each link (0: the first, which a row's expectation judges)."""
    return observations(cell_frames(sending, receiving), index)


def observations(cell: CellFrames, index: int = 0) -> dict[str, Any]:
    """:func:`observe` over a cell indexed once, so that looking at each of its deliveries in turn costs one
    pass over the dispositions, not over every frame."""
    return _observations(cell, link_view(cell.sending, index), link_view(cell.receiving, index))


def _observations(cell: CellFrames, sent: LinkView, got: LinkView) -> dict[str, Any]:
    client_settled = _settled_at(got.client_dispositions)
    broker_settled = _settled_at(got.broker_dispositions)
    delivered_settled = bool(got.transfer is not None and got.transfer.fields.get("settled"))
    return {
        "sender_attach": _kept(sent.attach) if sent.attach else None,
        "sender_transfer": _kept(sent.transfer) if sent.transfer else None,
        "sender_tags": dict(cell.sender_tags),
        "sender_answers": [_kept(f) for f in sent.broker_dispositions],
        "sender_settles": [_kept(f) for f in sent.client_dispositions],
        "sender_settled_early": _settled_before(sent.client_dispositions, _final_at(sent.broker_dispositions)),
        "sender_ordering": _ordering(sent),
        "receiver_attach": _kept(got.attach) if got.attach else None,
        "delivered": _kept(got.transfer) if got.transfer else None,
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
    }


# The fields of a delivery state a shim reports (peers/shims/README.md, "Delivery reports"), where the wire holds
# each, and the value a field left out of the wire has: AMQP 1.0 3.4.3 (rejected's error: condition and
# description) and 3.4.5 (modified: delivery-failed and undeliverable-here default false; message-annotations).
REPORTED_STATE_FIELDS: dict[str, tuple[tuple[str, tuple[str, ...], Any], ...]] = {
    "rejected": (("condition", ("error", "condition"), None), ("description", ("error", "description"), None)),
    "modified": (("delivery_failed", ("delivery-failed",), False),
                 ("undeliverable_here", ("undeliverable-here",), False),
                 ("message_annotations", ("message-annotations",), None)),
}


def _plain(value: Any) -> Any:
    """A state field as the shims' JSON gives it: a map with text keys, an empty map as none."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()} or None
    return value


def _wire_field(state: dict[str, Any], path: tuple[str, ...], default: Any) -> Any:
    value: Any = state
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return _plain(default if value is None else value)


def _state_summary(state: Any) -> dict[str, Any] | None:
    """A wire delivery state in the shims' report form (``{"type": ..., "condition": ...}``)."""
    if not isinstance(state, dict) or "@type" not in state:
        return None
    summary: dict[str, Any] = {"type": state["@type"]}
    for name, path, default in REPORTED_STATE_FIELDS.get(state["@type"], ()):
        summary[name] = _wire_field(state, path, default)
    return summary


def _last_state(dispositions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The state of the last of ``dispositions`` (kept frames, in order) that carries one, in the shims' report
    form (:func:`_state_summary`); None when none does. A disposition may carry no state (AMQP 1.0 2.7.6: its
    state field is optional): a broker that settles a delivery it gave an outcome to earlier, with no state
    the second time, has told no other outcome."""
    for disposition in reversed(dispositions):
        summary = _state_summary(disposition.get("state"))
        if summary is not None:
            return summary
    return None


def _field_disagreements(reported: dict[str, Any], wire: dict[str, Any], tells_fields: bool,
                         client: str = "sending client") -> list[str]:
    """Where a client's reported remote state (of the wire's type) and the wire's differ in a field: a field it
    reports must be the wire's; with ``tells_fields`` (its API gives every field), a field it leaves null must
    be absent from the wire too. ``client``: who told it, as the lines name it."""
    lines = []
    for name, _, default in REPORTED_STATE_FIELDS.get(wire["type"], ()):
        told = _plain(reported.get(name))
        if told is None and not tells_fields:
            continue
        if (default if told is None else told) != wire[name]:
            said = "nothing" if told is None else repr(told)
            lines.append(f"{client}: its API gave the remote {wire['type']}'s {name} as {said}, the wire "
                         f"carries {wire[name]!r}"
                         + (" (its profile claims remote-state-fields)" if told is None else ""))
    return lines


def report_disagreements(observed: dict[str, Any], send_report: dict[str, Any] | None,
                         receive_report: dict[str, Any] | None, sender_tells_fields: bool = False) -> list[str]:
    """Where a client's API told its caller something the wire contradicts, one line each ([] when none).

    A shim reports what its library's API said (null where the API says nothing); the wire is the truth. The
    sending client's ``remote_state`` must be the state of the broker's last disposition for the message that
    carries one (:func:`_last_state`): its type, and every field of it the shim reports (a rejected's condition
    and description, a modified's flags and annotations, :data:`REPORTED_STATE_FIELDS`); with
    ``sender_tells_fields`` (the sending client's profile claims ``remote-state-fields``: its API tells the
    outcome and gives all of its fields) a field it reports null must be absent from the wire too, and so must
    a terminal state when it reports none. The receiving client's ``disposed`` outcome must be the state its
    own disposition carried, when it sent one.
    """
    lines: list[str] = []
    wire = _last_state(observed.get("sender_answers") or [])
    if send_report is not None and send_report.get("remote_state") is None:
        if sender_tells_fields and wire is not None and wire["type"] in TERMINAL_STATES:
            lines.append(f"sending client: its API told no remote state, the broker's last disposition carries "
                         f"{wire} (its profile claims remote-state-fields)")
    elif send_report is not None:
        reported = send_report["remote_state"]
        if wire is None:
            lines.append(f"sending client: its API reported remote state {reported} but the broker sent no state "
                         "for the message")
        elif reported.get("type") != wire["type"]:
            lines.append(f"sending client: its API reported remote state {reported}, the wire says {wire}")
        else:
            lines += _field_disagreements(reported, wire, sender_tells_fields)
    if receive_report is not None and receive_report.get("disposed") is not None:
        told = receive_report["disposed"].get("type")
        answers = observed.get("receiver_answers") or []
        states = [_state_summary(a.get("state")) for a in answers]
        delivered = observed.get("delivered") or {}
        if not answers and not delivered.get("settled"):
            lines.append(f"receiving client: its API accepted the outcome {told} but no disposition for the message "
                         "went on the wire")
        elif answers and not any(s is not None and s["type"] == told for s in states):
            lines.append(f"receiving client: its API accepted the outcome {told}, its dispositions carried "
                         f"{[s and s['type'] for s in states]}")
    return lines


def _last_said(report: dict[str, Any] | None, events: list[dict[str, Any]], link: str, key: str) -> Any:
    """The delivery report's ``key``, then that of each later ``delivery-update`` event of the same delivery (same
    link and index) that says it (not null), the last word counting; None when nothing said."""
    if report is None:
        return None
    said = report.get(key)
    index = report.get("index", 0)
    for event in events:
        if (event.get("event") == "delivery-update" and event.get("link") == link and event.get("index") == index
                and event.get(key) is not None):
            said = event[key]
    return said


def _last_told(report: dict[str, Any] | None, events: list[dict[str, Any]], link: str, key: str) -> bool | None:
    """:func:`_last_said` of a yes-or-no ``key``, as a bool; None when nothing said."""
    said = _last_said(report, events, link, key)
    return None if said is None else bool(said)


def told_remote_settled(report: dict[str, Any] | None, events: list[dict[str, Any]], link: str) -> bool | None:
    """What a client last told of the other end's settlement of its reported delivery on ``link``: the delivery
    report's ``remote_settled``, then each later ``delivery-update`` event of that delivery (same link and
    index) that says (peers/shims/README.md, "Events"); None when nothing said."""
    return _last_told(report, events, link, "remote_settled")


def told_locally_settled(report: dict[str, Any] | None, events: list[dict[str, Any]], link: str) -> bool | None:
    """What a client last told of its own settlement of its reported delivery on ``link``, read as
    :func:`told_remote_settled` reads the other end's (``locally_settled``); None when nothing said."""
    return _last_told(report, events, link, "locally_settled")


def told_received_state(report: dict[str, Any] | None, events: list[dict[str, Any]], link: str
                        ) -> dict[str, Any] | None:
    """What a receiving client last told of the state the broker (the delivery's sender) gave a delivery it
    received on ``link``: its receive report's ``remote_state``, then that of each later ``delivery-update``
    event of the delivery that carries one (:func:`_last_said`); None when nothing said."""
    return _last_said(report, events, link, "remote_state")


def received_state_disagreements(observed: dict[str, Any], told: dict[str, Any] | None, claims: bool) -> list[str]:
    """Where what the receiving client's API told of the state the broker gave its delivery (``told``:
    :func:`told_received_state`) contradicts the broker's dispositions of it (``broker_settles_receiver``), one
    line each. A told state must be the state of the broker's last disposition that carries one (a disposition
    may carry none, AMQP 1.0 2.7.6, and then tells no new state: :func:`_last_state`), its type and every
    field it reports (004, "Dispositions": the remote disposition holds the last known remote state of the
    delivery); with ``claims`` (the receiving client's profile claims ``received-remote-state``: its API tells
    that state, 004 ``pn_delivery_remote_state``) telling none where that disposition carries a terminal state
    disagrees too."""
    wire = _last_state(observed.get("broker_settles_receiver") or [])
    if told is None:
        if claims and wire is not None and wire["type"] in TERMINAL_STATES:
            return [f"receiving client: its API told no state the broker gave the message, the broker's last "
                    f"disposition of it carries {wire} (its profile claims received-remote-state)"]
        return []
    if wire is None:
        return [f"receiving client: its API told that the broker gave the message the state {told}, no "
                "disposition of the broker carried one"]
    if told.get("type") != wire["type"]:
        return [f"receiving client: its API told that the broker gave the message the state {told}, the wire "
                f"says {wire}"]
    return _field_disagreements(told, wire, False, "receiving client")


def second_settlement_disagreements(told_remote: dict[str, bool | None],
                                    told_local: dict[str, bool | None]) -> list[str]:
    """Where a client's API told it that the other end settled a delivery and the client had still not settled
    its own end at the cell's end, one line each (per role, "sender" and "receiver": what the client last told,
    :func:`told_remote_settled` and :func:`told_locally_settled`). In both unsettled orderings of 003 ("Delivery
    guarantees") the end that settles second settles once it sees the first has: the sender once the receiver
    settled (at least once), the receiver once the sender settled (exactly once); every shim's policy is that
    one (peers/shims/README.md). A client that does not say (None either way) is not held."""
    lines = []
    for role, client in (("sender", "sending client"), ("receiver", "receiving client")):
        if told_remote.get(role) is True and told_local.get(role) is False:
            lines.append(f"{client}: its API told that the broker settled the message, and the client had not "
                         "settled it by the cell's end (003 \"Delivery guarantees\": the end that settles second "
                         "settles once it sees the other has)")
    return lines


def body_disagreements(sent: list[str], receive_reply: dict[str, Any] | None) -> list[str]:
    """Where the receiving client's API gave other message bodies than the sending client sent, in another
    order, or other messages: one line (a successful receive reply only; a failed one is judged by the row).
    The messages of one link arrive in the order sent (AMQP 1.0 2.6, 2.6.12), each with the body it was sent
    with (3.2)."""
    if not receive_reply or not receive_reply.get("ok"):
        return []
    got = [d.get("body") for d in receive_reply.get("deliveries") or []]
    if got == sent:
        return []

    def shown(bodies: list[Any]) -> list[Any]:
        return [b if not isinstance(b, str) or len(b) <= 12 else f"{b[:8]}... ({len(b)} chars)" for b in bodies]

    return [f"receiving client: its API gave the bodies {shown(got)}, the sending client sent {shown(sent)}"]


# what a shim's attach reply reports of the broker's attach, the wire's field, and its value when the broker's
# attach leaves it out (AMQP 1.0 2.7.3: snd-settle-mode defaults to mixed, rcv-settle-mode to first)
REPORTED_ATTACH_FIELDS = (("remote_snd_settle_mode", "snd-settle-mode", "mixed"),
                          ("remote_rcv_settle_mode", "rcv-settle-mode", "first"))


def attach_disagreements(observed: dict[str, Any], attach_replies: dict[str, dict[str, Any]],
                         claims: ApiClaims) -> list[str]:
    """Where a client's attach reply contradicts the broker's attach on the wire, one line each.
    ``attach_replies``: per role, the shim's successful attach reply; ``claims``: what each client's profile
    claims (here ``link-opened`` and ``remote-settle-modes``).

    - Every settle mode a reply reports of the broker's attach (not null) must be the one the broker's attach
      carries (:data:`REPORTED_ATTACH_FIELDS`); a client that claims ``remote-settle-modes`` (its API tells
      them) must report both (2.7.3: an attach that leaves one out means its default, which the API tells too).
    - A client that claims ``link-opened`` (its API tells its caller when the broker's attach arrived, and its
      shim names that notification in the reply's ``api``) must name one when the broker answered its attach:
      AMQP 1.0 2.6.3, the broker's attach establishes the link, and an API that never says so leaves its caller
      unable to tell an established link from one still waiting."""
    lines = []
    for role, client in (("sender", "sending client"), ("receiver", "receiving client")):
        reply, wire = attach_replies.get(role), observed.get(f"{role}_attach")
        if reply is None or not wire:
            continue
        for reported, attach_field, default in REPORTED_ATTACH_FIELDS:
            told = reply.get(reported)
            actual = wire.get(attach_field) if wire.get(attach_field) is not None else default
            if told is not None and told != actual:
                lines.append(f"{client}: its API reported the broker's {attach_field} {told!r}, the broker's "
                             f"attach says {actual!r}")
            elif told is None and claims.remote_settle_modes.get(role):
                lines.append(f"{client}: its API did not tell the broker's {attach_field} (null; the broker's attach "
                             f"says {actual!r}; its profile claims remote-settle-modes)")
        if claims.link_opened.get(role) and reply.get("api") is None:
            lines.append(f"{client}: the broker answered its attach on the wire, its API never told it the link "
                         "opened (its attach reply names no notification; its profile claims link-opened)")
    return lines


def _wire_settled(observed: dict[str, Any]) -> dict[str, bool | None]:
    """Whether the broker settled each client's delivery, as the wire shows it: a disposition of the broker with
    settled true covering it, or (to the receiving client) a transfer sent settled. None for a sending client
    whose own transfer went settled: there is nothing for the broker to settle."""
    sender_transfer = observed.get("sender_transfer") or {}
    delivered = observed.get("delivered") or {}
    return {
        "sender": None if sender_transfer.get("settled") else
        any(a.get("settled") for a in observed.get("sender_answers") or []),
        "receiver": bool(delivered.get("settled"))
        or any(d.get("settled") for d in observed.get("broker_settles_receiver") or []),
    }


def settlement_disagreements(observed: dict[str, Any], told: dict[str, bool | None],
                             claims: dict[str, bool]) -> list[str]:
    """Where a client that claims ``remote-settlement`` (its API tells when the other end settled a delivery,
    and its shim reports it in the delivery's report or a later ``delivery-update`` event) told otherwise than
    the wire, one line each. ``told``: per role ("sender", "receiver"), the client's last word at the cell's
    end (:func:`told_remote_settled`), when the connection has closed and every frame the broker sent has been
    read; a role left out reported no delivery (nothing to hold); ``claims``: per role, whether that client's
    profile claims it. A client that says the broker settled when no frame of the broker did, or says nothing or
    not settled when one did, disagrees; so does one that says nothing either way (null to the cell's end): its
    claim is that its API tells."""
    lines: list[str] = []
    wire = _wire_settled(observed)
    for role, client in (("sender", "sending client"), ("receiver", "receiving client")):
        if role not in told or not claims.get(role) or wire[role] is None:
            continue
        said = told[role]
        if said is True and not wire[role]:
            lines.append(f"{client}: its API told that the broker settled the message, no frame of the broker "
                         "settled it (its profile claims remote-settlement)")
        elif said is not True and wire[role]:
            lines.append(f"{client}: the broker settled the message on the wire, its API "
                         f"{'never told so' if said is None else 'told it was not settled'} by the cell's end "
                         "(delivery report and delivery-update events; its profile claims remote-settlement)")
        elif said is None:
            lines.append(f"{client}: its API never told whether the broker settled the message (remote_settled "
                         "null in its delivery report and every delivery-update event; its profile claims "
                         "remote-settlement)")
    return lines


def arrival_disagreements(transfers: dict[str, list[Frame]], reports: dict[str, dict[str, Any]]) -> list[str]:
    """Where what a client's API told of one delivery's transfers contradicts them, one line each. ``transfers``:
    per role ("sender", "receiver"), the delivery's transfers on that client's link (:func:`deliveries`);
    ``reports``: per role, the client's report of that delivery. A reported ``tag`` (hex; null where the API does
    not expose it) must be the delivery-tag of the delivery's first transfer (AMQP 1.0 2.7.5, 2.8.7); a receiving
    client's ``settled_on_arrival`` (null where the API does not say) must be whether a transfer of the delivery
    came settled (2.7.5 settled, 2.6.12)."""
    lines = []
    for role, client in (("sender", "sending client"), ("receiver", "receiving client")):
        report, sent = reports.get(role), transfers.get(role)
        if not report or not sent:
            continue
        wire_tag = sent[0].fields.get("delivery-tag")
        told_tag = report.get("tag")
        if told_tag is not None and wire_tag is not None and str(told_tag).lower() != bytes(wire_tag).hex():
            lines.append(f"{client}: its API gave the delivery tag {told_tag}, the transfer carries "
                         f"{bytes(wire_tag).hex()}")
        told_settled = report.get("settled_on_arrival") if role == "receiver" else None
        came_settled = any(bool(t.fields.get("settled")) for t in sent)
        if told_settled is not None and bool(told_settled) != came_settled:
            lines.append(f"receiving client: its API said the message came {'settled' if told_settled else 'unsettled'}"
                         f", its transfer{'s' if len(sent) > 1 else ''} came "
                         f"{'settled' if came_settled else 'unsettled'}")
    return lines


def every_delivery_disagreements(cell: CellFrames, reports: dict[str, list[dict[str, Any]]],
                                 events: dict[str, list[dict[str, Any]]], links: dict[str, str], claims: ApiClaims,
                                 send_replied_ns: int | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Every delivery of the cell (its two connections, indexed once: :func:`cell_frames`) held to what the
    clients told of it, not only the first, which the row's expectation reads: for each delivery index (the most
    that either link carried or either client reported), :func:`report_disagreements`,
    :func:`settlement_disagreements`, :func:`second_settlement_disagreements`, :func:`arrival_disagreements`,
    :func:`untold_settlement` and :func:`received_state_disagreements`, each holding a client to what its profile
    claims (``claims``), over that delivery's frames (:func:`observations` of the index), its reports
    (``reports``: per role, the reply's delivery reports in order) and the later ``delivery-update`` events of it
    (``events``: per role; ``links``: per role, the link's name; ``send_replied_ns``: when the send's reply came,
    on the frames' clock, None when it never did). A line about a delivery after the first names it.
    Returns the lines and, per index, what each client last told (``remote``: :func:`told_remote_settled`,
    ``local``: :func:`told_locally_settled`, per role that reported the delivery)."""
    transfers = {"sender": deliveries(cell.sending.frames, "out"), "receiver": deliveries(cell.receiving.frames, "in")}
    count = max(len(reports["sender"]), len(reports["receiver"]), len(transfers["sender"]),
                len(transfers["receiver"]), 1)
    lines: list[str] = []
    told_per_delivery: list[dict[str, Any]] = []
    for index in range(count):
        told = {role: reports[role][index] for role in ("sender", "receiver") if index < len(reports[role])}
        remote = {role: told_remote_settled(report, events[role], links[role]) for role, report in told.items()}
        local = {role: told_locally_settled(report, events[role], links[role]) for role, report in told.items()}
        told_per_delivery.append({"remote": remote, "local": local})
        sending_view = link_view(cell.sending, index)
        observed = _observations(cell, sending_view, link_view(cell.receiving, index))
        found = report_disagreements(observed, told.get("sender"), told.get("receiver"),
                                     claims.remote_state_fields.get("sender", False))
        found += settlement_disagreements(observed, remote, claims.remote_settlement)
        found += second_settlement_disagreements(remote, local)
        found += arrival_disagreements({role: sent[index] for role, sent in transfers.items() if index < len(sent)},
                                       told)
        if "receiver" in told:
            found += received_state_disagreements(
                observed, told_received_state(told["receiver"], events["receiver"], links["receiver"]),
                claims.received_remote_state.get("receiver", False))
        if "sender" in told:
            found += untold_settlement(sending_view, told["sender"], remote["sender"], local["sender"],
                                       send_replied_ns)
        lines += found if index == 0 else [f"delivery {index + 1} of the link: {line}" for line in found]
    return lines, told_per_delivery


ERROR_SCOPES = {"detach": "link", "end": "session", "close": "connection"}  # the shim contract's scope of each


UNTOLD_GRACE_NS = 1_000_000_000  # how long a library is given to tell its caller of a settlement the broker sent


def untold_settlement(sent: LinkView, report: dict[str, Any], remote: bool | None, local: bool | None,
                      replied_ns: int | None) -> list[str]:
    """Whether the sending client's API told its caller nothing at all of a message it sent unsettled (its
    delivery ``report``, and what it last told of the broker's settlement, ``remote``, and of its own, ``local``,
    counting later ``delivery-update`` events: no remote state, no settlement at either end) although a
    disposition of the broker had settled the message's delivery (``sent``: its view of the sending link) at
    least :data:`UNTOLD_GRACE_NS` before the send's reply (``replied_ns``, on the frames' clock): the delivery
    was over on the wire and the API never said so (004 pn_delivery_settled: true once the delivery is settled
    at the remote endpoint). One line, or none. A pre-settled message is the client's own settlement and is not
    held to it; a message not yet transferred has nothing to tell."""
    if replied_ns is None or report.get("remote_state") is not None or remote is not None or local is not None:
        return []
    settled_at = _settled_at(sent.broker_dispositions)
    if sent.transfer is None or sent.transfer.fields.get("settled") or settled_at is None \
            or replied_ns - settled_at < UNTOLD_GRACE_NS:
        return []
    return [f"sending client: its API told nothing of the message (no remote state, no settlement: "
            f"{report.get('api')!r}) though a disposition of the broker settled its delivery "
            f"{(replied_ns - settled_at) // 1_000_000} ms before the send's reply"]


def untold_presettled_send(sending: list[Frame], messages: int, presettled: bool, replied_ns: int | None) -> list[str]:
    """Whether the sending client's API told its caller that its pre-settled send was done only long after its
    library had written every message (``sending``: its connection's frames; ``messages``: how many the row
    sends; ``presettled``: the row sends them settled; ``replied_ns``: when the send's reply came, on the frames'
    clock). A message sent settled is over at the sender once its transfer is written (003, at most once: settled
    at the sender, and nothing comes back), so an API that says nothing of it until :data:`UNTOLD_GRACE_NS` after
    the last transfer went out, most likely at its time-out, never told its caller. One line, or none; a send
    whose messages did not all go out (no credit came) is not held."""
    if not presettled or replied_ns is None:
        return []
    starts = delivery_starts(sending, "out")
    if not starts or len(starts) < messages or not all(f.fields.get("settled") for f in starts):
        return []
    written = max(f.t_ns for f in sending if f.direction == "out" and f.performative == "transfer")
    if replied_ns - written < UNTOLD_GRACE_NS:
        return []
    return [f"sending client: its API told that its pre-settled send was done {(replied_ns - written) // 1_000_000} "
            f"ms after its library had written {'its message' if messages == 1 else f'all {messages} messages'} "
            f"settled (at most once: a message is over at the sender once written, and nothing comes back)"]


def told_errors(replies: Sequence[ShimReply], events: Sequence[ShimEvent]) -> list[dict[str, Any]]:
    """The AMQP errors one client's API told its caller of (peers/shims/README.md): each failed reply whose error
    is of kind ``amqp`` (``replies``: that client's commands, in order) and each ``error`` and ``remote-close``
    event, with scope, condition, description, where it was told and ``at``: when the failed command was asked
    for or the event was read (one clock: ``time.monotonic()``)."""
    told: list[dict[str, Any]] = []
    for reply in replies:
        error = reply.body.get("error") or {}
        if not reply.body.get("ok") and error.get("kind") == "amqp":
            told.append({"scope": error.get("scope"), "condition": error.get("condition"),
                         "description": error.get("description"), "where": f"its {reply.op} reply", "at": reply.at})
    for event in events:
        body = event.body
        if body.get("event") in ("error", "remote-close"):  # a remote close told with its condition, if any
            told.append({"scope": body.get("scope"), "condition": body.get("condition"),
                         "description": body.get("description"),
                         "where": ERROR_EVENT if body["event"] == "error" else "a remote-close event", "at": event.at})
    return told


ERROR_EVENT = "an error event"


def repeated_error_events(role: str, reports: list[dict[str, Any]], sent: list[dict[str, Any]]) -> list[str]:
    """Whether the ``role`` client's API told its caller of an error more times than the broker sent it, one line
    per scope and condition (``reports``: :func:`told_errors`; ``sent``: the errors the broker sent that client,
    each with scope and condition). An ``error`` event is the API telling of something that happened where no
    command waited (peers/shims/README.md), so each one, counted with a command asked for before it that failed with
    the same error (it waited when the error came: its reply told it), needs an error of the broker's at that scope
    and condition: an API that tells one detach's error twice (rhea raising its container's ``error`` for a link
    error its application handled) tells of an error that never came. A command asked for after the event that fails
    on the dead link with the same error is no new telling (a reply is what the API answers a call with). Link
    errors alone are held: a session's or connection's error races the close every cell ends with (the broker's
    close crossing the client's), and the harness's clocks cannot tell a close command that waited for it from one
    that met the connection already gone."""
    lines = []
    for key in dict.fromkeys((r["scope"], str(r["condition"])) for r in reports
                             if r["where"] == ERROR_EVENT and r["condition"] is not None and r["scope"] == "link"):
        on_wire = sum(1 for e in sent if (e["scope"], str(e["condition"])) == key)
        if not on_wire:
            continue  # an error the broker never sent: told as such by error_report_disagreements
        same = [r for r in reports if (r["scope"], str(r["condition"])) == key]
        replied = [r for r in same if r["where"] not in (ERROR_EVENT, "a remote-close event")]
        first_reply = min(replied, key=lambda r: r["at"], default=None)
        for count, event in enumerate((r for r in same if r["where"] == ERROR_EVENT), start=1):
            also_reply = first_reply is not None and first_reply["at"] < event["at"]
            if count + also_reply > on_wire:
                earlier = f"besides {first_reply['where']}" if also_reply else f"{count} error events"
                lines.append(f"the {role} client's API told of {key[0]} error {key[1]!r} once more than the broker "
                             f"sent it (an error event, {earlier}; the broker sent {on_wire})")
                break
    return lines


def _shown(value: Any) -> str:
    return "null" if value is None else repr(str(value))


def _outcome_errors(frames: list[Frame], direction: str) -> list[dict[str, Any]]:
    """The errors the outcomes of ``direction``'s transfers and dispositions carry (a rejected's error), as
    ``delivery`` errors: a broker that settles a delivery with the rejected state its client gave echoes its error,
    and an API may tell its caller of it (go-amqp's ``RejectMessage`` returns it against Qpid Broker-J)."""
    errors = []
    for frame in frames:
        if frame.direction == direction and frame.performative in ("transfer", "disposition"):
            error = (frame.fields.get("state") or {}).get("error")
            if isinstance(error, dict) and error.get("condition") is not None:
                errors.append({"scope": "delivery", "condition": error["condition"],
                               "description": error.get("description")})
    return errors


def error_report_disagreements(frames: dict[str, list[Frame]], told: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Whether each client's API told its caller of the errors the broker sent it, as the wire gives them
    (``frames``, ``told``: per role, the connection's frames and :func:`told_errors`).

    Every detach, end and close from the broker that carries an error, up to its close (a frame after it is
    the broker's fault, and the row's ``errors`` judges it), must be told at least once, at that scope
    (detach: link, end: session, close: connection; the command it failed or an ``error`` event), with the
    error's condition (the symbol as text); a description the API gives must be the wire's. And an error with
    a condition that the API told must be one the broker sent, at that scope (a ``delivery`` error: the error of
    an outcome the broker sent, :func:`_outcome_errors`): an API that reports a condition nobody sent misleads its
    caller as much as one that drops the broker's. Nor may its error events tell one error more often than the
    broker sent it (:func:`repeated_error_events`).
    """
    lines: list[str] = []
    for role in ("sender", "receiver"):
        connection = frames.get(role, [])
        sent = [{"scope": ERROR_SCOPES[e["performative"]], **e} for e in _errors(connection, "in")]
        closed_at = next((i for i, f in enumerate(connection) if f.direction == "in" and f.performative == "close"),
                         len(connection))
        # nothing may follow the broker's close (2.4.3, 2.8.19): the errors up to it are the ones to be told
        required = sent[:len(_errors(connection[:closed_at + 1], "in"))]
        reports = told.get(role, [])
        for error in required:
            what = f"the broker's {error['performative']} with {error['condition']}"
            same_scope = [r for r in reports if r["scope"] == error["scope"]]
            matching = [r for r in same_scope if r["condition"] is not None and str(r["condition"]) == str(
                error["condition"])]
            if not matching:
                if same_scope:
                    lines.append(f"the {role} client's API told of {what} as {same_scope[0]['scope']} error "
                                 f"{_shown(same_scope[0]['condition'])} ({same_scope[0]['where']})")
                else:
                    lines.append(f"the {role} client's API never told of {what} (no {error['scope']} error in a "
                                 f"reply or an error event)")
                continue
            wrong = [r for r in matching if r["description"] is not None
                     and str(r["description"]) != ("" if error["description"] is None else str(error["description"]))]
            if wrong:
                told_text = _shown(wrong[0]["description"])
                lines.append(f"the {role} client's API told of {what} with description {told_text} "
                             f"({wrong[0]['where']}), the wire's is {_shown(error['description'])}")
        told_may_be = sent + _outcome_errors(connection, "in")  # a delivery's error: the broker's outcome's
        for report in reports:
            if report["condition"] is None:  # an error without its condition: the broker sent one at that scope
                if report["where"] != "a remote-close event" and not any(e["scope"] == report["scope"]
                                                                         for e in told_may_be):
                    lines.append(f"the {role} client's API told of a {report['scope']} error with no condition "
                                 f"({report['where']}) where the broker sent no {report['scope']} error")
                continue
            if not any(e["scope"] == report["scope"] and str(e["condition"]) == str(report["condition"])
                       for e in told_may_be):
                lines.append(f"the {role} client's API told of a {report['scope']} error {_shown(report['condition'])} "
                             f"({report['where']}) that the broker never sent")
        lines += repeated_error_events(role, reports, told_may_be)
    return lines


def credit_disagreements(sending: list[Frame]) -> list[str]:
    """Whether the sending client kept to the credit the broker gave its link (AMQP 1.0 2.6.7: a sender may
    send a delivery only while its link-credit, ``delivery-count_rcv + link-credit_rcv - delivery-count_snd``
    from the receiver's last flow, is above zero); the first delivery beyond it, or an empty list.

    Deliveries are counted from the client's attach's initial-delivery-count (a transfer that continues a
    delivery uses no credit of its own, 2.6.14); a flow of the broker's that leaves delivery-count out counts
    from that initial value. Against a flow still in flight to the client when it sent (the relay forwarded it
    first), the most any flow so far allowed is the limit: a broker that lowers its credit is never a client's
    fault. Only the broker's flows for the client's link count: those on the handle of the broker's attach
    answering it (by link name), or any flow with a handle when the broker's attach is not among the frames.
    """
    attach = client_attach(sending, "sender")
    initial = int((attach.fields.get("initial-delivery-count") if attach else None) or 0)
    answer = answering_attach(sending, attach)
    handle = None if answer is None else answer.fields.get("handle")
    starts = {id(f) for f in delivery_starts(sending, "out")}  # a continuation uses no credit of its own
    allowed: int | None = None  # the most deliveries any of the broker's flows so far let the client send
    sent = 0
    for frame in sending:
        if (frame.direction == "in" and frame.performative == "flow" and frame.fields.get("handle") is not None
                and (handle is None or frame.fields["handle"] == handle)):
            credit = frame.fields.get("link-credit")
            if credit is None:
                continue
            count = frame.fields.get("delivery-count")
            seen = 0 if count is None else (int(count) - initial) % 2**32  # RFC-1982 serial numbers (2.6.7)
            allowed = seen + int(credit) if allowed is None else max(allowed, seen + int(credit))
        elif id(frame) in starts:
            sent += 1
            if allowed is None or sent > allowed:
                granted = "no flow of the broker's had given it credit" if allowed is None else \
                    f"the broker's flows had allowed {allowed} deliveries"
                return [f"the sending client sent delivery {sent} of its link beyond the credit the broker gave "
                        f"it ({granted}; AMQP 1.0 2.6.7)"]
    return []


def answering_detach(frames: list[Frame], client_role: str) -> Frame | None:
    """The broker's detach answering the client's first on its link of ``client_role`` on one connection (the
    broker's first detach on that link after it, :meth:`.interop_links.WireLink.answering_detach`); None when the
    client wrote none or the broker did not answer."""
    link = connection_links(frames).of_role(client_role)
    return None if link is None else link.answering_detach()


CLOSE_TOLD_MARGIN_NS = 200_000_000  # how long an answer must have been on the wire before an API that gave up


def close_disagreements(replies: Sequence[ShimReply], frames: dict[str, list[Frame]],
                        replied_ns: dict[str, int]) -> list[str]:
    """Where a client's API told its caller of its link's close other than the wire says, one line each
    (``replies``: the cell's, both clients'; ``frames``: each connection's, by role; ``replied_ns``: when
    each role's detach reply came, on the frames' clock). A ``detach`` command is answered once the broker's
    detach came (peers/shims/README.md; AMQP 1.0 2.6.6: the partner answers a detach with its own, closed set).
    So a reply that it succeeded while the broker wrote no answering detach is a disagreement; so is one that it
    timed out or threw though the broker's answer had closed the link :data:`CLOSE_TOLD_MARGIN_NS` before it
    (an answer that came later, or that left closed out and so only detached the link, leaves a library that
    gave up, or goes on waiting for the close, in the right); and so is a reply's ``remote_closed`` other than
    the answering detach's closed flag. A reply with an AMQP error is held to the wire with the other errors
    (:func:`error_report_disagreements`)."""
    lines = []
    for asked in replies:
        if asked.op != "detach":
            continue
        role, reply = asked.role, asked.body
        answer = answering_detach(frames.get(role, []), role)
        closed = None if answer is None else bool(answer.fields.get("closed"))
        client = f"the {role} client"
        error = reply.get("error") or {}
        if reply.get("ok") and answer is None:
            lines.append(f"{client}: its API told its link closed, and the broker wrote no detach answering the "
                         "client's (AMQP 1.0 2.6.6)")
        elif (not reply.get("ok") and error.get("kind") != "amqp" and answer is not None and closed
              and answer.t_ns + CLOSE_TOLD_MARGIN_NS < replied_ns.get(role, 0)):
            lines.append(f"{client}: its API told the close of its link failed ({error.get('kind')}: "
                         f"{error.get('description')}), yet the broker's detach had closed the link "
                         f"{(replied_ns[role] - answer.t_ns) / 1e6:.0f} ms before")
        elif reply.get("ok") and reply.get("remote_closed") is not None and answer is not None \
                and bool(reply["remote_closed"]) != closed:
            lines.append(f"{client}: its API gave the broker's detach as closed={reply['remote_closed']!r}, the "
                         f"wire carries closed={closed!r}")
    return lines


def late_detach_disagreements(replies: Sequence[ShimReply], frames: dict[str, list[Frame]],
                              asked_ns: dict[str, int]) -> list[str]:
    """Where a client asked to close its link wrote its detach only once it was asked to close its connection, one
    line each (``replies``: the cell's, both clients'; ``frames``: each connection's, by role; ``asked_ns``:
    when each role's shim was asked to close, on the frames' clock). The script waits for the ``detach`` reply (at
    most :data:`.interop_script.DETACH_TIMEOUT_S`) before it asks for the close, so a library that closes its link
    when told has written the detach by then; one that leaves it for the connection's close has not closed its
    link when its application asked (2.6.6: a link is closed by sending a detach with closed=true). A client that
    wrote no detach at all is the row's (``link_closes``)."""
    lines = []
    for asked in replies:
        role = asked.role
        if asked.op != "detach" or role not in asked_ns:
            continue
        link = connection_links(frames.get(role, [])).of_role(role)
        first = None if link is None else link.first_detach("out")
        ours = None if first is None else first[1]
        if ours is not None and ours.t_ns >= asked_ns[role]:
            lines.append(f"the {role} client: asked to close its link, its library wrote the detach only "
                         f"{(ours.t_ns - asked_ns[role]) / 1e6:.0f} ms after it was asked to close its connection")
    return lines


def handle_reuse_disagreements(frames: dict[str, list[Frame]]) -> list[str]:
    """Where a client attached a link on a handle one of its links still held on that session, one line a
    connection (``frames``: each connection's, by role). A handle names one attached link of a session (AMQP 1.0
    2.6.2); the client's own detach frees it, and its end or a new begin on the channel frees them all. A
    library that gives a second link the handle of its first (the broker must then close with
    amqp:session:handle-in-use, 2.7.3) is at fault whatever the broker does about it."""
    lines = []
    for role, connection in frames.items():
        held: dict[int, dict[Any, Any]] = {}  # channel -> handle -> the link's name
        for frame in connection:
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


def unanswered_detach_disagreements(frames: dict[str, list[Frame]]) -> list[str]:
    """Where a client left a broker's closing detach unanswered, one line a link (``frames``: each connection's, by
    role; each link of it looked at on its own, :func:`.interop_links.connection_links`). A broker that closes the
    client's link on its own (a detach with closed=true before any of the client's on that link,
    :meth:`.interop_links.WireLink.broker_closing`) is answered with the client's own detach closed=true (AMQP 1.0
    2.6.6: "the partner will destroy the corresponding link endpoint, and reply with its own detach frame with the
    closed flag set"); a client that ends its session or connection first has not closed its end of the link (unless
    the broker ended them first). Every client library answers so against every broker that detaches (the grid's
    subscription-refused row, 2 Dec)."""
    lines = []
    for role, connection in frames.items():
        for link in connection_links(connection).links:
            closing = link.broker_closing()
            if closing is None:
                continue
            closed_at, broker_closed = closing
            answer = link.first_detach("out")
            answered_at = len(connection) if answer is None else answer[0]
            for frame in connection[closed_at + 1:answered_at]:
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


def untold_close_disagreements(frames: dict[str, list[Frame]], events: dict[str, list[dict[str, Any]]],
                               claims: dict[str, bool]) -> list[str]:
    """Where the broker closed a client's link on its own and the client's API never told its caller the link
    closed, one line a connection (``frames``, ``events``: each connection's frames and each client's shim
    events, by role; ``claims``: which roles' profiles claim ``link-close-told``, the only ones held). A detach
    with closed=true that answers no detach of the client's on that link (:meth:`.interop_links.WireLink.
    broker_closing`) closes the link (AMQP 1.0 2.6.6, 2.7.7 closed); an API that tells its caller an error on it and
    never that it closed leaves the caller holding a link that is gone. Each such detach needs a link
    ``remote-close`` event of its own."""
    lines = []
    for role, connection in frames.items():
        if not claims.get(role):
            continue
        closings = [(link.name, (closing[1].fields.get("error") or {}).get("condition"))  # (link name, condition)
                    for link in connection_links(connection).links if (closing := link.broker_closing()) is not None]
        told = [e for e in events.get(role, []) if e.get("event") == "remote-close" and e.get("scope") == "link"]
        if len(told) < len(closings):
            name, condition = closings[len(told)]
            lines.append(f"the {role} client: the broker closed its link {name!r} (detach closed=true, "
                         f"{'no error' if condition is None else condition}) and its API never told it closed "
                         f"({len(told)} link remote-close events for {len(closings)} such detaches; its profile "
                         f"claims link-close-told)")
    return lines


def unasked_detach_disagreements(replies: Sequence[ShimReply], frames: dict[str, list[Frame]],
                                 asked_ns: dict[str, int]) -> list[str]:
    """Where a client's library detached a link on its own, one line a link (``replies``: the cell's, both
    clients'; ``frames``: each connection's, by role; ``asked_ns``: when each role's shim was asked to close, on
    the frames' clock): the client's first detach of a link, written before its shim was asked to close and before
    the broker ended its session or closed its connection, on a link the script never asked it to detach (the
    script detaches only the row's link, :func:`.interop_links.ConnectionLinks.of_role`, with a ``detach``
    command) and the broker had not detached first (the client's then answers it, 2.6.6). A shim does only what it
    is told (peers/shims/README.md): a library that closes one link when asked to close another, or drops a link
    its application still holds, ends what the application did not (AMQP 1.0 2.6.6: a peer detaches a link
    when it chooses to). A detach that carries an error is the library's judgement of the broker, held with the
    row's ``client_errors``."""
    lines = []
    for role, connection in frames.items():
        if role not in asked_ns:
            continue
        links = connection_links(connection)
        row = links.of_role(role) if any(r.role == role and r.op == "detach" for r in replies) else None
        ended_at = next((i for i, f in enumerate(connection)
                         if f.direction == "in" and f.performative in ("end", "close")), len(connection))
        for link in links.links:
            ours = link.first_detach("out")
            if link is row or ours is None or link.detaches[0][1].direction == "in":
                continue
            at, frame = ours
            if at < ended_at and frame.t_ns < asked_ns[role] and not frame.fields.get("error"):
                lines.append(f"the {role} client: its library detached link {link.name!r} before it was asked to close "
                             "its connection, though it was never asked to close that link and the broker had not "
                             "detached it")
    return lines


def unasked_close_disagreements(frames: dict[str, list[Frame]], asked_ns: dict[str, int]) -> list[str]:
    """Where a client's library closed its connection on its own, one line each (``frames``: each connection's,
    by role; ``asked_ns``: when each role's shim was asked to close, on the frames' clock): a ``close`` the client
    wrote before its shim was asked to close and before the broker's close (which it may answer, 2.4.3). A shim
    does only what it is told (peers/shims/README.md), so such a close is the library's own act, over the head
    of the application that had not asked for it (a broker's error on a link or a session leaves the connection
    to the application)."""
    lines = []
    for role, connection in frames.items():
        ours = next((f for f in connection if f.direction == "out" and f.performative == "close"), None)
        if ours is None or role not in asked_ns or ours.t_ns >= asked_ns[role]:
            continue
        theirs = next((f for f in connection if f.direction == "in" and f.performative == "close"), None)
        if theirs is None or theirs.t_ns > ours.t_ns:
            condition = (ours.fields.get("error") or {}).get("condition")
            lines.append(f"the {role} client: its library closed its connection before it was asked to and before "
                         f"the broker closed it ({'no error' if condition is None else condition})")
    return lines
