"""The interoperability grid's scenario: what an ``interop_tables`` row may give and what a cell observes.

A cell is one row run with a *sending* client library and a *receiving* client library (each driven by its
shim, peers/shims/README.md) through one broker, every frame of both connections captured by the interposer
(peers/relay.py). The row gives the sending link's settle modes and whether the message goes pre-settled,
the receiving link's receiver settle mode and the outcome the receiving client gives; the cell observes both
clients' frames and the broker's (:mod:`.interop_observe`), and holds what each client's API reported to
them (:mod:`.interop_told`, :mod:`.interop_told_errors`) and what each library did unasked
(:mod:`.interop_library`) and the flow control it stated (:mod:`.interop_flow`).
"""

from __future__ import annotations

from typing import Any

from .scenarios import Scenario

SETTLE_MODES = ("unsettled", "settled", "mixed")
RCV_SETTLE_MODES = ("first", "second")
OUTCOMES = ("accepted", "rejected", "released", "modified")


def _annotations(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.startswith("x-") for k in value):
        return "expected a table of message annotations whose keys start with 'x-' (e.g. { x-opt-reason = \"r\" })"
    return None


def _wait_seconds(value: Any) -> str | None:
    """Why ``value`` is not a wait in seconds (0: the grid's ``--timeout``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return f"expected seconds (a number, 0 for the grid's --timeout), got {value!r}"
    return None


def _no_script(ctx: Any, given: dict[str, Any]) -> dict[str, Any]:
    """A grid row is run by the interop harness (:func:`.interop_script.run_crossing`), never by ``run``."""
    raise RuntimeError("an interop row runs with 'amqp-conformance interop', not 'run'")


def taken_count(given: dict[str, Any]) -> int:
    """How many messages the receiving client's receives take: the first of those sent, all but the row's
    ``drain_left`` last ones, which it leaves on the node for its drain."""
    return given["messages"] - given["drain_left"]


def receives_within_messages(given: dict[str, Any]) -> str | None:
    """Why a crossing row's ``receives`` cannot share out its ``messages`` (each receive takes at least one), or
    its ``drain_credit`` is below 0, or its ``drain_left`` cannot be left for a drain."""
    taken = taken_count(given)
    if given["drain_credit"] < 0:
        return f"drain_credit = {given['drain_credit']}: give 0 (no drain) or the credits to drain"
    if given["drain_left"] and not given["drain_credit"]:
        return f"drain_left = {given['drain_left']} without drain_credit: give the credits the drain asks for"
    if given["drain_left"] and given["presettled"]:
        return ("drain_left with presettled = true: the messages left must be stored before the drain, which only "
                "the broker's disposition of an unsettled send tells")
    if not 0 <= given["drain_left"] < given["messages"]:
        return (f"drain_left = {given['drain_left']}: give from 0 to {given['messages'] - 1} (the receiving client "
                "takes at least one message before its drain)")
    if not 1 <= given["receives"] <= taken:
        left = f" less drain_left = {given['drain_left']}" if given["drain_left"] else ""
        return (f"receives = {given['receives']} cannot share out messages = {given['messages']}{left}: give from 1 "
                f"to {taken} receives")
    return None


CROSSING = Scenario(
    "crossing", _no_script,
    given={
        "snd_settle_mode": SETTLE_MODES,  # the sending client's link
        "sender_rcv_settle_mode": RCV_SETTLE_MODES,  # the receiver settle mode the sending client asks for
        "presettled": bool,  # the message goes settled
        "rcv_settle_mode": RCV_SETTLE_MODES,  # the receiving client's link
        "outcome": OUTCOMES,  # what the receiving client gives
        "condition": str, "description": str,  # rejected's error
        "delivery_failed": bool, "undeliverable_here": bool, "message_annotations": _annotations,  # modified's
        "settle": bool,  # the receiving client settles with its outcome (false: after the broker, rcv second)
        "body_bytes": int,  # the message body's length beyond "m1" (a body larger than a frame: multi-frame)
        "messages": int,  # how many messages the sending client sends on its link (m1, m2, ...; each taken, but
        # drain_left)
        "send_wait_s": _wait_seconds,  # how long the sending client's send may wait for its messages' ends (0: the
        # grid's --timeout once for each 500 messages begun, interop_script.step_budget_s, the most it ever waits): a
        # row whose check needs only a second past the broker's answer
        "receives": int,  # in how many receive commands the receiving client takes them, an equal share each (its
        # shim grants credit for each share as it asks: a delivery consumes a credit, new credit comes per receive)
        # asked of the broker's admin for the cell's node first (a broker whose admin cannot: UNSUPPORTED)
        "provocation": ("none", "report-received", "deny-subscribe", "credit-one-at-a-time",
                        "settle-without-outcome", "settle-after-outcome", "drain-publishers",
                        "close-publisher-connection", "drop-publisher-connection", "end-publisher-session",
                        "fail-publisher-connection", "abort-first-delivery"),
        "drip_bytes": int,  # the interposer writes the first N bytes of every chunk from the broker to a client
        # one byte a write, 1 ms apart (peers/relay.py, "Drip"): the clients' reads end inside frames
        "drip_size": int,  # the bytes each of those writes carries (1 by default): with drip_bytes at least a
        # chunk, a client's read holds the end of one frame, the whole frames after it, and the start of the next
        "close_links": bool,  # after the exchange each client closes its link (the shim's detach, close: true),
        # the receiving client's first, before it closes its connection
        "first_link": bool,  # each client first attaches a link of the other role (to the node's name with
        # ".first"), kept until its connection closes: the row's link is the second on its connection (and on its
        # session, where the library keeps one session a connection)
        "drain_credit": int,  # after its receives the receiving client grants its link this many credits and asks its
        # library to drain them (its shim's drain, peers/shims/README.md: AMQP 1.0 2.6.7), drain_left messages on the
        # node: the broker must send what it has, advance its delivery-count through the rest, and say so (0: no drain)
        "drain_left": int,  # how many of the row's messages (the last ones) the receiving client leaves on the node
        # for its drain: its receives take the others, and it drains once the sending client's send has ended (every
        # message stored, as the broker's dispositions tell); 0: the node is empty when it drains
        "await_drain_answer": bool,  # before the sending client closes (its link or connection), the grid waits
        # for its answer to the broker's drain, a flow for its link stating link-credit 0, at most the grid's
        # --timeout (2.6.7 sets no deadline: the row's bounded watch); the script's other steps are not held
        "pairs": ("all", "same"),  # the grid's pairs the row runs for: all that the run chose, or only each client
        # with itself (a row about each library's own accounting, which the partner across the broker cannot
        # change: each library once in each role, instead of once for every partner)
    },
    defaults={"snd_settle_mode": "unsettled", "sender_rcv_settle_mode": "first", "presettled": False,
              "rcv_settle_mode": "first", "outcome": "accepted", "settle": True, "body_bytes": 0, "messages": 1,
              "receives": 1, "send_wait_s": 0,
              "provocation": "none", "drip_bytes": 0, "drip_size": 1, "close_links": False, "first_link": False,
              "drain_credit": 0, "drain_left": 0, "await_drain_answer": False, "pairs": "all"},
    observations=(
        "sender_attach",  # the broker's attach to the sending client
        "sender_transfer",  # the sending client's transfer of the message
        "sender_tags",  # the sending client's link: its deliveries, those whose tag an unsettled one had, and the
        # most unsettled at once
        "sender_credit_flows",  # how many of the broker's flows gave credit the sending client's deliveries went
        # out under (conformance/interop_library.sender_credit): 1 where the broker gave it all at once
        "sender_answers",  # the broker's dispositions to the sending client for it
        "sender_settles",  # the sending client's dispositions for it
        "sender_settled_early",  # the sending client settled before the broker gave a terminal state or settled
        "sender_ordering",  # the sending link's settlement order: the rcv-settle-mode the broker's attach put in
        # use, the broker's first disposition for the message, whether the client settled it with its own
        "sender_answered_after_receiver",  # whether the broker's first disposition to the sending client came after
        # the receiving client's first disposition left (a router's propagated outcome), null when either is missing
        "receiver_attach",  # the broker's attach to the receiving client
        "delivered",  # the broker's transfer of the message to the receiving client
        "receiver_answers",  # the receiving client's dispositions for it
        "receiver_settled_first",  # the receiving client settled before the broker had (rcv second: must not)
        "broker_settles_receiver",  # the broker's dispositions to the receiving client for it
        "errors",  # the broker's error conditions on either connection (detach, end, close), by where they came
        "client_errors",  # the clients' own error conditions (detach, end, close), by connection: a client that
        # ends its link, session or connection with an error over something a row does is at fault
        "client_closed",  # whether each client wrote its close on its connection (2.4.3), by connection
        "client_terminus",  # whether each client's own attach carries the terminus its link needs (2.7.3): the
        # sending client's a source, the receiving client's a target
        "broker_dropped",  # whether the broker ended each client's connection without writing a close (its stream
        # ended or reset first), by connection
        "link_closes",  # each connection's detach frames in order, by connection: who wrote each (client or
        # broker), its closed flag (absent: false) and its error condition
        "unsettled_at_detach",  # how many of each client's deliveries were unsettled on the wire when it wrote
        # its first detach (null: it wrote none), by connection
        "row_link_beside_first",  # per role, whether the client attached its row link on the session of its first
        # link (a row's first_link), told apart by handle alone (null: no first link)
        "sender_report",  # what the sending client's API told it of the message (its shim's delivery report)
        "receiver_report",  # what the receiving client's API told it (its shim's delivery report)
        "received_messages",  # how many messages the receiving client's API gave it, over all its receive commands
        # (the bodies are checked in every cell once every receive succeeded; a receive that ran out of time
        # gives fewer)
        "receiver_drain",  # the row's drain on the wire (conformance/interop_drain.receiver_drain): the credit the
        # receiving client's drain flow gave, the broker's transfers after it and its answering flow's fields
        "receiver_drained",  # what the receiving client's API told of the drain's end: "drained", or its error
        "receiver_aborts",  # how many deliveries the broker aborted on the receiving client's connection (a last
        # transfer with aborted set, AMQP 1.0 2.6.14); the observations of the message's deliveries leave them out
        "receiver_credit_renewed",  # how many times the receiving client gave its link credit again once the
        # broker's deliveries had used up what it gave before (conformance/interop_drain.credit_renewals)
        "sender_drain",  # the broker's drain of the sending client's link and the client's answer on the wire
        # (conformance/interop_sender_drain.sender_drain), or null when the broker never asked one
        "stopped",  # why the cell stopped short (a client's step failed: its error text), or null
        "hung",  # per role, the command a client's library hung in and how (its shim's error kind hung), or null
        "crashed",  # per role, the client library's own crash in its loop (peers/shimrun/crash.py: what it raised,
        # and where), or null
    ),
    check_row=receives_within_messages,
)

INTEROP_SCENARIOS: dict[str, Scenario] = {CROSSING.name: CROSSING}
