"""A broker's flow state for its sending links, reckoned from one connection's frames alone (sans-I/O).

AMQP 1.0 2.6.7 and 2.7.4 let a sender send its flow state at any time: its delivery-count, the link-credit it
has left (the receiver's last delivery-limit, its delivery-count plus link-credit, less the sender's
delivery-count) and its actual drain mode (the receiver's last drain flag), with the session's numbers (2.5.6).
Proton's sender writes a flow only to answer a drain, so a conformant variant that states its flow otherwise
(:class:`.conformant_variants.StatesFlowBeforeReading`) writes the frame itself: :class:`SenderFlowStates`
follows the frames both ways (a :class:`.CapturingEngine` listener) and :meth:`SenderFlowStates.flow_before` gives
the bytes of the flow the broker would have written for a link just before it read a frame of the client's.
Every value is encoded by ``proton.Data`` (:func:`.frames.described`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proton import uint

from ..frames import Frame, described, encode_frame
from ..sequence import MODULUS, serial_difference


@dataclass
class _Session:
    """One session as the broker's frames and the client's state it: its channel both ways and its numbers."""

    broker_channel: int
    next_outgoing_id: int  # the broker's: its begin's, one more per transfer frame it sent
    window_edge: int = 0  # next-incoming-id + incoming-window of the broker's last begin or flow: what it allows
    outgoing_window: int = 0  # the broker's last stated outgoing-window
    next_incoming_id: int | None = None  # the client's next-outgoing-id from its begin, one more per transfer
    sender_handles: dict[str, int] = field(default_factory=dict)  # link name -> the broker's handle, its senders
    client_handles: dict[int, str] = field(default_factory=dict)  # the client's handle -> link name, its receivers


@dataclass
class _SendingLink:
    """One of the broker's sending links: its delivery-count and what the client last granted."""

    initial: int  # its attach's initial-delivery-count
    delivery_count: int  # the initial, one more per delivery it began (or as its own last flow stated)
    limit: int | None = None  # the client's last delivery-count plus link-credit (2.6.7); None: no credit given
    drain: bool = False  # the client's last drain flag: the sender's actual drain mode (2.7.4)
    continuing: bool = False  # the last transfer had more=true: the next frame continues its delivery


class SenderFlowStates:
    """Follows one connection's frames (:meth:`note`, given every frame both ways in wire order) and states the
    broker's flow for any of its sending links (:meth:`flow_before`)."""

    def __init__(self) -> None:
        self._sessions: dict[int, _Session] = {}  # by the client's channel
        self._client_channel: dict[int, int] = {}  # the broker's channel -> the client's
        self._links: dict[tuple[int, str], _SendingLink] = {}  # (client channel, link name) -> the broker's sender

    def note(self, frame: Frame) -> None:
        """Take one frame of the connection (``direction`` "out": the broker's) into the state."""
        if frame.direction == "out":
            self._note_broker(frame)
        else:
            self._note_client(frame)

    def flow_before(self, frame: Frame) -> bytes | None:
        """The frame bytes of the broker's flow state for the link the client's flow ``frame`` is about, as it stood
        before the broker read ``frame`` (so before the credit ``frame`` gives); None when ``frame`` is not a flow
        for one of the broker's attached sending links, or its session is not begun both ways."""
        if frame.performative != "flow" or frame.fields.get("handle") is None:
            return None
        session = self._sessions.get(frame.channel)
        name = session.client_handles.get(frame.fields["handle"]) if session is not None else None
        link = self._links.get((frame.channel, name)) if name is not None else None
        if session is None or link is None or session.next_incoming_id is None or name not in session.sender_handles:
            return None
        credit = 0 if link.limit is None else max(0, serial_difference(link.limit, link.delivery_count))
        # below 0: the client sent beyond the window it was given, and none is left
        incoming_window = max(0, serial_difference(session.window_edge, session.next_incoming_id))
        flow = described("flow", next_incoming_id=uint(session.next_incoming_id),
                         incoming_window=uint(incoming_window), next_outgoing_id=uint(session.next_outgoing_id),
                         outgoing_window=uint(session.outgoing_window), handle=uint(session.sender_handles[name]),
                         delivery_count=uint(link.delivery_count), link_credit=uint(credit), drain=link.drain)
        return encode_frame(flow, channel=session.broker_channel)

    def _note_broker(self, frame: Frame) -> None:
        fields, name = frame.fields, frame.performative
        if name == "begin" and fields.get("remote-channel") is not None:
            session = self._sessions.setdefault(fields["remote-channel"], _Session(frame.channel, 0))
            session.broker_channel = frame.channel
            session.next_outgoing_id = int(fields.get("next-outgoing-id") or 0)
            session.outgoing_window = int(fields.get("outgoing-window") or 0)
            session.window_edge = (session.next_incoming_id or 0) + int(fields.get("incoming-window") or 0)
            self._client_channel[frame.channel] = fields["remote-channel"]
            return
        channel = self._client_channel.get(frame.channel)
        session = self._sessions.get(channel) if channel is not None else None
        if session is None:
            return
        if name == "attach" and fields.get("role") == "sender":  # the broker sends on it
            session.sender_handles[fields.get("name")] = fields.get("handle")
            initial = int(fields.get("initial-delivery-count") or 0)
            self._links[(channel, fields.get("name"))] = _SendingLink(initial, initial)
        elif name == "transfer":
            session.next_outgoing_id = (session.next_outgoing_id + 1) % MODULUS
            link = self._sending(session, channel, fields.get("handle"))
            if link is not None:
                if not link.continuing:
                    link.delivery_count = (link.delivery_count + 1) % MODULUS
                link.continuing = bool(fields.get("more"))
        elif name == "flow":
            incoming = fields.get("next-incoming-id")
            session.window_edge = int(incoming if incoming is not None else session.next_incoming_id or 0) + int(
                fields.get("incoming-window") or 0)
            session.outgoing_window = int(fields.get("outgoing-window") or 0)
            link = self._sending(session, channel, fields.get("handle"))
            if link is not None and fields.get("delivery-count") is not None:
                link.delivery_count = int(fields["delivery-count"])
        elif name == "detach":
            for link_name, handle in list(session.sender_handles.items()):
                if handle == fields.get("handle"):
                    del session.sender_handles[link_name]
                    self._links.pop((channel, link_name), None)

    def _note_client(self, frame: Frame) -> None:
        fields, name = frame.fields, frame.performative
        if name == "begin":
            session = self._sessions.setdefault(frame.channel, _Session(-1, 0))
            session.next_incoming_id = int(fields.get("next-outgoing-id") or 0)
            return
        session = self._sessions.get(frame.channel)
        if session is None:
            return
        if name == "attach" and fields.get("role") == "receiver":  # the client receives on it
            session.client_handles[fields.get("handle")] = fields.get("name")
        elif name == "transfer" and session.next_incoming_id is not None:
            session.next_incoming_id = (session.next_incoming_id + 1) % MODULUS
        elif name == "flow" and fields.get("handle") is not None:
            link_name = session.client_handles.get(fields["handle"])
            link = self._links.get((frame.channel, link_name)) if link_name is not None else None
            if link is not None:
                count = fields.get("delivery-count")
                start = link.initial if count is None else int(count)  # absent: it had not the broker's attach
                link.limit = (start + int(fields.get("link-credit") or 0)) % MODULUS
                link.drain = bool(fields.get("drain"))
        elif name == "detach":
            session.client_handles.pop(fields.get("handle"), None)

    def _sending(self, session: _Session, channel: int, handle: object) -> _SendingLink | None:
        """The broker's sending link with ``handle`` on the session, if any."""
        name = next((n for n, h in session.sender_handles.items() if h == handle), None)
        return self._links.get((channel, name)) if name is not None else None
