"""The raw-frame scenario: set a connection up to a given point, write a row's frames verbatim, observe the answer.

One generic script for every bad-input row of ``core.errors``: the row gives the frames as data
(:mod:`amqp_conformance.peers.rawframes`) and the point they are written at; the script observes the
broker's first close, end or detach (``answer``), the protocol header it answered with (``header``),
whether it closed the socket (``socket``) and whether the connection still works afterwards (``alive``).
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.frames import Frame, described, encode_frame
from amqp_conformance.peers.peer import ExpectationFailed, PeerError
from amqp_conformance.peers.rawframes import FrameSpecError, RawContext, frame_bytes
from amqp_conformance.peers.rawpeer import RawModePeer, RawSocket
from proton import uint

from .context import CaseContext, SetupFailed, setup_step
from .scripts_core import wait_for

SETUPS = ("none", "header", "open", "session", "sender", "sender-second", "receiver")
ENDINGS = ("close", "end", "detach")
MAX_RAW_FRAME = 16 * 1024 * 1024


def answer_of(frame: Frame | None) -> dict[str, Any] | None:
    """A close, end or detach as judged: performative, error condition and (detach) closed flag."""
    if frame is None:
        return None
    error = frame.fields.get("error") or {}
    seen: dict[str, Any] = {"performative": frame.performative, "condition": error.get("condition")}
    if frame.performative == "detach":
        seen["closed"] = bool(frame.fields.get("closed"))
    return seen


def header_text(frame: Frame | None) -> str | None:
    """A protocol header as ``AMQP <id> <major>.<minor>.<revision>`` (2.2)."""
    if frame is None:
        return None
    raw = frame.raw
    return f"{raw[:4].decode('latin-1')} {raw[4]} {raw[5]}.{raw[6]}.{raw[7]}"


def _first(frames: list[Frame], since: int, names: tuple[str, ...]) -> Frame | None:
    for frame in frames[since:]:
        if frame.direction == "in" and frame.performative in names:
            return frame
    return None


def _set_up(ctx: CaseContext, given: dict[str, Any]) -> tuple[Any, RawContext]:
    """Connect and go as far as ``given.setup``; returns the peer (raw from now on) and the placeholders."""
    setup = given["setup"]
    if setup == "none":
        peer = setup_step("connect", RawSocket, ctx.address, "raw", ctx.timeout)
        ctx.peers.append(peer)
        return peer, RawContext()
    peer = setup_step("connect", RawModePeer.connect, ctx.address, timeout=ctx.timeout, quiet=ctx.quiet, label="raw")
    ctx.peers.append(peer)
    raw = RawContext()
    if setup == "header":
        if not peer.pump(lambda: peer.find("amqp-header") is not None):
            raise SetupFailed("set-up step 'protocol header' failed: the broker sent no AMQP header")
        peer.go_raw()
        return peer, raw
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
        if setup in ("sender", "sender-second"):
            sender, _ = setup_step("attach sender", peer.attach_sender, session, ctx.node,
                                   rcv_settle_mode="second" if setup == "sender-second" else "first")
            raw.handle = peer.handle_of(sender)
            if given["provocation"] == "withhold-credit":
                peer.pump(timeout=ctx.quiet)
            else:
                setup_step("wait for credit", peer.wait_for_credit, sender)
            raw.credit = sender.credit
        elif setup == "receiver":
            receiver, _ = setup_step("attach receiver", peer.attach_receiver, session, ctx.node)
            raw.handle = peer.handle_of(receiver)
    peer.go_raw()
    return peer, raw


def run_raw_frames(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Write the row's frames at the row's set-up point; observe ``answer``, ``header``, ``socket``, ``alive``."""
    if given["provocation"] != "none":
        ctx.admin.provoke(given["provocation"], ctx.node)
    peer, raw = _set_up(ctx, given)
    since = peer.mark()
    try:
        data = b"".join(frame_bytes(spec, raw) for spec in given["frames"])
    except (FrameSpecError, OverflowError, ValueError) as exc:
        raise SetupFailed(f"the row's frames cannot be built against this broker: {exc}") from None
    if len(data) > MAX_RAW_FRAME:
        raise SetupFailed(f"the row's frames would be {len(data)} bytes: the broker's limits are too large to "
                          f"exceed here")
    try:
        peer.send_raw(data)
    except PeerError:
        pass  # the broker may close the socket while we write: the observations say what it did
    if given.get("shutdown_write"):
        peer.shutdown_write()

    def ended() -> bool:
        return peer.eof or _first(peer.frames, since, ENDINGS) is not None

    if given["setup"] == "none" or "socket" in ctx.expected:
        peer.pump(lambda: peer.eof, ctx.timeout)  # the row is about what happens up to the socket's close
    else:
        peer.pump(ended, wait_for(ctx, "answer"))
    answer = _first(peer.frames, since, ENDINGS)
    observed: dict[str, Any] = {
        "answer": answer_of(answer),
        "header": header_text(_first(peer.frames, since, ("amqp-header", "sasl-header", "tls-header",
                                                          "unknown-header"))),
    }
    if answer is not None and answer.performative != "close" and not peer.eof:
        after = peer.frames.index(answer) + 1  # e.g. the end of a session after a link's detach
        peer.pump(lambda: _first(peer.frames, after, ENDINGS) is not None,
                  wait_for(ctx, "then") if "then" in ctx.expected else 0.05)
        observed["then"] = answer_of(_first(peer.frames, after, ENDINGS))
    observed["socket"] = "closed" if peer.eof else "open"
    observed["alive"] = _alive(ctx, peer, raw, answer) if given["setup"] not in ("none", "header") else None
    return observed


def _alive(ctx: CaseContext, peer: Any, raw: RawContext, answer: Frame | None) -> bool:
    """Whether the connection still works: answer the broker's end or detach as a peer must, then begin a
    new session and see the broker answer it."""
    if peer.eof or (answer is not None and answer.performative == "close"):
        return False
    try:
        if answer is not None and answer.performative == "end":
            peer.send_raw(encode_frame(described("end"), channel=raw.channel))
        elif answer is not None and answer.performative == "detach":
            peer.send_raw(encode_frame(described("detach", handle=uint(raw.handle), closed=True), channel=raw.channel))
        probe = raw.channel + 1
        since = peer.mark()
        peer.send_raw(encode_frame(described("begin", next_outgoing_id=uint(0), incoming_window=uint(100),
                                             outgoing_window=uint(100)), channel=probe))
        peer.expect("begin", since, remote_channel=probe)
        return True
    except (ExpectationFailed, PeerError):
        return False
