"""Reading a raw connection's capture: the broker's first frame of a kind, waiting for one, a protocol header as
text. Shared by the raw-frame and SASL scenarios, which both drive a socket byte by byte."""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.frames import Frame

from .context import SetupFailed


def header_text(frame: Frame | None) -> str | None:
    """A protocol header as ``AMQP <id> <major>.<minor>.<revision>`` (2.2)."""
    if frame is None:
        return None
    raw = frame.raw
    return f"{raw[:4].decode('latin-1')} {raw[4]} {raw[5]}.{raw[6]}.{raw[7]}"


def first_in(frames: list[Frame], since: int, names: tuple[str, ...]) -> Frame | None:
    """The broker's first frame (direction ``in``) from index ``since`` on whose performative is one of ``names``."""
    for frame in frames[since:]:
        if frame.direction == "in" and frame.performative in names:
            return frame
    return None


def await_in(peer: Any, since: int, name: str, step: str, why: str) -> Frame:
    """The broker's first ``name`` frame after ``since``, read for the set-up step ``step``; SetupFailed saying
    ``why`` when none comes within the time-out."""
    if not peer.pump(lambda: first_in(peer.frames, since, (name,)) is not None):
        raise SetupFailed(f"set-up step '{step}' failed: {why}")
    return first_in(peer.frames, since, (name,))


def sent_since(peer: Any, since: int) -> list[str]:
    """Every frame the broker sent from index ``since`` on, by name, in order (heartbeats and the socket's end
    left out)."""
    return [frame.performative for frame in peer.frames[since:] if frame.direction == "in"
            and frame.performative not in ("socket-error", "empty")]
