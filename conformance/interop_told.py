"""Whether each client's API told its caller what the wire says (sans-I/O): of its deliveries (outcome and its
fields, settlement at either end, tag, arrival, bodies), of its link's attach and close, and of a link the broker
closed on its own.

A shim reports what its library's API said (null where the API says nothing; peers/shims/README.md), in a
command's reply and in events; the wire, indexed by :mod:`.interop_observe`, is the truth. A client is held to
what its profile claims its API tells (:class:`ApiClaims`), and to nothing more. The errors an API told are held
to the broker's in :mod:`.interop_told_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.shimrun.process import ShimEvent, ShimReply
from amqp_conformance.peers.transfers import came_settled

from .interop_observe import (
    TERMINAL_STATES,
    CellFrames,
    ConnectionFrames,
    LinkView,
    link_view,
    settled_at,
    views_observed,
)


@dataclass(frozen=True)
class ApiClaims:
    """What each client's profile claims its API tells, per role ("sender", "receiver"; a role not named claims
    nothing): a check holds a client to what it claims, and to nothing more. Each field is one capability's
    (fixtures/profiles.py): ``remote_state_fields`` (remote-state-fields: every field of a remote outcome),
    ``remote_settlement`` (remote-settlement), ``received_remote_state`` (received-remote-state: the state the
    broker gave a received delivery), ``link_opened`` (link-opened), ``link_close_told`` (link-close-told: a link
    the broker closed on its own), ``remote_settle_modes`` (remote-settle-modes: the broker's attach's modes),
    ``remote_endpoint_fields`` (remote-endpoint-fields: the properties and capabilities of the broker's open and
    attach, and the attach's max-message-size; :mod:`.interop_told_endpoints`)."""

    remote_state_fields: dict[str, bool] = field(default_factory=dict)
    remote_settlement: dict[str, bool] = field(default_factory=dict)
    received_remote_state: dict[str, bool] = field(default_factory=dict)
    link_opened: dict[str, bool] = field(default_factory=dict)
    link_close_told: dict[str, bool] = field(default_factory=dict)
    remote_settle_modes: dict[str, bool] = field(default_factory=dict)
    remote_endpoint_fields: dict[str, bool] = field(default_factory=dict)


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
    per role ("sender", "receiver"), the delivery's transfers on that client's link
    (:func:`amqp_conformance.peers.transfers.deliveries`); ``reports``: per role, the client's report of that
    delivery. A reported ``tag`` (hex; null where the API does not expose it) must be the delivery-tag of the
    delivery's first transfer (AMQP 1.0 2.7.5, 2.8.7); a receiving client's ``settled_on_arrival`` (null where the
    API does not say) must be whether a transfer of the delivery came settled (2.7.5 settled, 2.6.12)."""
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
        arrived_settled = came_settled(sent)
        if told_settled is not None and bool(told_settled) != arrived_settled:
            lines.append(f"receiving client: its API said the message came {'settled' if told_settled else 'unsettled'}"
                         f", its transfer{'s' if len(sent) > 1 else ''} came "
                         f"{'settled' if arrived_settled else 'unsettled'}")
    return lines


def every_delivery_disagreements(cell: CellFrames, reports: dict[str, list[dict[str, Any]]],
                                 events: dict[str, Sequence[ShimEvent]], links: dict[str, str], claims: ApiClaims,
                                 send_replied_ns: int | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Every delivery of the cell (its two connections, indexed once: :func:`.interop_observe.cell_frames`) held to
    what the clients told of it, not only the first, which the row's expectation reads: for each delivery index
    (the most that either link carried or either client reported), :func:`report_disagreements`,
    :func:`settlement_disagreements`, :func:`second_settlement_disagreements`, :func:`arrival_disagreements`,
    :func:`untold_settlement` and :func:`received_state_disagreements`, each holding a client to what its profile
    claims (``claims``), over that delivery's frames (:func:`.interop_observe.observations` of the index), its
    reports (``reports``: per role, the reply's delivery reports in order) and the later ``delivery-update`` events
    of it (``events``: per role, the shim's events; ``links``: per role, the link's name; ``send_replied_ns``: when
    the send's reply came, on the frames' clock, None when it never did). A line about a delivery after the first
    names it.
    Returns the lines and, per index, what each client last told (``remote``: :func:`told_remote_settled`,
    ``local``: :func:`told_locally_settled`, per role that reported the delivery)."""
    transfers = {"sender": cell.sending.deliveries, "receiver": cell.receiving.deliveries}
    told_events = {role: [event.body for event in events[role]] for role in ("sender", "receiver")}
    count = max(len(reports["sender"]), len(reports["receiver"]), len(transfers["sender"]),
                len(transfers["receiver"]), 1)
    lines: list[str] = []
    told_per_delivery: list[dict[str, Any]] = []
    for index in range(count):
        told = {role: reports[role][index] for role in ("sender", "receiver") if index < len(reports[role])}
        remote = {role: told_remote_settled(report, told_events[role], links[role]) for role, report in told.items()}
        local = {role: told_locally_settled(report, told_events[role], links[role]) for role, report in told.items()}
        told_per_delivery.append({"remote": remote, "local": local})
        sent = link_view(cell.sending, index)
        observed = views_observed(cell, sent, link_view(cell.receiving, index))
        found = report_disagreements(observed, told.get("sender"), told.get("receiver"),
                                     claims.remote_state_fields.get("sender", False))
        found += settlement_disagreements(observed, remote, claims.remote_settlement)
        found += second_settlement_disagreements(remote, local)
        found += arrival_disagreements({role: sent[index] for role, sent in transfers.items() if index < len(sent)},
                                       told)
        if "receiver" in told:
            found += received_state_disagreements(
                observed, told_received_state(told["receiver"], told_events["receiver"], links["receiver"]),
                claims.received_remote_state.get("receiver", False))
        if "sender" in told:
            found += untold_settlement(sent, told["sender"], remote["sender"],
                                       local["sender"], send_replied_ns)
        lines += found if index == 0 else [f"delivery {index + 1} of the link: {line}" for line in found]
    return lines, told_per_delivery


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
    settled = settled_at(sent.broker_dispositions)
    if sent.transfer is None or came_settled(sent.transfers) or settled is None \
            or replied_ns - settled < UNTOLD_GRACE_NS:
        return []
    return [f"sending client: its API told nothing of the message (no remote state, no settlement: "
            f"{report.get('api')!r}) though a disposition of the broker settled its delivery "
            f"{(replied_ns - settled) // 1_000_000} ms before the send's reply"]


def untold_presettled_send(sending: ConnectionFrames, messages: int, presettled: bool,
                           replied_ns: int | None) -> list[str]:
    """Whether the sending client's API told its caller that its pre-settled send was done only long after its
    library had written every message (``sending``: its connection, indexed; ``messages``: how many the row
    sends; ``presettled``: the row sends them settled; ``replied_ns``: when the send's reply came, on the frames'
    clock). A message sent settled is over at the sender once its transfer is written (003, at most once: settled
    at the sender, and nothing comes back), so an API that says nothing of it until :data:`UNTOLD_GRACE_NS` after
    the last transfer went out, most likely at its time-out, never told its caller. One line, or none; a send
    whose messages did not all go out (no credit came) is not held."""
    if not presettled or replied_ns is None:
        return []
    if not sending.deliveries or len(sending.deliveries) < messages \
            or not all(came_settled(d) for d in sending.deliveries):
        return []
    written = max(delivery[-1].t_ns for delivery in sending.deliveries)
    if replied_ns - written < UNTOLD_GRACE_NS:
        return []
    return [f"sending client: its API told that its pre-settled send was done {(replied_ns - written) // 1_000_000} "
            f"ms after its library had written {'its message' if messages == 1 else f'all {messages} messages'} "
            f"settled (at most once: a message is over at the sender once written, and nothing comes back)"]


CLOSE_TOLD_MARGIN_NS = 200_000_000  # how long an answer must have been on the wire before an API that gave up


def close_disagreements(replies: Sequence[ShimReply], connections: dict[str, ConnectionFrames],
                        replied_ns: dict[str, int]) -> list[str]:
    """Where a client's API told its caller of its link's close other than the wire says, one line each
    (``replies``: the cell's, both clients'; ``connections``: each connection, by role; ``replied_ns``: when
    each role's detach reply came, on the frames' clock). A ``detach`` command is answered once the broker's
    detach answering the client's came on the row's link (:meth:`.interop_links.WireLink.answering_detach`;
    peers/shims/README.md; AMQP 1.0 2.6.6: the partner answers a detach with its own, closed set), or at once
    where the broker had closed the link first (its detach with closed set came before any of the client's, which
    answers it: :meth:`.interop_links.WireLink.broker_closing`; the link is closed, and no answer will come).
    So a reply that it succeeded while the broker wrote no answering detach, and had not closed the link first, is a
    disagreement; so is one that it
    timed out or threw though the broker's answer had closed the link :data:`CLOSE_TOLD_MARGIN_NS` before it
    (an answer that came later, or that left closed out and so only detached the link, leaves a library that
    gave up, or goes on waiting for the close, in the right); and so is a reply's ``remote_closed`` other than
    the answering detach's closed flag. A reply with an AMQP error is held to the wire with the other errors
    (:func:`.interop_told_errors.error_report_disagreements`)."""
    lines = []
    for asked in replies:
        if asked.op != "detach":
            continue
        role, reply = asked.role, asked.body
        link = connections[role].row_link if role in connections else None
        answer = None if link is None else link.answering_detach()
        closing = None if link is None else link.broker_closing()
        if answer is None and closing is not None:
            answer = closing[1]  # the broker closed the link first: the client's detach answered it, none will come
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


def untold_close_disagreements(connections: dict[str, ConnectionFrames], events: dict[str, Sequence[ShimEvent]],
                               claims: dict[str, bool]) -> list[str]:
    """Where the broker closed a client's link on its own and the client's API never told its caller the link
    closed, one line a connection (``connections``, ``events``: each connection and each client's shim events, by
    role; ``claims``: which roles' profiles claim ``link-close-told``, the only ones held). A detach
    with closed=true that answers no detach of the client's on that link (:meth:`.interop_links.WireLink.
    broker_closing`) closes the link (AMQP 1.0 2.6.6, 2.7.7 closed); an API that tells its caller an error on it and
    never that it closed leaves the caller holding a link that is gone. Each such detach needs a link
    ``remote-close`` event of its own."""
    lines = []
    for role, connection in connections.items():
        if not claims.get(role):
            continue
        closings = [(link.name, (closing[1].fields.get("error") or {}).get("condition"))  # (link name, condition)
                    for link in connection.links.links if (closing := link.broker_closing()) is not None]
        told = [e for e in events.get(role, ()) if e.body.get("event") == "remote-close"
                and e.body.get("scope") == "link"]
        if len(told) < len(closings):
            name, condition = closings[len(told)]
            lines.append(f"the {role} client: the broker closed its link {name!r} (detach closed=true, "
                         f"{'no error' if condition is None else condition}) and its API never told it closed "
                         f"({len(told)} link remote-close events for {len(closings)} such detaches; its profile "
                         f"claims link-close-told)")
    return lines


def drain_notice_disagreements(connections: dict[str, ConnectionFrames],
                               events: dict[str, Sequence[ShimEvent]]) -> list[str]:
    """Where a client's API told a drain request the broker never made, one line a connection (``connections``,
    ``events``: each connection and each client's shim events, by role). A ``drain-requested`` event
    (peers/shims/README.md) says the API told its application that a flow of the broker's asked a sending link to
    drain (AMQP 1.0 2.6.7: the receiver's drain flag). The shim read the event after the library read that flow,
    and the library after the relay had forwarded it, so each notice needs a flow of the broker's with drain set
    for one of the client's sending links that had reached the relay before the notice was read, one flow for each
    notice (a flow asks once)."""
    lines = []
    for role, connection in connections.items():
        told = [e for e in events.get(role, ()) if e.body.get("event") == "drain-requested"]
        if not told:
            continue
        asked = _drain_requests_ns(connection.frames)
        for index, notice in enumerate(told, start=1):
            before = sum(1 for t_ns in asked if t_ns <= notice.at * 1e9)
            if before < index:
                lines.append(f"the {role} client: its API told drain request {index} on link "
                             f"{notice.body.get('link')!r} ({notice.body.get('api')}) when {before} flow"
                             f"{'' if before == 1 else 's'} of the broker's with drain set had reached the relay "
                             f"(AMQP 1.0 2.6.7: drain is the receiver's flag, set in its flow)")
                break
    return lines


def _drain_requests_ns(frames: Sequence[Frame]) -> list[int]:
    """When each flow of the broker's that set drain on a link it attached as receiver (one the client sends on)
    reached the relay, in order."""
    receiving: set[tuple[int, Any]] = set()  # the broker's (channel, handle) of its receiving links
    asked = []
    for frame in frames:
        if frame.direction != "in":
            continue
        key = (frame.channel, frame.fields.get("handle"))
        if frame.performative == "attach" and frame.fields.get("role") == "receiver":
            receiving.add(key)
        elif frame.performative == "detach":
            receiving.discard(key)
        elif frame.performative == "flow" and frame.fields.get("drain") and key in receiving:
            asked.append(frame.t_ns)
    return asked
