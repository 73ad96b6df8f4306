"""The grid's one script: a message from a sending client library to a receiving one through the broker.

The receiving client connects and attaches first (a router grants a publisher credit only towards a
consumer), then the sending client; the send and the receive run at once (through a router the sender's
outcome waits for the receiver's). Each shim does what the row gives through its library's API and reports
what the API said; the verdict comes from the frames (:mod:`.interop_observe`). A shim that cannot express
the row replies ``unsupported``: the cell is then :class:`CellUnsupported`, never a near variant.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from amqp_conformance.peers.shimrun.crash import LibraryCrash
from amqp_conformance.peers.shimrun.errors import ShimError, ShimExited
from amqp_conformance.peers.shimrun.process import ShimReply

from .interop_scenarios import taken_count

LINKS = {"sender": "s", "receiver": "r"}  # each client's link name in the shim contract, by role
# a row's ``first_link``: the link each client attaches before its row's link, by the role of the client (the link
# is of the other role, so that the row's link is still the one link of its role on the connection)
FIRST_LINKS = {"sender": ("first-r", "receiver"), "receiver": ("first-s", "sender")}
# how long a client is given to close its link: the broker's answer to a detach is a reply to one frame (a local
# broker's comes within milliseconds), and a library that waits for a closing detach the broker never sends
# (go-amqp against a broker that only detaches) would otherwise cost the cell's whole time-out
DETACH_TIMEOUT_S = 1.0
# a send or receive of many messages is many steps: it is given the grid's time-out a step once for each this many
# messages it carries, begun (every row of up to 500 messages waits as before; 2,100 messages: 5 steps)
MESSAGES_A_STEP = 500


def step_budget_s(timeout_s: float, messages: int) -> float:
    """How long a send or receive of ``messages`` messages may take: ``timeout_s`` (the grid's time-out a step) once
    for each :data:`MESSAGES_A_STEP` messages begun, and at least once."""
    return timeout_s * max(1, -(-messages // MESSAGES_A_STEP))


class Shim(Protocol):
    """What the script needs of a shim process (peers/shimrun.ShimProcess)."""

    def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send one command; its reply (``ok`` true or false)."""


class CellUnsupported(Exception):
    """A shim replied ``unsupported``: its library's API cannot express what the row asks."""

    def __init__(self, role: str, op: str, description: str) -> None:
        super().__init__(f"the {role} client cannot {op} as the row asks: {description}")
        self.role = role


class CellStopped(Exception):
    """A step the rest of the cell depends on failed (the broker refused an attach, a connect timed out)."""


@dataclass
class CellRun:
    """What the script did: each shim's replies to the send and the receive, and why it stopped early."""

    send_reply: dict[str, Any] | None = None
    receive_reply: dict[str, Any] | None = None
    drain_reply: dict[str, Any] | None = None  # the receiving client's drain (a row's drain_credit), if asked
    drain_replied_ns: int | None = None  # when it came (monotonic, the frames' clock)
    replies: list[ShimReply] = field(default_factory=list)  # every command answered, in the order answered
    stopped: str | None = None
    detach_replied_ns: dict[str, int] = field(default_factory=dict)  # when each role's detach reply came (monotonic)
    send_replied_ns: int | None = None  # when the sending client's send reply came (monotonic, the frames' clock)
    close_asked_ns: dict[str, int] = field(default_factory=dict)  # when each role's shim was asked to close
    close_failures: list[str] = field(default_factory=list)  # a shim that died, hung or broke its contract in close
    crashes: dict[str, LibraryCrash] = field(default_factory=dict)  # role -> its client library's own crash
    hung: dict[str, str] = field(default_factory=dict)  # role -> the command its library hung in, and how (kind hung)
    drain_answer_waited_s: float | None = None  # how long the sending client's drain answer was waited for, if it was


def outcome_of(given: dict[str, Any]) -> dict[str, Any]:
    """The contract's outcome object for the row's ``given`` (only the fields the row sets)."""
    outcome: dict[str, Any] = {"type": given["outcome"]}
    fields = {"rejected": ("condition", "description"),
              "modified": ("delivery_failed", "undeliverable_here", "message_annotations")}.get(given["outcome"], ())
    outcome.update({name: given[name] for name in fields if name in given})
    return outcome


def run_crossing(sender: Shim, receiver: Shim, sender_url: str, receiver_url: str, address: str,
                 given: dict[str, Any], timeout_s: float, hostname: str | None = None,
                 tag: str | None = None, drain_answered: Callable[[], bool] | None = None) -> CellRun:
    """Run the row's exchange; raises :class:`CellUnsupported` when a shim cannot express it. A failure of the
    broker (a refused attach, an error) ends the run early with ``stopped`` set; the frames tell the rest.
    With the row's ``close_links`` each client then closes its link (the receiving one first, each given
    :data:`DETACH_TIMEOUT_S`) before its connection. With its ``drain_credit`` the receiving client, once it has
    taken every message but the row's ``drain_left`` (those once the send has ended), drains that much credit (the
    shim's ``drain``; its attach said ``drains``). With its
    ``first_link`` each client attaches a link of the other role (:data:`FIRST_LINKS`) before its row's link, and
    leaves it to its connection's close. ``tag``: the clients open with container-ids ``interop-r-TAG`` and
    ``interop-s-TAG`` (so the interposer's connections can be told apart). With its ``await_drain_answer`` the
    sending client is closed only once ``drain_answered`` (the wire's word: the sending client's answer to the
    broker's drain has reached the interposer) is true, or the grid's time-out has passed since the exchange
    ended."""
    run = CellRun()
    timeout_ms = int(timeout_s * 1000)
    send_budget_s = step_budget_s(timeout_s, given["messages"])  # the send's, and what its thread is waited for
    tag = tag or uuid.uuid4().hex[:8]

    def ask(party: str, shim: Shim, op: str, wait_s: float = timeout_s, **fields: Any) -> dict[str, Any]:
        asked = time.monotonic()
        try:
            reply = shim.request(op, wait_s + 5, timeout_ms=int(wait_s * 1000), **fields)
        except ShimExited as exc:
            if exc.crash is None:
                raise
            run.crashes[party] = exc.crash  # the client failed, not the harness: the cell is judged (FAIL)
            raise CellStopped(f"the {party} client's library crashed during its {op}: {exc.crash.describe()}") \
                from None
        run.replies.append(ShimReply(party, op, asked, time.monotonic(), reply))
        if not reply.get("ok"):
            error = reply.get("error") or {}
            if error.get("kind") == "unsupported":
                raise CellUnsupported(party, op, str(error.get("description")))
            _note_hung(run, party, op, reply)
            if op in ("connect", "attach"):
                raise CellStopped(f"the {party} client's {op} failed: {_error_text(error)}")
        return reply

    host = {"hostname": hostname} if hostname else {}
    sending: threading.Thread | None = None

    def first_link(party: str, shim: Shim) -> None:
        if given["first_link"]:  # a link of the other role first: the row's link is the second on its connection
            name, role = FIRST_LINKS[party]
            ask(party, shim, "attach", link=name, role=role, address=f"{address}.first", snd_settle_mode="unsettled",
                rcv_settle_mode="first")

    try:
        ask("receiver", receiver, "connect", url=receiver_url, container_id=f"interop-r-{tag}", **host)
        first_link("receiver", receiver)
        drains = {"drains": True} if given["drain_credit"] else {}  # a link the receiving client will drain
        ask("receiver", receiver, "attach", link=LINKS["receiver"], role="receiver", address=address,
            snd_settle_mode="unsettled", rcv_settle_mode=given["rcv_settle_mode"], **drains)
        ask("sender", sender, "connect", url=sender_url, container_id=f"interop-s-{tag}", **host)
        first_link("sender", sender)
        ask("sender", sender, "attach", link=LINKS["sender"], role="sender", address=address,
            snd_settle_mode=given["snd_settle_mode"], rcv_settle_mode=given["sender_rcv_settle_mode"])
        failure: list[BaseException] = []

        def send() -> None:
            try:
                messages = [{"body": body, "settled": given["presettled"]} for body in sent_bodies(given)]
                wait_s = min(given["send_wait_s"] or send_budget_s, send_budget_s)  # a row may wait less, never more
                run.send_reply = ask("sender", sender, "send", wait_s, link=LINKS["sender"], messages=messages)
                run.send_replied_ns = time.monotonic_ns()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the script's thread
                failure.append(exc)

        sending = threading.Thread(target=send, name="interop-send", daemon=True)
        sending.start()
        received: list[dict[str, Any]] = []
        for count in receive_counts(given):  # the next receive only once the last one took its share
            received.append(ask("receiver", receiver, "receive", step_budget_s(timeout_s, count),
                                link=LINKS["receiver"], count=count, outcome=outcome_of(given),
                                settle=given["settle"]))
            if not received[-1].get("ok"):
                break
        run.receive_reply = merged_receive(received)
        if given["drain_left"]:  # the messages left are on the node (stored) once the send has ended
            sending.join(send_budget_s + 10)
        if given["drain_credit"] and received[-1].get("ok") and not failure:  # every message taken but drain_left
            run.drain_reply = ask("receiver", receiver, "drain", link=LINKS["receiver"], credit=given["drain_credit"])
            run.drain_replied_ns = time.monotonic_ns()
        sending.join(send_budget_s + 10)
        if failure:
            raise failure[0]
        if given["await_drain_answer"] and drain_answered is not None:
            run.drain_answer_waited_s = _wait_until(drain_answered, timeout_s)
        if given["close_links"]:  # each client closes its link before its connection: the receiving one first
            for party, shim in (("receiver", receiver), ("sender", sender)):
                ask(party, shim, "detach", min(timeout_s, DETACH_TIMEOUT_S), link=LINKS[party], close=True)
                run.detach_replied_ns[party] = time.monotonic_ns()
    except CellStopped as exc:
        run.stopped = str(exc)
    finally:
        if sending is not None:
            sending.join(send_budget_s + 10)  # one command at a time per shim: its send ends before its close
        for role, shim in (("sender", sender), ("receiver", receiver)):
            run.close_asked_ns[role] = time.monotonic_ns()
            asked = time.monotonic()
            try:
                reply = shim.request("close", timeout_s + 5, timeout_ms=timeout_ms)
                run.replies.append(ShimReply(role, "close", asked, time.monotonic(), reply))
                _note_hung(run, role, "close", reply)
            except ShimError as exc:  # the client process died or hung in its close: never passed over in silence
                if isinstance(exc, ShimExited) and exc.crash is not None:  # its library crashed, in its close or
                    run.crashes.setdefault(role, exc.crash)  # earlier in the cell (the close finds it gone)
                    continue
                run.close_failures.append(f"the {role} client's close: {exc}")
    return run


# how often a row's bounded watch looks at the interposer's frames for the effect it awaits
WATCH_POLL_S = 0.01


def _wait_until(done: Callable[[], bool], timeout_s: float) -> float:
    """Wait until ``done()`` is true or ``timeout_s`` has passed, looking every :data:`WATCH_POLL_S`; how long it
    waited, in seconds."""
    began = time.monotonic()
    while not done() and time.monotonic() - began < timeout_s:
        time.sleep(WATCH_POLL_S)
    return time.monotonic() - began


def _note_hung(run: CellRun, party: str, op: str, reply: dict[str, Any]) -> None:
    """Keep in ``run.hung`` the first command whose reply says ``party``'s library hung in it (error kind hung:
    the library's call outlived the deadline it was given, the client's fault)."""
    error = reply.get("error") or {}
    if not reply.get("ok") and error.get("kind") == "hung":
        run.hung.setdefault(party, f"its {op}: {error.get('description')}")


def _error_text(error: dict[str, Any]) -> str:
    parts = [str(error.get(k)) for k in ("kind", "scope", "condition", "description") if error.get(k)]
    return " ".join(parts) or "no reason given"


def sent_bodies(given: dict[str, Any]) -> list[str]:
    """The bodies the sending client sends, in order: ``m1``, ``m2``, ... each followed by ``body_bytes`` x's."""
    return [f"m{n}" + "x" * given["body_bytes"] for n in range(1, given["messages"] + 1)]


def receive_counts(given: dict[str, Any]) -> list[int]:
    """The ``count`` of each of the receiving client's receive commands: the messages it takes
    (:func:`.interop_scenarios.taken_count`) in ``receives`` shares, as equal as they can be, the larger first (5 in
    2: 3 then 2; the table loader holds ``receives`` between 1 and their number:
    :func:`.interop_scenarios.receives_within_messages`)."""
    messages, receives = taken_count(given), given["receives"]
    share, extra = divmod(messages, receives)
    return [share + (1 if n < extra else 0) for n in range(receives)]


def merged_receive(replies: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The receive commands' replies as one: the last one's fields (``ok``: no receive follows a failed one, so
    the last is ok only when all were; a failure's ``error``) and every reply's delivery reports, in order."""
    if len(replies) <= 1:
        return replies[0] if replies else None
    return {**replies[-1], "deliveries": [d for reply in replies for d in delivery_reports(reply)]}


def delivery_reports(reply: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The delivery reports of a send or receive reply (also of a failed one that carries some), in the order of
    their deliveries on the link."""
    if not reply:
        return []
    return list(reply.get("deliveries") or (reply.get("error") or {}).get("deliveries") or [])
