"""A delivery's transfer frames, grouped as the receiver reassembles them (sans-I/O).

A sender may split a message over as many transfers as it likes (AMQP 1.0 2.6.14): each but the last says
``more``, and a continuation may leave its delivery-id out or repeat it (proton repeats it). So neither "a
transfer with a delivery-id" nor "a transfer" is a delivery: a transfer begins one unless the transfer before it
on the same link, in the same direction, said ``more`` and was not aborted (2.7.5). Everything that reads what a
delivery carried (its message, whether it came settled) reads all of its transfers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .frames import Frame


class DeliveryGrouping:
    """The transfers of each delivery sent in one direction, grouped frame by frame as they are added (what
    :func:`deliveries` returns for the frames added so far): a capture that only grows is grouped once, however
    often its deliveries are read."""

    def __init__(self, direction: str) -> None:
        self.direction = direction
        self.found: list[list[Frame]] = []  # a list a delivery, in the order each began
        self._open_on: dict[tuple[int, object], list[Frame]] = {}  # (channel, handle) -> the delivery it continues
        self._read = 0  # how many frames of the capture :meth:`update` has read

    def add(self, frame: Frame) -> None:
        """Group one more frame: a transfer in this direction begins a delivery or continues its link's, which
        goes on while its last transfer said ``more`` and was not aborted; any other frame is passed over."""
        if frame.performative != "transfer" or frame.direction != self.direction:
            return
        link = (frame.channel, frame.fields.get("handle"))
        current = self._open_on.pop(link, None)
        if current is None:
            current = [frame]
            self.found.append(current)
        else:
            current.append(frame)
        if frame.fields.get("more") and not frame.fields.get("aborted"):
            self._open_on[link] = current

    def update(self, capture: Sequence[Frame]) -> list[list[Frame]]:
        """Group the frames of ``capture`` not read before, and return every delivery so far. ``capture`` is the
        same list each call, only ever appended to (a peer's :attr:`.CapturingEngine.frames`)."""
        for frame in capture[self._read:]:
            self.add(frame)
        self._read = len(capture)
        return self.found


def deliveries(frames: Iterable[Frame], direction: str) -> list[list[Frame]]:
    """The transfers of each delivery sent in ``direction`` ("in": to us, "out": ours), a list a delivery, in the
    order each delivery began; a delivery cut short (its last transfer said ``more``) is its transfers so far.
    Links are told apart by channel and handle."""
    grouping = DeliveryGrouping(direction)
    for frame in frames:
        grouping.add(frame)
    return grouping.found


def payload_of(transfers: Iterable[Frame]) -> bytes:
    """The delivery's payload: its transfers' payloads joined in order (the encoded message once it is whole)."""
    return b"".join(bytes(frame.payload or b"") for frame in transfers)


def came_settled(transfers: Iterable[Frame]) -> bool:
    """Whether the sender settled the delivery in its transfers: any of them with ``settled`` true (2.7.5: settled
    may be set on any transfer of a delivery, and once set it stays)."""
    return any(bool(frame.fields.get("settled")) for frame in transfers)
