"""Knowing, instead of guessing, that a broker has nothing more to send: the idle probe.

A case often has to see that a frame does *not* come (no disposition for a pre-settled transfer, no more
messages on a node), and a peer waiting for a frame that never comes should not have to wait out its whole
time-out to learn so. Against a broker over the network the only evidence is time: the peer watches for the
quiet time (``--quiet-time``) or the time-out. A broker that runs in this process can say exactly when it is
done: every byte each of the case's peers wrote has been read and acted on, and every byte it wrote to the
asking peer has been read by that peer. From then on nothing can arrive, because the reference broker acts
only on input (a connection with an idle time-out, which proton acts on by time, is never idle). The wait
ends there.

- Each peer keeps a :class:`WireCount` of the bytes it wrote and read on its socket.
- A broker that can answer implements :class:`IdleProbe` and registers itself for its listening address
  (:func:`offer`); :func:`probe_for` finds it when a peer connects. Nothing registers for a remote broker,
  so the probe changes nothing there.
- :func:`idle` is what a peer's loop asks. Miscounting can only make it say "not idle" (the wait then ends
  as it always did, by time), never "idle" too soon: it requires exact equality of counts on both sides.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class WireCount:
    """The bytes one peer's socket carried: written, read, whether either side closed.

    ``local`` is the socket's own address as the broker sees it (``"127.0.0.1:54321"``).
    """

    local: str
    written: int = 0
    read: int = 0
    write_closed: bool = False
    eof: bool = False  # the broker's end of stream arrived


class IdleProbe(Protocol):
    """A broker that can tell whether it has anything more to send to a peer."""

    def idle(self, asking: WireCount, wires: list[WireCount]) -> tuple[bool, list[WireCount]]:
        """Whether the broker is idle for ``asking``, and which closed ``wires`` it has read to the end.

        Idle: the broker has read and acted on every byte (and every close) of every wire in ``wires``, and
        ``asking`` has read every byte written to it. False when unsure: never True too soon.
        """
        ...  # pragma: no cover - a Protocol


@dataclass
class _Offer:
    """A registered probe and the peers' wires to its broker from this process."""

    probe: IdleProbe
    wires: list[WireCount] = field(default_factory=list)


_offers: dict[tuple[str, int], _Offer] = {}
_lock = threading.Lock()
_enabled = True


def set_enabled(enabled: bool) -> None:
    """Turn the probe off (``--no-idle-probe``: every wait ends by time, as against a remote broker) or on."""
    global _enabled
    _enabled = enabled


def offer(host: str, port: int, probe: IdleProbe) -> None:
    """Offer ``probe`` to every peer that connects to ``host:port`` from now on (replaces an earlier one)."""
    with _lock:
        _offers[(host, port)] = _Offer(probe)


def withdraw(host: str, port: int) -> None:
    """Stop offering a probe for ``host:port``; peers that connected already keep asking the one they have."""
    with _lock:
        _offers.pop((host, port), None)


@dataclass
class Watch:
    """A peer's handle on its broker's probe."""

    wire: WireCount
    _offer: _Offer

    def idle(self) -> bool:
        """True when the broker has nothing more to send to this peer (see the module docstring)."""
        with _lock:
            wires = list(self._offer.wires)
        idle, finished = self._offer.probe.idle(self.wire, wires)
        if finished:
            with _lock:
                self._offer.wires[:] = [w for w in self._offer.wires if all(w is not f for f in finished)]
        return idle


def probe_for(host: str, port: int, wire: WireCount) -> Watch | None:
    """Join ``wire`` to the probe offered for ``host:port`` and return the peer's watch; None when none is."""
    with _lock:
        found = _offers.get((host, port)) if _enabled else None
        if found is None:
            return None
        found.wires.append(wire)
        return Watch(wire, found)
