"""The links of one grid connection, as its frames show them (sans-I/O): which attach and which detach is whose.

A frame names its link by handle, and a handle means something only on its session and in its direction: the
client's frames carry the client's channel and handle, the broker's its own (AMQP 1.0 2.6.2, 2.5.1). The two
ends' attaches of one link share its name (2.6.1). So one walk over a connection's frames, keyed by (direction,
channel, handle), gives each link its attaches and its detaches; a later attach on a handle takes that handle
over (a handle freed by a detach, or a channel by an end, may name another link afterwards). A cell's checks of
detaches then look at the link they concern, not at the first detach of the connection: a row whose client holds
a first link besides its row's link (``first_link``) may see that link's detaches too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.frames import Frame


@dataclass
class WireLink:
    """One link of a connection: its name, each end's attach (None until that end attached) and every detach of
    either end on it, with the detach's position among the connection's frames, in order."""

    name: Any
    client_attach: Frame | None = None
    broker_attach: Frame | None = None
    detaches: list[tuple[int, Frame]] = field(default_factory=list)

    def first_detach(self, direction: str) -> tuple[int, Frame] | None:
        """The first detach ``direction``'s end wrote on this link ("out": the client's, "in": the broker's),
        with its position; None when it wrote none."""
        return next((d for d in self.detaches if d[1].direction == direction), None)

    def answering_detach(self) -> Frame | None:
        """The broker's detach answering the client's first on this link (the broker's first detach after it);
        None when the client wrote none or the broker did not answer."""
        ours = self.first_detach("out")
        if ours is None:
            return None
        return next((f for at, f in self.detaches if f.direction == "in" and at > ours[0]), None)

    def broker_closing(self) -> tuple[int, Frame] | None:
        """The broker's detach that closed this link on its own: its first detach, with closed=true, when it came
        before any detach of the client's (one that answers none, 2.6.6); None when there is none."""
        first = self.detaches[0] if self.detaches else None
        if first is None or first[1].direction != "in" or not first[1].fields.get("closed"):
            return None
        return first


def link_frames(frames: list[Frame], link: WireLink) -> list[Frame]:
    """The frames of ``frames`` on ``link`` (each end's, by the (channel, handle) of its attach), in order, up to the
    first detach of either end (not included): after it a handle may name another link (2.6.2). Empty when the client
    never attached it."""
    if link.client_attach is None:
        return []
    ours = (link.client_attach.channel, link.client_attach.fields.get("handle"))
    theirs = None if link.broker_attach is None else (link.broker_attach.channel,
                                                      link.broker_attach.fields.get("handle"))
    found = []
    for frame in frames:
        key = (frame.channel, frame.fields.get("handle"))
        if (frame.direction == "out" and key == ours) or (frame.direction == "in" and key == theirs):
            if frame.performative == "detach":
                break
            found.append(frame)
    return found


@dataclass(frozen=True)
class ConnectionLinks:
    """Every link of one connection in order of its first attach, and the detaches that named a handle no attach
    had given (with their positions): those belong to no link, and a check that would lose them judges them
    with the link it concerns."""

    links: list[WireLink]
    stray_detaches: list[tuple[int, Frame]]

    def of_role(self, client_role: str) -> WireLink | None:
        """The client's first link of ``client_role`` ("sender" or "receiver", its own attach's role): the row's
        link (a row's ``first_link`` is of the other role); None when the client attached none."""
        return next((link for link in self.links if link.client_attach is not None
                     and link.client_attach.fields.get("role") == client_role), None)


def connection_links(frames: list[Frame]) -> ConnectionLinks:
    """The links of a connection from its frames, in order (the client's frames ``out``, the broker's ``in``).
    An attach joins the latest link of its name that its end has not attached yet, or begins a new link."""
    links: list[WireLink] = []
    by_handle: dict[tuple[str, int, Any], WireLink] = {}
    stray: list[tuple[int, Frame]] = []
    for position, frame in enumerate(frames):
        key = (frame.direction, frame.channel, frame.fields.get("handle"))
        if frame.performative == "attach":
            name = frame.fields.get("name")
            side = "client_attach" if frame.direction == "out" else "broker_attach"
            link = next((link for link in reversed(links) if link.name == name and getattr(link, side) is None),
                        None)
            if link is None:
                link = WireLink(name)
                links.append(link)
            setattr(link, side, frame)
            by_handle[key] = link
        elif frame.performative == "detach":
            owner = by_handle.get(key)
            (stray if owner is None else owner.detaches).append((position, frame))
    return ConnectionLinks(links, stray)
