"""What the python-proton shim remembers of each link and delivery, and the reports it makes of them."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from proton import Delivery, Link


@dataclass
class LinkState:
    """One link the harness named: proton's link, its role, what arrived and was not yet taken, how it ended."""

    name: str
    link: Link
    role: str  # "sender" or "receiver"
    inbox: deque[Arrival] = field(default_factory=deque)  # received, not yet taken by a receive
    ended: str | None = None  # why commands on it are refused now: "detached", "closed", "ended by the peer"
    remote_detached: bool = False  # the peer's detach arrived
    remote_closed: bool | None = None  # its closed flag
    opened_by: str | None = None  # the callback that told the shim the peer's attach arrived (on_link_opened)
    last_told_by: str | None = None  # the callback that last told the shim of the link's credit (a drain's end)


@dataclass
class Sent:
    """One message of a ``send``: its delivery and what proton has told the shim of it so far."""

    index: int
    link: str
    delivery: Delivery
    tag: str
    locally_settled: bool = False
    remote_state: dict[str, Any] | None = None
    remote_settled: bool = False
    api: list[str] = field(default_factory=list)  # the callbacks and calls, in order, that made this report
    done: bool = False  # reached all it will reach: settled both ways, or pre-settled
    reported: bool = False  # the send's reply went out: further news is a delivery-update event

    def report(self) -> dict[str, Any]:
        """The contract's send report of this message, as it stands."""
        return {"index": self.index, "tag": self.tag, "remote_state": self.remote_state,
                "remote_settled": self.remote_settled, "locally_settled": self.locally_settled,
                "api": "; ".join(self.api)}


@dataclass
class Arrival:
    """One received message: what it carried, what the shim did with it, what the sender did since."""

    link: str
    delivery: Delivery
    body: str | None
    tag: str
    settled_on_arrival: bool
    delivery_count: int | None
    first_acquirer: bool | None
    index: int = -1  # its place in the receive that took it
    disposed: dict[str, Any] | None = None
    remote_state: dict[str, Any] | None = None  # the state the sender gave it, as Delivery.remote_state tells
    locally_settled: bool = False
    remote_settled: bool = False
    reported: bool = False

    def report(self) -> dict[str, Any]:
        """The contract's receive report of this message, as it stands."""
        return {"index": self.index, "body": self.body, "tag": self.tag,
                "settled_on_arrival": self.settled_on_arrival, "delivery_count": self.delivery_count,
                "first_acquirer": self.first_acquirer, "disposed": self.disposed, "remote_state": self.remote_state,
                "locally_settled": self.locally_settled, "remote_settled": self.remote_settled}
