"""Faults of the reference broker: it crashes, hangs or drops connections, to test the harness, not the catalogue.

A mutant (:mod:`.mutants`) breaks a guarantee and the catalogue must FAIL it; a fault breaks the broker as a
process and the harness must survive it: the case it hits is ERROR with the reason and its frame log, the
run goes on (a broker that died is restarted) and never hangs. ``--reference-mutant NAME`` selects a fault
as it selects a mutant; ``selftest`` runs mutants only.
"""

from __future__ import annotations

import threading

from ..frames import Frame
from .broker import Broker, BrokerConnection
from .mutant_kit import Mutant, RewritingConnection

_crashed = threading.Event()  # once per process: a restarted broker does not crash again


class BrokerCrash(SystemExit):
    """Ends the server thread as an unhandled error would (SystemExit: threading prints no traceback)."""


class ClosingConnection(RewritingConnection):
    """Closes the TCP connection (no AMQP close) right after it has written its first transfer or disposition."""

    def __init__(self, broker: Broker, peer_name: str) -> None:
        super().__init__(broker, peer_name, self._until_first_delivery_frame)
        self._cut = False

    def _until_first_delivery_frame(self, frame: Frame) -> bytes:
        if self._cut:
            return b""
        if frame.performative in ("transfer", "disposition"):
            self._cut = True
            self.close_after_write = True
        return frame.raw


class ClosesMidCase(Broker):
    """Drops each connection after its first transfer or disposition."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        return ClosingConnection(self, peer_name)


class SilentConnection(BrokerConnection):
    """Reads everything and never writes a byte: hung, so the idle probe never calls it idle."""

    hung = True

    def data_to_send(self) -> bytes:
        super().data_to_send()
        return b""


class Hangs(Broker):
    """Accepts TCP connections and never answers."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        return SilentConnection(self, peer_name)


class CrashingConnection(BrokerConnection):
    """Ends the server thread when a client publishes its first message (once per process)."""

    def receive_data(self, data: bytes) -> None:
        super().receive_data(data)
        if not _crashed.is_set() and any(f.performative == "transfer" for f in self.engine.frames):
            _crashed.set()
            raise BrokerCrash("fault: the reference broker's server thread dies")


class DiesOnce(Broker):
    """The server thread dies when the first message is published to it (and only then, once per process)."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        return CrashingConnection(self, peer_name)


FAULTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("fault-closes-mid-case", "closes the TCP connection after its first transfer or disposition",
           "harness: a lost connection is ERROR with the reason and the frame log", ClosesMidCase),
    Mutant("fault-hangs", "accepts TCP connections and never answers",
           "harness: a step that gets no answer times out and the case is ERROR", Hangs),
    Mutant("fault-dies-once", "the server thread dies when the first message is published (once)",
           "harness: a broker that died is ERROR for its case and restarted for the next", DiesOnce),
)}
