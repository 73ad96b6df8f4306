"""The end of the TCP connection after the broker's ``close``: an effect that may come late.

2.4.3 lets a broker end the TCP connection as soon as it has written its ``close``, or keep it until ours
arrives. Either way the end of the stream reaches us some time after the ``close`` frame; read a few
milliseconds after it, a socket the broker is ending looks open. :func:`await_end_after_close` is the one wait
for it, shared by the ``connection_fate`` observation (every scenario) and the raw-frame scenario's own
``socket`` observation, so both read the same end.
"""

from __future__ import annotations

import time
from typing import Any

from .frames import Frame, first_frame


def we_closed_first(frames: list[Frame]) -> bool:
    """True when our close went out before the broker's: the broker only answered it (it ended nothing)."""
    first = first_frame(frames, "close")
    return first is not None and first.direction == "out"


def await_end_after_close(peer: Any, quiet: float) -> None:
    """When the broker sent a ``close`` first, read ``peer`` until the end of its stream, for at most ``quiet``
    seconds counted from that close's arrival: nothing when no such close came, when the stream has ended
    already, or when that time has passed (another wait already watched it). A broker that keeps the socket for
    our close costs the rest of the quiet time, once."""
    frames = peer.frames
    close = first_frame(frames, "close", "in")
    if quiet <= 0 or close is None or we_closed_first(frames) or peer.eof \
            or getattr(peer, "_sock", None) is None:
        return
    remaining = quiet - (time.monotonic_ns() - close.t_ns) / 1e9
    if remaining > 0:
        peer.pump(lambda: bool(peer.eof), remaining)
