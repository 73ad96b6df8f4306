"""When received bytes arrived: the kernel's receive time stamp, on the ``time.monotonic_ns`` clock.

The harness is single-threaded: it reads one socket while bytes wait on another, so the time it reads (or
decodes) a frame is not when the frame arrived. On a plain TCP socket :func:`enable` asks the kernel to
stamp each received packet (``SO_TIMESTAMPNS``) and :func:`recv_stamped` reads that stamp with the bytes,
converted from the kernel's real-time clock to the monotonic clock every frame time uses. Where there is
no stamp (TLS: the bytes come out of the TLS layer, not the kernel; a platform without the option) the
time is taken right after ``recv`` returns, which is the closest the harness can tell.

The conversion needs the two clocks' offset at one instant, and two clock reads are two instants: a thread
preempted between them (a loaded machine, a broker's JVM on the same two cores) took an offset wrong by the
whole preemption, up to milliseconds (measured: 69 of 3 M single pairs more than 50 us off, the worst 4.1 ms,
on two busy cores). A relayed reply stamped that much early lands before the frame it answers when the two
directions are merged (CI, 1 Dec: a broker's settlement 139 us before its transfer). So the offset is read as
real, monotonic, real, and the pair is kept only when the two real reads are close (:data:`OFFSET_BRACKET_NS`),
retrying a few times and keeping the tightest: its error is at most half its bracket.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time

# Linux's SO_TIMESTAMPNS (Python's socket module does not export it): 35 in asm-generic, which x86 and arm use
_GENERIC = {"x86_64", "i686", "i386", "aarch64", "arm64", "armv7l", "riscv64", "s390x"}
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", None) or \
    (35 if sys.platform == "linux" and platform.machine() in _GENERIC else None)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: tv_sec, tv_nsec (64-bit longs)
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
OFFSET_BRACKET_NS = 10_000  # a real/monotonic/real bracket wider than this was preempted: read it again
OFFSET_TRIES = 4  # brackets read at most; the tightest is kept


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what ``sock`` receives; True when it will (a plain TCP socket on Linux).

    When no socket on the machine had asked before, Linux turns stamping on a moment later (a deferred work
    item); a packet that arrives before then carries no stamp and is timed when it is read."""
    if SO_TIMESTAMPNS is None or not _ANCILLARY or type(sock) is not socket.socket:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def recv_stamped(sock: socket.socket, size: int) -> tuple[bytes, int]:
    """``sock.recv(size)`` and when those bytes arrived (``time.monotonic_ns`` clock).

    Raises what ``recv`` raises (``BlockingIOError`` and friends included). The time is the kernel's stamp
    of the last packet read when :func:`enable` succeeded on ``sock``; otherwise the time ``recv`` returned.
    """
    if type(sock) is not socket.socket or not _ANCILLARY:
        data = sock.recv(size)
        return data, time.monotonic_ns()
    data, ancillary, _flags, _addr = sock.recvmsg(size, _ANCILLARY)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
            seconds, nanos = _TIMESPEC.unpack(payload[:_TIMESPEC.size])
            real_minus_mono, now_mono = real_minus_monotonic()
            arrived = seconds * 1_000_000_000 + nanos - real_minus_mono
            return data, min(arrived, now_mono)  # never later than now, whatever the clocks did
    return data, time.monotonic_ns()


def real_minus_monotonic() -> tuple[int, int]:
    """The real-time clock minus the monotonic clock, in ns, and the monotonic time it was read at.

    Guarantees an error of at most half the tightest of up to :data:`OFFSET_TRIES` real/monotonic/real
    brackets: at most ``OFFSET_BRACKET_NS / 2`` unless every try was preempted (then the least preempted)."""
    best_width, best_offset, best_mono = None, 0, 0
    for _ in range(OFFSET_TRIES):
        real_before = time.time_ns()
        mono = time.monotonic_ns()
        real_after = time.time_ns()
        width = abs(real_after - real_before)  # negative only when the real clock was stepped back between
        if best_width is None or width < best_width:
            best_width, best_offset, best_mono = width, (real_before + real_after) // 2 - mono, mono
        if width <= OFFSET_BRACKET_NS:
            break
    return best_offset, best_mono
