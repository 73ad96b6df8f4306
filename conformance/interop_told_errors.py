"""Whether each client's API told its caller of the errors the broker sent it, and of no others (sans-I/O).

A shim tells an AMQP error its library gave in a command's failed reply or in an ``error`` event, with its scope
(link, session, connection, delivery), condition and description (peers/shims/README.md). The broker's errors are
those its detach, end and close frames carry (:func:`.interop_observe.carried_errors`), and the errors of the
outcomes it sent.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from amqp_conformance.peers.frames import Frame, first_frame
from amqp_conformance.peers.shimrun.process import ShimEvent, ShimReply

from .interop_observe import ConnectionFrames, carried_errors, client_closed

ERROR_SCOPES = {"detach": "link", "end": "session", "close": "connection"}  # the shim contract's scope of each


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


def error_report_disagreements(connections: dict[str, ConnectionFrames], told: dict[str, list[dict[str, Any]]],
                                dropped: Collection[str] = ()) -> list[str]:
    """Whether each client's API told its caller of the errors the broker sent it, as the wire gives them
    (``connections``, ``told``: per role, the connection and :func:`told_errors`; ``dropped``: the roles whose
    connection the broker ended without a close, where a connection error with no condition tells that loss).

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
    for role, connection in connections.items():
        frames = connection.frames
        sent = [{"scope": ERROR_SCOPES[e["performative"]], **e} for e in connection.errors]
        close = first_frame(frames, "close", "in")
        closed_at = len(frames) if close is None else frames.index(close)
        # nothing may follow the broker's close (2.4.3, 2.8.19): the errors up to it are the ones to be told
        required = sent[:len(carried_errors(frames[:closed_at + 1], "in"))]
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
        told_may_be = sent + _outcome_errors(frames, "in")  # a delivery's error: the broker's outcome's
        for report in reports:
            if report["condition"] is None:  # an error without its condition: the broker sent one at that scope,
                lost = report["scope"] == "connection" and role in dropped  # or the connection was lost
                if report["where"] != "a remote-close event" and not lost and not any(
                        e["scope"] == report["scope"] for e in told_may_be):
                    lines.append(f"the {role} client's API told of a {report['scope']} error with no condition "
                                 f"({report['where']}) where the broker sent no {report['scope']} error")
                continue
            if not any(e["scope"] == report["scope"] and str(e["condition"]) == str(report["condition"])
                       for e in told_may_be):
                lines.append(f"the {role} client's API told of a {report['scope']} error {_shown(report['condition'])} "
                             f"({report['where']}) that the broker never sent")
        lines += repeated_error_events(role, reports, told_may_be)
    return lines


# the error kinds of a failed reply that tell of the connection's loss: the library's own word, or the broker's error
LOSS_KINDS = ("client", "amqp")


def lost_connection_disagreements(dropped: dict[str, int], replies: Sequence[ShimReply],
                                  events: dict[str, Sequence[ShimEvent]],
                                  connections: dict[str, ConnectionFrames]) -> list[str]:
    """Whether each client whose connection the broker ended without a close (``dropped``: their roles, each with
    when its stream ended, ``time.monotonic_ns()``) was told of the loss by its API, one line for each that was
    not (``replies``: every command answered, both roles; ``events``: each role's shim events). Told is, after the
    stream ended, a command's reply failing with an error of a kind in :data:`LOSS_KINDS` (one waiting when it
    ended, or asked after it) or an ``error`` or ``remote-close`` event at connection scope; a failure or event
    read before the stream ended tells of something else. An API that goes on as though the connection stood
    leaves its application unaware that the deliveries it holds unsettled lost their end: the one that settles
    second "can resend" only once it knows (003, "Receiver settles first").
    A client whose library had written its own ``close`` before the stream ended (``connections``: each role's
    frames) is asked nothing: its application had given the connection up, and the close the broker never sent
    back is the broker's to answer for (the row's ``broker_dropped``), not a loss the client must report."""
    lines = []
    for role, ended_ns in dropped.items():
        connection = connections.get(role)
        if connection is not None and client_closed([f for f in connection.frames if f.t_ns <= ended_ns]):
            continue
        ended = ended_ns / 1e9  # the shims' clock: time.monotonic(), the same clock in seconds
        failed = [r for r in replies if r.role == role and r.answered >= ended and not r.body.get("ok")
                  and (r.body.get("error") or {}).get("kind") in LOSS_KINDS]
        told = [e for e in events.get(role, ()) if e.at >= ended and e.body.get("event") in ("error", "remote-close")
                and e.body.get("scope") == "connection"]
        if not failed and not told:
            lines.append(f"the {role} client's API never told that the broker ended its connection without a close "
                         "(no command failed with it, no connection error or remote-close event)")
    return lines
