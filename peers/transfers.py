"""A delivery's transfer frames, grouped as the receiver reassembles them (sans-I/O).

A sender may split a message over as many transfers as it likes (AMQP 1.0 2.6.14): each but the last says
``more``, and a continuation may leave its delivery-id out or repeat it (proton repeats it). So neither "a
transfer with a delivery-id" nor "a transfer" is a delivery: a transfer begins one unless the transfer before it
on the same link, in the same direction, said ``more`` and was not aborted (2.7.5). Everything that reads what a
delivery carried (its message, whether it came settled) reads all of its transfers.
"""

from __future__ import annotations

from collections.abc import Iterable

from .frames import Frame


def deliveries(frames: Iterable[Frame], direction: str) -> list[list[Frame]]:
    """The transfers of each delivery sent in ``direction`` ("in": to us, "out": ours), a list a delivery, in the
    order each delivery began; a delivery cut short (its last transfer said ``more``) is its transfers so far.
    Links are told apart by channel and handle."""
    found: list[list[Frame]] = []
    open_on: dict[tuple[int, object], list[Frame]] = {}  # (channel, handle) -> the delivery its next transfer continues
    for frame in frames:
        if frame.performative != "transfer" or frame.direction != direction:
            continue
        link = (frame.channel, frame.fields.get("handle"))
        current = open_on.pop(link, None)
        if current is None:
            current = [frame]
            found.append(current)
        else:
            current.append(frame)
        if frame.fields.get("more") and not frame.fields.get("aborted"):
            open_on[link] = current
    return found


def payload_of(transfers: Iterable[Frame]) -> bytes:
    """The delivery's payload: its transfers' payloads joined in order (the encoded message once it is whole)."""
    return b"".join(bytes(frame.payload or b"") for frame in transfers)


def came_settled(transfers: Iterable[Frame]) -> bool:
    """Whether the sender settled the delivery in its transfers: any of them with ``settled`` true (2.7.5: settled
    may be set on any transfer of a delivery, and once set it stays)."""
    return any(bool(frame.fields.get("settled")) for frame in transfers)
