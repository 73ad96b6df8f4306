"""The reference broker's protocol guard, sans-I/O: judges every inbound frame before proton sees it.

proton's transport answers some bad input itself, not always with the condition the AMQP 1.0
specification names (an unknown handle closes the whole connection with ``amqp:invalid-field`` where
2.7.4 asks for the session to end with ``amqp:session:unattached-handle``; a transfer beyond the granted
credit is taken). :class:`ProtocolGuard` follows the connection from both directions' frames (it is fed
every inbound frame with :meth:`check` and every outbound frame with :meth:`outbound`) and returns a
:class:`Violation` naming the scope to end (connection, session or link) and the condition, with the
section that names it. The connection adapter (:mod:`.policed`) then drops the frame and answers through
proton's API, so proton's own state stays consistent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..amqp_types import BY_NAME, DELIVERY_STATE_NAMES, PERFORMATIVES
from ..frames import FRAME_TYPE_AMQP, Frame
from ..wire_types import frame_problems

UNLIMITED = 0xFFFFFFFF
# 3.4 delivery states and 4.5.5 transactional-state: the descriptor codes a transfer or disposition state may have
DELIVERY_STATES = frozenset(BY_NAME[name].code for name in (*DELIVERY_STATE_NAMES, "transactional-state"))
MAX_TAG = 32  # 2.8.7 delivery-tag: a binary of at most 32 octets
# 4.5.5: a transactional state's txn-id is the coordinator's to judge, not the guard's: one missing or unknown names
# no transaction, and the disposition stays outside any (transactions.py; um.transactions.subscribe/8-null-txn-id)
COORDINATOR_JUDGES = ("disposition.state.txn-id ", "transfer.state.txn-id ")


@dataclass(frozen=True)
class Violation:
    """Bad input and the answer the specification names: end ``scope`` with ``condition``.

    ``scope`` is "header" (answer with our protocol header and close the socket, 2.2), "connection"
    (close), "session" (end the session on ``channel``) or "link" (detach ``handle`` on ``channel``
    with closed=true).
    """

    scope: str
    condition: str
    description: str
    channel: int | None = None
    handle: int | None = None


@dataclass
class LinkState:
    """One link attached by the peer, keyed by the peer's handle."""

    name: str
    peer_role: str  # "sender" when the peer sends transfers on it
    delivery_count: int = 0  # deliveries received from the peer (receiver's view)
    limit: int = 0  # delivery-count + link-credit as last granted in our flow
    current: tuple[int | None, bytes | None] | None = None  # a multi-frame delivery in progress
    unsettled_tags: dict[int, bytes] = field(default_factory=dict)  # delivery-id -> tag, not yet settled
    errant: bool = False  # we detached it with an error; the peer has not answered yet


@dataclass
class SessionState:
    """One session begun by the peer, keyed by the peer's channel."""

    links: dict[int, LinkState] = field(default_factory=dict)
    # our handle -> (link name, our role): a sending and a receiving link may share a name (2.6.1)
    our_handles: dict[int, tuple[str, str]] = field(default_factory=dict)
    ending: bool = False  # we ended it with an error; discard input until the peer's end


class ProtocolGuard:
    """Follows one connection's frames; :meth:`check` returns the :class:`Violation` an inbound frame is."""

    def __init__(self) -> None:
        self.header_seen = False
        self.opened = False
        self.closing = False  # we closed with an error: discard everything until the peer's close
        self.max_frame_size = UNLIMITED
        self.channel_max = 0xFFFF
        self.handle_max: dict[int, int] = {}  # peer channel -> our handle-max for that session
        self.sessions: dict[int, SessionState] = {}
        self._our_channels: dict[int, int] = {}  # our outgoing channel -> peer channel

    # -- what we send ----------------------------------------------------------------------------------

    def outbound(self, frame: Frame) -> None:
        """Note a frame we sent: our limits, the credit we granted, links we detached with an error."""
        fields = frame.fields
        name = frame.performative
        if name == "open":
            self.max_frame_size = fields.get("max-frame-size") or UNLIMITED
            channel_max = fields.get("channel-max")
            self.channel_max = 0xFFFF if channel_max is None else channel_max
        elif name == "begin" and fields.get("remote-channel") is not None:
            peer_channel = fields["remote-channel"]
            self._our_channels[frame.channel] = peer_channel
            handle_max = fields.get("handle-max")
            self.handle_max[peer_channel] = UNLIMITED if handle_max is None else handle_max
        session = self.sessions.get(self._our_channels.get(frame.channel, -1))
        if session is None:
            return
        if name == "attach":
            role = "receiver" if fields.get("role") == "receiver" else "sender"
            session.our_handles[fields.get("handle")] = (fields.get("name"), role)
        elif name == "flow" and fields.get("handle") is not None:
            link = self._link_by_our_handle(session, fields["handle"])
            if link is not None and link.peer_role == "sender":
                count = fields.get("delivery-count")
                link.limit = (link.delivery_count if count is None else count) + (fields.get("link-credit") or 0)
        elif name == "detach":
            link = self._link_by_our_handle(session, fields.get("handle"))
            if link is not None and fields.get("error") is not None:
                link.errant = True
        elif name == "end" and fields.get("error") is not None:
            session.ending = True
        elif name == "disposition":
            self._settled(session, fields)

    @staticmethod
    def _link_by_our_handle(session: SessionState, handle: Any) -> LinkState | None:
        name, our_role = session.our_handles.get(handle, (None, None))
        for link in session.links.values():
            if link.name == name and link.peer_role != our_role:  # the peer's end of the same link
                return link
        return None

    @staticmethod
    def _settled(session: SessionState, fields: dict) -> None:
        if not fields.get("settled") or not isinstance(fields.get("first"), int):
            return
        first = fields["first"]
        last = fields.get("last") if isinstance(fields.get("last"), int) else first
        for link in session.links.values():
            for delivery_id in [d for d in link.unsettled_tags if first <= d <= last]:
                del link.unsettled_tags[delivery_id]

    # -- what the peer sends ---------------------------------------------------------------------------

    def check(self, frame: Frame) -> Violation | None:
        """Judge one inbound frame (or protocol header); None when it is good. Updates the state."""
        if not self.header_seen:
            if frame.performative != "amqp-header":
                return Violation("header", "amqp:connection:framing-error",
                                 f"expected the AMQP protocol header, got {frame.raw[:8].hex()} (2.2)")
            self.header_seen = True
            return None
        if frame.performative.endswith("-header"):
            return Violation("connection", "amqp:connection:framing-error",
                             "a protocol header where a frame must start (2.3.1)")
        if self.closing:
            if frame.performative == "close":
                return None
            return Violation("discard", "", "input after our close is discarded (2.4.3)")
        if frame.frame_type != FRAME_TYPE_AMQP:
            return Violation("connection", "amqp:connection:framing-error",
                             f"frame type {frame.frame_type} is not an AMQP frame (2.3.1, 2.3.2)")
        if frame.performative == "empty":
            return None  # heartbeat (2.4.5), legal on any channel
        if frame.channel > self.channel_max:
            return Violation("connection", "amqp:connection:framing-error",
                             f"channel {frame.channel} is above our channel-max {self.channel_max} (2.7.1)")
        if frame.performative == "undecodable":
            return Violation("connection", "amqp:decode-error", f"frame body: {frame.fields.get('error')} (2.8.15)")
        if frame.performative not in PERFORMATIVES:
            return Violation("connection", "amqp:decode-error",
                             f"{frame.performative} is not a performative (2.7, 2.8.15)")
        problem = field_problem(frame)
        if problem is not None:
            return Violation("connection", *problem)
        return self._check_state(frame)

    def _check_state(self, frame: Frame) -> Violation | None:
        name, fields, channel = frame.performative, frame.fields, frame.channel
        if name == "open":
            if self.opened:
                return Violation("connection", "amqp:illegal-state", "a second open (2.4.1)")
            self.opened = True
            return None
        if not self.opened:
            return Violation("connection", "amqp:illegal-state", f"{name} before open (2.4.1)")
        if name == "close":
            return None
        if name == "begin":
            if channel in self.sessions:
                return Violation("connection", "amqp:illegal-state", f"begin on channel {channel}, already in use "
                                                                     f"(2.5.1)")
            self.sessions[channel] = SessionState()
            return None
        session = self.sessions.get(channel)
        if session is None:
            return Violation("connection", "amqp:illegal-state", f"{name} on channel {channel}, which has no "
                                                                 f"session (2.5.1)")
        if name == "end":
            del self.sessions[channel]
            return None
        if session.ending:
            return Violation("discard", "", "input on a session we ended is discarded (2.5.4)")
        if name == "attach":
            return self._check_attach(session, channel, fields)
        if name == "disposition":
            self._settled(session, fields)
            return None
        handle = fields.get("handle")
        if handle is None:
            return None  # a session-level flow
        link = session.links.get(handle)
        if link is None:
            return Violation("session", "amqp:session:unattached-handle",
                             f"{name} on handle {handle}, which is not attached (2.7.{_SECTION[name]}, 2.8.16)",
                             channel)
        if link.errant and name != "detach":
            return Violation("session", "amqp:session:errant-link",
                             f"{name} on handle {handle}, whose link we detached with an error (2.8.16)", channel)
        if name == "detach":
            del session.links[handle]
            return None
        if name == "flow":
            if link.peer_role == "sender":
                if fields.get("delivery-count") is None:
                    return Violation("link", "amqp:invalid-field", f"a flow from the sending end of link "
                                     f"{link.name!r} without its delivery-count (2.7.4: MUST be set)", channel, handle)
                link.delivery_count = fields["delivery-count"]
            return None
        return self._check_transfer(link, channel, handle, fields)

    def _check_attach(self, session: SessionState, channel: int, fields: dict) -> Violation | None:
        handle = fields["handle"]
        if handle > self.handle_max.get(channel, UNLIMITED):
            return Violation("connection", "amqp:connection:framing-error",
                             f"handle {handle} is above our handle-max {self.handle_max.get(channel)} (2.7.2)")
        if handle in session.links:
            return Violation("connection", "amqp:session:handle-in-use",
                             f"handle {handle} is already attached (2.7.3: an immediate close)")
        for key, top in (("snd-settle-mode", 2), ("rcv-settle-mode", 1)):
            value = fields.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > top:
                return Violation("connection", "amqp:invalid-field", f"{key} {value} is not a valid choice (2.8.2, "
                                                                     f"2.8.3)")
        role = fields["role"]
        session.links[handle] = LinkState(fields["name"], "receiver" if role == "receiver" else "sender",
                                          fields.get("initial-delivery-count") or 0)
        session.links[handle].limit = session.links[handle].delivery_count
        return None

    def _check_transfer(self, link: LinkState, channel: int, handle: int, fields: dict) -> Violation | None:
        if link.peer_role != "sender":
            return Violation("link", "amqp:not-allowed",
                             f"transfer from the receiving end of link {link.name!r} (2.6.1, 2.7.5)", channel, handle)
        delivery_id, tag = fields.get("delivery-id"), fields.get("delivery-tag")
        if isinstance(tag, bytes) and len(tag) > MAX_TAG:
            return Violation("link", "amqp:invalid-field", f"delivery-tag of {len(tag)} octets, more than 32 (2.8.7)",
                             channel, handle)
        if link.current is not None:  # a continuation of a multi-frame delivery
            first_id, first_tag = link.current
            if (delivery_id is not None and delivery_id != first_id) or (tag is not None and tag != first_tag):
                return Violation("link", "amqp:invalid-field",
                                 "a continuation transfer names another delivery-id or tag than its first (2.7.5)",
                                 channel, handle)
        else:
            if delivery_id is None or tag is None:
                missing = "delivery-id" if delivery_id is None else "delivery-tag"
                return Violation("link", "amqp:invalid-field",
                                 f"the first transfer of a delivery has no {missing} (2.7.5)", channel, handle)
            if tag in link.unsettled_tags.values():
                return Violation("link", "amqp:invalid-field",
                                 f"delivery-tag {tag!r} is already in use by an unsettled delivery (2.7.5)",
                                 channel, handle)
            if link.delivery_count >= link.limit:
                return Violation("link", "amqp:link:transfer-limit-exceeded",
                                 f"a transfer with no link credit (delivery-count {link.delivery_count}, "
                                 f"limit {link.limit}) (2.6.7, 2.8.17)", channel, handle)
            link.delivery_count += 1
            if not fields.get("settled"):
                link.unsettled_tags[delivery_id] = tag
        more = bool(fields.get("more")) and not fields.get("aborted")
        link.current = (delivery_id if link.current is None else link.current[0],
                        tag if link.current is None else link.current[1]) if more else None
        state = fields.get("state")
        if state is not None and _state_code(state) not in DELIVERY_STATES:
            return Violation("link", "amqp:decode-error", f"transfer state {state!r} is not a delivery state (3.4)",
                             channel, handle)
        return None


_SECTION = {"flow": 4, "transfer": 5, "disposition": 6, "detach": 7}


def _state_code(state: Any) -> int | None:
    from ..amqp_types import BY_NAME

    if isinstance(state, dict) and "@type" in state and state["@type"] in BY_NAME:
        return BY_NAME[state["@type"]].code
    if isinstance(state, dict) and "@descriptor" in state:
        descriptor = state["@descriptor"]
        return descriptor if isinstance(descriptor, int) else None
    return None


def field_problem(frame: Frame) -> tuple[str, str] | None:
    """(condition, description) when a performative has a field, at any depth, that is null where it is mandatory
    or of another type than the specification gives it (:func:`..wire_types.frame_problems`: the first such, but a
    transactional state's txn-id, :data:`COORDINATOR_JUDGES`), or a disposition's state that no peer may send
    (3.4; 4.5.5 transactional-state)."""
    problems = [problem for problem in frame_problems(frame) if not problem.startswith(COORDINATOR_JUDGES)]
    if problems:
        return "amqp:decode-error", f"{problems[0]}; 2.8.15"
    state = frame.fields.get("state") if frame.performative == "disposition" else None
    if state is not None and _state_code(state) not in DELIVERY_STATES:
        return "amqp:decode-error", f"disposition state {state!r} is not a delivery state (3.4)"
    return None

