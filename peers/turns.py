"""Taking turns: cases side by side on threads, one at a time inside python-qpid-proton.

python-qpid-proton 0.40 calls proton-C through cffi, which lets go of Python's interpreter lock for the
length of each C call. Two threads each driving their own connections then run proton-C at the same moment,
and proton-C is not made for that: under eight cases side by side against a real broker the process died of
a segmentation fault while two threads decoded frames (``pn_data_*``) and a third read its collector's
events. So cases that run side by side (``run -n``, :mod:`amqp_conformance.fixtures.parallel`) take turns:
a case thread holds :data:`TURNS` while it runs any code of its own, and lets go only where it waits for its
sockets (:func:`waiting`), which is where a case spends nearly all its time against a broker over the
network. Waits overlap; proton work never does.

Code that is not running a case side by side (one case at a time, the embedded reference broker's own
thread) never holds a turn, and :func:`waiting` is then a plain pass-through.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


class FairLock:
    """A lock handed to its waiters in the order they asked (first come, first served).

    A plain :class:`threading.Lock` lets the thread that lets go take it straight back: a case that polls its
    socket in a loop (let go, ``select``, take again) could keep every other case waiting for seconds, long
    enough for their own time-outs to pass. Here :meth:`release` hands the lock to the longest waiter.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiters: deque[threading.Event] = deque()
        self._held = False

    def acquire(self) -> None:
        """Block until this thread holds the lock; waiters get it in the order they called."""
        with self._guard:
            if not self._held:
                self._held = True
                return
            handed = threading.Event()
            self._waiters.append(handed)
        handed.wait()  # release() handed the lock over: it never became free in between

    def queued(self) -> int:
        """How many threads are waiting for the lock now."""
        with self._guard:
            return len(self._waiters)

    def release(self) -> None:
        """Let go: the longest waiter holds the lock now, or it is free when none waits."""
        with self._guard:
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._held = False


class Turns:
    """A lock taken by each case thread for its whole run, let go of while it waits on sockets."""

    def __init__(self) -> None:
        self._lock = FairLock()
        self._mine = threading.local()

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold a turn for the body (a whole case); other case threads run only while this one waits."""
        self._lock.acquire()
        self._mine.held = True
        try:
            yield
        finally:
            self._mine.held = False
            self._lock.release()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Let another case run while the body waits (a ``select``, a sleep); the turn is back after it.

        The body must not touch proton. A thread that holds no turn passes straight through.
        """
        if not getattr(self._mine, "held", False):
            yield
            return
        self._mine.held = False
        self._lock.release()
        try:
            yield
        finally:
            asked = time.monotonic()
            self._lock.acquire()
            self._mine.held = True
            self._mine.waited = self.waited_s() + time.monotonic() - asked

    def queued(self) -> int:
        """How many case threads are waiting for a turn now."""
        return self._lock.queued()

    def waited_s(self) -> float:
        """Seconds this thread has spent so far waiting to get its turn back after a wait (0.0 for a thread
        that never held one). A wait's deadline is moved on by what this grows while it runs
        (:func:`deadline_extension`): time the case spent queued behind its neighbours is not time the broker
        took to answer, so ``run -n`` cannot turn a broker's answer into a time-out."""
        return getattr(self._mine, "waited", 0.0)


TURNS = Turns()
waiting = TURNS.waiting
waited_s = TURNS.waited_s


@dataclass
class OwnClock:
    """A case thread's own time since the clock was made: wall time less what the thread spent queued for a
    turn since (``run -n``), so queueing behind its neighbours never counts as the broker's time to answer."""

    started: float = field(default_factory=time.monotonic)
    queued_before: float = field(default_factory=waited_s)

    def elapsed(self) -> float:
        """Seconds of this thread's own time (waits and work) since :attr:`started`."""
        return time.monotonic() - self.started - (waited_s() - self.queued_before)


SHARE_EVERY = 256  # frames encoded or decoded in one go between hand-overs (:func:`shared`)


def let_others_run() -> None:
    """Hand the turn to the case thread that has waited longest for it, if any, and take it back.

    A long stretch of work inside proton (encoding or decoding the 65536 transfers a broker's credit asks
    for) would otherwise hold every case beside it up for seconds: their waits would end late."""
    with TURNS.waiting():
        pass


def shared(items: Iterable[T]) -> Iterator[T]:
    """``items``, handing the turn over every :data:`SHARE_EVERY` of them (:func:`let_others_run`)."""
    for index, item in enumerate(items):
        if index and index % SHARE_EVERY == 0:
            let_others_run()
        yield item
