"""The raw-frame scenario: set a connection up to a given point, write a row's frames verbatim, observe the answer.

One generic script for every bad-input row of ``core.errors``: the row gives the frames as data
(:mod:`amqp_conformance.peers.rawframes`) and the point they are written at; the script observes the broker's first
close, end or detach (``answer``), the protocol header it answered with (``header``), whether it closed the socket
(``socket``) and whether the connection still works afterwards (``alive``). A row that names ``states`` gets the
delivery state the broker gave each delivery-id; one that names ``sent`` gets everything the broker sent after the
row's frames, in order, up to the socket's close or a quiet time after the broker's close (so "a header and nothing
else", 2.2, or "nothing after close", 2.4.3, can be asserted); ``opened`` is the open the broker sent after them
(the open before an early close).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from amqp_conformance.peers.frames import Frame, FrameSplitter, FramingError, described, encode_frame
from amqp_conformance.peers.peer import ExpectationFailed, PeerError
from amqp_conformance.peers.rawframes import BeyondLimit, FrameSpecError, RawContext, frame_bytes, frames_of
from amqp_conformance.peers.rawpeer import RawModePeer, RawSocket
from amqp_conformance.peers.sequence import in_span
from amqp_conformance.peers.socket_end import await_end_after_close
from proton import uint

from .broker_frames import await_in, first_in, header_text, sent_since
from .context import CaseContext, NotApplicable, SetupFailed, no_credit, setup_step
from .scripts_core import wait_for
from .scripts_sasl import sasl_exchange

SETUPS = ("none", "sasl", "header", "open", "session", "sender", "sender-second", "sender-second-in-use", "raw-sender",
          "receiver")
SENDER_SETUPS = ("sender", "sender-second", "sender-second-in-use")  # a sending link of ours, attached by proton
PUBLISHING_SETUPS = (*SENDER_SETUPS, "raw-sender")  # they wait for credit with no consumer attached
LINKED_SETUPS = (*SENDER_SETUPS, "receiver")  # they attach a link of ours: $handle and $link-name are its
ENDINGS = ("close", "end", "detach")
PROBE_PATIENCE = 5  # the longest the liveness probe waits, in time-outs, while the broker's frames keep coming
MAX_RAW_FRAME = 16 * 1024 * 1024


def answer_of(frame: Frame | None, frames: list[Frame]) -> dict[str, Any] | None:
    """A close, end or detach as judged: performative, error condition, (detach) closed flag and ``link``: the
    name of the link it ends (:func:`link_name_of`), and (end, detach) ``session``: our channel of the session it
    is on (the broker numbers its channels its own way, 2.5.1; read from ``frames``, the connection's frames so
    far)."""
    if frame is None:
        return None
    error = frame.fields.get("error") or {}
    seen: dict[str, Any] = {"performative": frame.performative, "condition": error.get("condition")}
    if frame.performative == "detach":
        seen["closed"] = bool(frame.fields.get("closed"))
        seen["link"] = link_name_of(frames, frame)
    if frame.performative in ("end", "detach"):
        seen["session"] = our_channel_of(frames, frame.channel, frame.channel)
    return seen


def _set_up(ctx: CaseContext, given: dict[str, Any]) -> tuple[Any, RawContext, int]:
    """Connect and go as far as ``given.setup``; returns the peer (raw from now on), the placeholders and where
    the row's observations begin in the frame log: after SASL, at its outcome (the broker's AMQP header, in
    whichever read it came, is the row's to observe), else where the set-up ended."""
    setup = given["setup"]
    if setup in ("none", "sasl"):
        peer = setup_step("connect", RawSocket, ctx.address, "raw", ctx.timeout)
        ctx.peers.append(peer)
        since = sasl_exchange(ctx, peer) if setup == "sasl" else peer.mark()
        return peer, RawContext(node=ctx.node), since
    peer = setup_step("connect", RawModePeer.connect, ctx.address, timeout=ctx.timeout, quiet=ctx.quiet, label="raw",
                      hostname=ctx.open_hostname())
    ctx.peers.append(peer)
    raw = RawContext(node=ctx.node)
    if setup == "header":
        await_in(peer, 0, "amqp-header", "protocol header", "the broker sent no AMQP header")
        peer.go_raw()
        return peer, raw, peer.mark()
    broker_open = setup_step("open", peer.open).fields
    raw.limits["max-frame-size"] = broker_open.get("max-frame-size") or 0xFFFFFFFF
    channel_max = broker_open.get("channel-max")
    raw.limits["channel-max"] = 0xFFFF if channel_max is None else channel_max
    if setup != "open":
        since = peer.mark()
        session = setup_step("begin", peer.begin)
        ours = peer.find("begin", since, direction="out")
        broker_begin = peer.find("begin", since)
        raw.channel = ours.channel if ours else 0
        handle_max = broker_begin.fields.get("handle-max") if broker_begin else None
        raw.limits["handle-max"] = 0xFFFFFFFF if handle_max is None else handle_max
        if setup in SENDER_SETUPS:
            sender, attach = setup_step("attach sender", peer.attach_sender, session, ctx.node,
                                        rcv_settle_mode="first" if setup == "sender" else "second")
            if setup == "sender-second-in-use":
                _check_second_in_use(attach)
            raw.handle, raw.link_name = peer.handle_of(sender), sender.name
            if given["provocation"] == "withhold-credit":
                peer.pump(timeout=ctx.quiet)
            else:
                setup_step("wait for credit", peer.wait_for_credit, sender)
            raw.credit = sender.credit
        elif setup == "receiver":
            receiver, _ = setup_step("attach receiver", peer.attach_receiver, session, ctx.node)
            raw.handle, raw.link_name = peer.handle_of(receiver), receiver.name
    peer.go_raw()
    if setup == "raw-sender":
        _attach_raw_sender(ctx, peer, raw, given["attach"])
    return peer, raw, peer.mark()


def _check_second_in_use(attach: Frame) -> None:
    """Raise :class:`NotApplicable` unless the broker's ``attach`` of our sending link states rcv-settle-mode second,
    which the row asked for: the receiver's own value is the mode in use (AMQP 1.0 2.7.3; null is first, the
    default), and the sender's only a wish. A row set up ``sender-second-in-use`` needs its deliveries unsettled at
    the broker until we settle them."""
    mode = attach.fields.get("rcv-settle-mode")
    if mode != "second":
        raise NotApplicable(f"the broker's attach of our sending link states rcv-settle-mode {mode or 'first'}, where "
                            f"we asked for second: the receiver's value is the mode in use (AMQP 1.0 2.7.3), so the "
                            f"broker may settle each delivery as it takes it, and the row needs its deliveries "
                            f"unsettled at the broker until we settle them")


def _attach_raw_sender(ctx: CaseContext, peer: Any, raw: RawContext, attach: dict[str, Any]) -> None:
    """Attach a sending link in raw mode (handle 0, to the case's node, with a source as every client sends;
    ``attach`` adds or replaces fields, e.g. an initial-delivery-count proton would not send) and wait for the
    broker's attach and its credit."""
    fields = {"name": f"raw-sender-{ctx.node}", "handle": 0, "role": "sender", "initial-delivery-count": 0,
              "source": {"@type": "source"}, "target": {"@type": "target", "address": "$node"}, **attach}
    since = peer.mark()
    try:
        peer.send_raw(frame_bytes({"performative": "attach", "fields": fields}, raw))
    except (FrameSpecError, OverflowError, ValueError) as exc:
        raise SetupFailed(f"the row's attach cannot be built: {exc}") from None
    raw.handle = fields["handle"]

    def credited() -> Frame | None:
        flows = [f for f in peer.frames[since:] if f.direction == "in" and f.performative == "flow"
                 and (f.fields.get("link-credit") or 0) > 0]
        return flows[-1] if flows else None

    await_in(peer, since, "attach", "attach sender (raw)", "the broker sent no attach")
    if not peer.pump(lambda: credited() is not None):
        raise no_credit("wait for credit", "the broker granted the raw sender no credit")
    raw.credit = credited().fields["link-credit"]


def _check_credit_withheld(peer: Any, since: int) -> None:
    """Raise :class:`NotApplicable` when the broker granted credit to a link the row's own frames attached although
    its admin was to withhold all credit from the node: the row's transfers on it were then within credit, and the
    row cannot judge them. (Credit on the set-up's link is the row's business: it stays a FAIL.) The credit that
    counts is the one the broker's last flow on the link states: credit it granted and took back (a flow of 0
    after it, 2.6.7) was withheld after all."""
    attached = {frame.fields.get("handle") for frame in peer.frames[since:]
                if frame.direction == "in" and frame.performative == "attach"}
    last_flow = {frame.fields["handle"]: frame for frame in peer.frames[since:]  # a later flow replaces an earlier
                 if frame.direction == "in" and frame.performative == "flow" and frame.fields.get("handle") in attached}
    for frame in last_flow.values():
        if (frame.fields.get("link-credit") or 0) > 0:
            credit, handle = int(frame.fields["link-credit"]), int(frame.fields["handle"])
            raise NotApplicable(f"the admin's withhold-credit did not hold for the link the row attached: the broker "
                                f"granted link-credit {credit} on its handle {handle}, so the row's transfers were "
                                f"within credit")


def run_raw_frames(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Write the row's frames at the row's set-up point; observe ``answer``, ``then``, ``header``, ``socket``,
    ``alive``, ``opened``, and ``sent`` and ``states`` when the row names them (module docstring)."""
    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    peer, raw, since = _set_up(ctx, given)
    try:
        frames = [frame for spec in given["frames"] for frame in frames_of(spec, raw)]
    except BeyondLimit as exc:
        raise NotApplicable(str(exc)) from None
    except (FrameSpecError, OverflowError, ValueError) as exc:
        raise SetupFailed(f"the row's frames cannot be built against this broker: {exc}") from None
    size = sum(map(len, frames))
    if size > MAX_RAW_FRAME:
        raise SetupFailed(f"the row's frames would be {size} bytes: the broker's limits are too large to "
                          f"exceed here")
    try:
        if _within_credit(given):
            _send_within_credit(ctx, peer, raw, frames)
        else:
            peer.send_raw(b"".join(frames))
    except PeerError:
        pass  # the broker may close the socket while we write: the observations say what it did
    if given.get("shutdown_write"):
        peer.shutdown_write()

    def ended() -> bool:
        return peer.eof or first_in(peer.frames, since, ENDINGS) is not None

    if given["setup"] in ("none", "sasl") or "socket" in ctx.expected:
        peer.pump(lambda: peer.eof, ctx.timeout)  # the row is about what happens up to the socket's close
    else:
        peer.pump(ended, wait_for(ctx, "answer"))
    answer = first_in(peer.frames, since, ENDINGS)
    observed: dict[str, Any] = {
        "answer": answer_of(answer, peer.frames),
        "header": header_text(first_in(peer.frames, since, ("amqp-header", "sasl-header", "tls-header",
                                                          "unknown-header"))),
    }
    if answer is not None and answer.performative != "close" and not peer.eof:
        after = peer.frames.index(answer) + 1  # e.g. the end of a session after a link's detach
        peer.pump(lambda: first_in(peer.frames, after, ENDINGS) is not None,
                  wait_for(ctx, "then") if "then" in ctx.expected else 0.05)
        observed["then"] = answer_of(first_in(peer.frames, after, ENDINGS), peer.frames)
    if "sent" in ctx.expected:
        # the answer was waited for above; now the quiet time more (or up to the socket's close) for anything
        # after it: a broker may rightly keep the socket open for our close (2.4.3)
        peer.pump(lambda: peer.eof, ctx.quiet)
        observed["sent"] = sent_since(peer, since)
    if "states" in ctx.expected:
        observed["states"] = _states(ctx, peer, since)
    if given["provocation"] == "withhold-credit":
        _check_credit_withheld(peer, since)
    opened = first_in(peer.frames, since, ("open",))
    observed["opened"] = dict(opened.fields) if opened is not None else None
    # after the broker's close (the answer, or what came then) its end of the TCP connection may come late: the
    # one wait for it that connection_fate shares, so both read the same end
    await_end_after_close(peer, ctx.quiet)
    observed["socket"] = "closed" if peer.eof else "open"
    observed["alive"] = _alive(ctx, peer, raw, answer, since) if given["setup"] not in ("none", "sasl", "header") \
        else None
    return observed


def _within_credit(given: dict[str, Any]) -> bool:
    """True when the row's deliveries on the set-up's sending link are to stay within the broker's credit: a
    publishing set-up whose row is not about credit (it does not use ``$credit``, nor has the admin withhold it)."""
    return (given["setup"] in PUBLISHING_SETUPS and given["provocation"] != "withhold-credit"
            and not _mentions(given["frames"], "$credit"))


def _mentions(value: Any, placeholder: str) -> bool:
    if isinstance(value, str):
        return value.startswith(placeholder)
    if isinstance(value, dict):
        return any(_mentions(item, placeholder) for item in value.values())
    if isinstance(value, list):
        return any(_mentions(item, placeholder) for item in value)
    return False


def _send_within_credit(ctx: CaseContext, peer: Any, raw: RawContext, frames: list[bytes]) -> None:
    """Write ``frames`` as a client keeping within its link-credit would (2.6.7): in one write while the credit
    the broker granted the set-up's link lasts; a delivery that would go beyond it first waits for the broker's
    flow giving more (a broker may grant little credit at a time), or for the broker's detach of the link (then
    its credit no longer applies, and the rest goes as the row has it). Raises :class:`NotApplicable` when neither
    comes within the time-out: the row's deliveries would exceed the broker's credit, which is not what the row is
    about."""
    available, started, in_progress = raw.credit, 0, False
    pending = bytearray()
    for data in frames:
        transfer = _transfer_on(data, raw.handle)
        if transfer is not None and not in_progress:  # the first transfer of a delivery uses one credit
            if available <= 0:
                if pending:
                    peer.send_raw(bytes(pending))
                    pending.clear()
                available = _more_credit(ctx, peer, raw, started)
            available -= 1
            started += 1
        if transfer is not None:
            in_progress = bool(transfer.fields.get("more")) and not transfer.fields.get("aborted")
        pending += data
    if pending:
        peer.send_raw(bytes(pending))


def _transfer_on(data: bytes, handle: int) -> Frame | None:
    """The transfer on our link ``handle`` that ``data`` holds, decoded; None for any other frame, and for bytes
    that are not one whole frame (a row's bad framing)."""
    try:
        frames = FrameSplitter("out").feed(data)
    except FramingError:
        return None
    if len(frames) != 1 or frames[0].performative != "transfer" or frames[0].fields.get("handle") != handle:
        return None
    return frames[0]


def _more_credit(ctx: CaseContext, peer: Any, raw: RawContext, started: int) -> int:
    """The credit the broker gives the set-up's link once ``started`` deliveries went out on it: from its latest
    flow on its own handle for the link, delivery-count + link-credit less our delivery-count (2.6.7), waiting up
    to the time-out for one that gives some; unbounded once the broker has detached the link."""
    ours = next((f for f in reversed(peer.frames) if f.direction == "out" and f.performative == "attach"
                 and f.fields.get("handle") == raw.handle), None)
    name = ours.fields.get("name") if ours is not None else raw.link_name
    initial = int((ours.fields.get("initial-delivery-count") if ours is not None else 0) or 0)
    answers = [(index, frame) for index, frame in enumerate(peer.frames) if frame.direction == "in"
               and frame.performative == "attach" and frame.fields.get("name") == name
               and frame.fields.get("role") == "receiver"]
    # the broker's attach of the link: its handle, and where frames on it begin (earlier ones are another link's)
    attached_at, theirs = answers[-1] if answers else (0, None)
    handle = theirs.fields.get("handle") if theirs is not None else None

    def credit() -> int:
        for frame in reversed(peer.frames[attached_at:]):
            if frame.direction == "in" and frame.performative == "flow" and frame.fields.get("handle") == handle:
                count = frame.fields.get("delivery-count")
                limit = int(frame.fields.get("link-credit") or 0)
                return limit if count is None else int(count) + limit - (initial + started)
        return 0

    def detached() -> bool:
        return any(f.direction == "in" and f.performative == "detach" and f.fields.get("handle") == handle
                   for f in peer.frames[attached_at:])

    if not peer.pump(lambda: credit() > 0 or detached(), ctx.timeout):
        raise NotApplicable(f"the broker granted the set-up's link {raw.credit} credit and no more after "
                            f"{started} deliveries within {ctx.timeout:g} s: the row's further deliveries would "
                            f"exceed its credit (2.6.7), which is not what the row is about")
    return sys.maxsize if detached() else credit()


def _states(ctx: CaseContext, peer: Any, since: int) -> dict[str, Any]:
    """The delivery state the broker last gave each delivery the row's frames sent (its dispositions, role
    receiver, whose first..last covers the delivery-id), by delivery-id as text: the state's type name, or None
    for a disposition without one. Waits until every delivery-id the row names has one (or the time-out). A
    disposition without a numeric first covers nothing (it is the broker's malformed frame, not ours to judge)."""
    wanted = ctx.expected.get("states")
    names = [k for k in wanted if not k.startswith("@")] if isinstance(wanted, dict) else []
    ours = {f.fields.get("delivery-id") for f in peer.frames[since:] if f.direction == "out"
            and f.performative == "transfer" and isinstance(f.fields.get("delivery-id"), int)}

    def states() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for frame in peer.frames[since:]:
            fields = frame.fields
            first = fields.get("first")
            if frame.direction != "in" or frame.performative != "disposition" or fields.get("role") != "receiver" \
                    or not isinstance(first, int):
                continue
            last = fields.get("last") if isinstance(fields.get("last"), int) else first
            state = fields.get("state")
            for delivery_id in ours:
                if in_span(delivery_id, first, last):
                    seen[str(int(delivery_id))] = state.get("@type") if isinstance(state, dict) else state
        return seen

    peer.pump(lambda: all(name in states() for name in names), ctx.timeout)
    return states()


def our_channel_of(frames: list[Frame], broker_channel: int, default: int) -> int:
    """Our channel of the session the broker sends on ``broker_channel``: the ``remote-channel`` of the
    broker's begin on that channel (2.5.1: the two ends of a session may number it differently); ``default``
    when that begin is not in ``frames``."""
    for frame in frames:
        if (frame.direction == "in" and frame.performative == "begin" and frame.channel == broker_channel
                and frame.fields.get("remote-channel") is not None):
            return int(frame.fields["remote-channel"])
    return default


def _broker_attach_of(frames: list[Frame], detach: Frame) -> Frame | None:
    """The broker's latest attach, before its ``detach``, of the detach's handle on its session (a handle is the
    broker's own, 2.6.2); None when there is none in ``frames``."""
    theirs = None
    for frame in frames:
        if frame is detach:
            break
        if (frame.direction == "in" and frame.performative == "attach" and frame.channel == detach.channel
                and frame.fields.get("handle") == detach.fields.get("handle")):
            theirs = frame
    return theirs


def link_name_of(frames: list[Frame], detach: Frame) -> str | None:
    """The name of the link the broker's ``detach`` ends (that of :func:`_broker_attach_of`); None when the broker
    attached no link by that handle."""
    theirs = _broker_attach_of(frames, detach)
    return None if theirs is None else theirs.fields.get("name")


def our_handle_of(frames: list[Frame], detach: Frame, default: int) -> int:
    """Our handle of the link the broker's ``detach`` ends: the handle of our latest attach, before it, with
    the name of the broker's latest attach of that handle on that session and the other role (two links may
    share a name, one each way: 2.6.1); ``default`` when those attaches are not in ``frames``."""
    ours = None
    theirs = _broker_attach_of(frames, detach)
    if theirs is None:
        return default
    for frame in frames:
        if frame is detach:
            break
        if (frame.direction == "out" and frame.performative == "attach"
                and frame.fields.get("name") == theirs.fields.get("name")
                and frame.fields.get("role") != theirs.fields.get("role")):
            ours = frame
    return default if ours is None else int(ours.fields["handle"])


def free_channel(frames: list[Frame], after: int) -> int:
    """The lowest channel above ``after`` on which we never began a session (so never one still in use: a
    session the broker ended is ours until we end it too, 2.5.5)."""
    used = {frame.channel for frame in frames if frame.direction == "out" and frame.performative == "begin"}
    channel = after + 1
    while channel in used:
        channel += 1
    return channel


def _alive(ctx: CaseContext, peer: Any, raw: RawContext, answer: Frame | None, since: int) -> bool | None:
    """Whether the connection still works: answer the broker's end or detach as a peer must (on our channel
    of the session it came on), then begin a new session on a channel never used and see the broker answer
    it. None when the broker closed the connection with a close after ``since`` (its answer, or after it): it
    ended it as a peer may, where False is a connection that stopped working without one (the socket ended, or
    the probe's begin unanswered)."""
    if first_in(peer.frames, since, ("close",)) is not None:
        return None
    if peer.eof:
        return False
    try:
        if answer is not None and answer.performative in ("end", "detach"):
            ours = our_channel_of(peer.frames, answer.channel, raw.channel)
            body = (described("end") if answer.performative == "end"
                    else described("detach", handle=uint(our_handle_of(peer.frames, answer, raw.handle)),
                                   closed=True))
            peer.send_raw(encode_frame(body, channel=ours))
        probe = free_channel(peer.frames, raw.channel)
        probed = peer.mark()
        peer.send_raw(encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(100),
                                             outgoing_window=uint(100)), channel=probe))
        return _probe_answered(ctx, peer, probed, probe)
    except (ExpectationFailed, PeerError):
        return False


def _probe_answered(ctx: CaseContext, peer: Any, probed: int, probe: int) -> bool:
    """Whether the broker answers our probe's begin on channel ``probe`` (written at ``probed``). The begin waits
    behind whatever the broker has still to read of the row's frames (tens of thousands of transfers, in the
    credit rows), so the wait is the time-out from the broker's last frame, not from the probe: while its frames
    keep coming it is working, not stuck (up to :data:`PROBE_PATIENCE` time-outs in all); and no time-out runs out
    while a broker on this host is still reading the frames before the begin, or the begin (peers/backlog.py)."""
    deadline = time.monotonic() + PROBE_PATIENCE * ctx.timeout

    def answered() -> bool:
        return peer.find("begin", probed, remote_channel=probe) is not None

    def heard() -> int:
        return sum(1 for frame in peer.frames[probed:] if frame.direction == "in")

    while True:
        before = heard()
        if peer.pump(lambda before=before: answered() or heard() > before, ctx.timeout):
            if answered():
                return True
            if time.monotonic() < deadline and not peer.eof:
                continue  # the broker sent something else: it is still reading, so wait the time-out again
        return False
