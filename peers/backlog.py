"""Whether a broker on this host is still reading what a peer wrote: the bytes it has not read yet.

A wait's time-out is the broker's time to act on what the peer sent; it should not run out while the broker
is still reading it. A starved broker (a loaded machine: two cores shared with the harness and a JVM) can take
seconds to read the 65,536 transfers of a credit row, and sends nothing meanwhile; a wait that ends then calls
a working connection dead (CI61, 7 Dec 2026: RabbitMQ beside selftest, ``alive: expected True, observed False``
with the socket open; reproduced by starving its node to 5 % of a core).

The kernel knows, for a broker on this host: of the bytes a peer wrote, those it has not sent yet (``notsent``
of its socket's ``TCP_INFO``) and those in the broker's receive queue (``rx_queue`` of the broker's end in the
host's socket table, ``/proc/net/tcp`` or ``/proc/net/tcp6``) are the ones the broker has not read (over the
loopback what is sent is in the receiver's queue at once). Not the send queue: it counts bytes sent and not
yet acknowledged, which the receiver has already queued (a delayed acknowledgement counts them twice). For a
broker elsewhere, or where there is no such table (not Linux), the count is unknown (None) and waits end by
time, as they always did.

:class:`Reading` turns successive counts into a verdict: the broker is reading while it has bytes unread and
has read some lately or has read all it was given (the rest waits in our socket for TCP to send it: the
broker's window opens only once it has read enough). A broker that stopped reading is not waited for long.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

from .turns import OwnClock

TABLES = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}
LOOK_FLOOR = 0.5  # seconds at least from one look to the next (a starved broker reads in bursts)
# a wait shorter than this is a poll (``pump(timeout=0)`` moves the bytes that are there): never extended, never
# looked at (a look reads the host's socket table, some 3 ms)
SHORTEST_WAIT = 0.1
READING_PATIENCE = 10  # the longest a wait goes on while the broker reads, in its own time-outs
# a broker that read nothing over this many looks has stopped reading (RabbitMQ's node at 5 % of a core held 1.6 MB
# unread for 0.5 s, as its flow control held its reader back, then read it all within the next 0.5 s)
STALL_LOOKS = 2
# struct tcp_info (linux/tcp.h, only ever extended): tcpi_notsent_bytes, a u32 at this offset (Linux 4.6 on)
NOTSENT_OFFSET = 144


def _hex_address(family: int, host: str, port: int) -> str:
    """``host:port`` as the kernel's socket table writes it: the address's 32-bit words in host byte order, in
    hex, then the port in hex (``0100007F:1628`` for 127.0.0.1:5672 on a little-endian machine)."""
    packed = socket.inet_pton(family, host)
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


class Unread(NamedTuple):
    """The bytes a peer wrote that the broker has not read: still in the peer's socket (``unsent``) and in the
    broker's receive queue (``queued``)."""

    unsent: int
    queued: int

    @property
    def total(self) -> int:
        """Every byte written and not read."""
        return self.unsent + self.queued


def unread_bytes(sock: socket.socket | None) -> Unread | None:
    """The bytes written on ``sock`` that its peer has not read yet. None when unknown: no socket, a peer on
    another host (its end is not in this host's table), no socket table or no ``TCP_INFO`` (not Linux)."""
    if sock is None or sock.family not in TABLES or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        ours = sock.getsockname()
        theirs = sock.getpeername()
        with open(TABLES[sock.family], encoding="ascii") as table:
            lines = table.read().splitlines()[1:]
    except OSError:
        return None
    if len(info) < NOTSENT_OFFSET + 4:
        return None
    (unsent,) = struct.unpack_from("=I", info, NOTSENT_OFFSET)
    local = _hex_address(sock.family, theirs[0], theirs[1])  # the broker's end: its local address is our peer's
    remote = _hex_address(sock.family, ours[0], ours[1])
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[1] == local and fields[2] == remote:
            return Unread(unsent, int(fields[4].split(":")[1], 16))
    return None


@dataclass
class Reading:
    """One wait's looks at its socket's unread bytes as its time-out comes: whether, and how long, it goes on.

    ``looked`` is the count at the wait's last look that found the broker reading (None before the first),
    ``stalls`` the looks since that found it read nothing; make one per wait."""

    looked: int | None = None
    stalls: int = 0

    def goes_on(self, unread: Unread | None) -> bool:
        """Whether a wait whose time-out has come should go on, given the broker's ``unread`` bytes now: True
        when some are unread and the broker is reading: this is the wait's first look, or it has read all it was
        given (none queued: TCP has yet to send it the rest), or fewer are unread than at the last look that
        found it reading, or that look was fewer than :data:`STALL_LOOKS` looks ago (a broker reads in bursts,
        as its own flow control lets it). False when none are unread, the count is unknown, or the broker read
        nothing over :data:`STALL_LOOKS` looks (it stopped reading: waiting longer would not make it act)."""
        if unread is None or not unread.total:
            return False
        if self.looked is None or not unread.queued or unread.total < self.looked:
            self.looked, self.stalls = unread.total, 0
            return True
        self.stalls += 1
        return self.stalls < STALL_LOOKS

    def more_time(self, sock: socket.socket | None, base: float, waited: float) -> float:
        """Seconds more a wait on ``sock`` whose time-out (``base`` seconds) has come should last, having lasted
        ``waited``: 0 to end it now. While the broker reads (:meth:`goes_on`), ``base`` more, or
        :data:`LOOK_FLOOR` if that is longer (then the next look decides); never past :data:`READING_PATIENCE`
        time-outs in all, or that many floors for a short wait. A poll (``base`` under :data:`SHORTEST_WAIT`)
        ends at once."""
        if base < SHORTEST_WAIT or waited >= READING_PATIENCE * max(base, LOOK_FLOOR):
            return 0.0
        if not self.goes_on(unread_bytes(sock)):
            return 0.0
        return max(base, LOOK_FLOOR)


class WaitBudget:
    """One wait's time-out: ``base`` seconds of the waiting thread's own time (:class:`.turns.OwnClock`: time queued
    for a turn under ``run -n`` does not count), lengthened while a broker on this host still reads what the peer
    wrote (:class:`Reading`). Make one per wait."""

    def __init__(self, base: float) -> None:
        self.base = self.budget = base
        self.clock = OwnClock()
        self.reading = Reading()

    def remaining(self, sock: socket.socket | None, ended: bool) -> float:
        """Seconds left of the wait on ``sock``, 0 or less once it is over. When the time-out has come and the
        stream has not ``ended``, the broker's unread bytes are looked at (:meth:`Reading.more_time`): while it
        reads, the time-out moves on and the seconds it adds are returned."""
        remaining = self.budget - self.clock.elapsed()
        if remaining <= 0 and not ended:
            more = self.reading.more_time(sock, self.base, self.clock.elapsed())
            if more:
                self.budget, remaining = self.clock.elapsed() + more, more
        return remaining
