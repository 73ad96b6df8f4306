"""What the suite makes on this machine once, and the tools it needs for that: the cache folder, things made
once under a lock (broker distributions, Maven builds, client shims), their progress lines, and the install
hints for Java and Maven. In ``peers``, the bottom layer, so that the client shims' builder here and the
brokers' Maven installs in ``fixtures`` share it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "AMQP_CONFORMANCE_CACHE"
JAVA_HINT = "apt-get install openjdk-17-jre-headless"
MVN_HINT = "apt-get install maven"


def cache_root() -> Path:
    """The suite's cache folder (broker distributions, Maven builds, client shims):
    ``$AMQP_CONFORMANCE_CACHE``, ``$XDG_CACHE_HOME/amqp-conformance`` or ``~/.cache/amqp-conformance``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amqp-conformance"


def say(line: str) -> None:
    """Print a progress line of an installation (on stderr, so a command's output stays clean)."""
    print(line, file=sys.stderr, flush=True)


def made_once(home: Path, ready: Callable[[], Path | None], make: Callable[[], None]) -> Path | None:
    """``ready()`` when it already finds the thing; else, holding an exclusive lock beside ``home`` (a second
    process waits for the first), ``ready()`` again, and ``make()`` first when it still finds nothing."""
    found = ready()
    if found is not None:
        return found
    home.parent.mkdir(parents=True, exist_ok=True)
    with _Locked(home.parent / f".{home.name}.lock"):
        found = ready()  # another process may have made it while we waited
        if found is None:
            make()
            found = ready()
    return found


class _Locked:
    """An exclusive ``flock`` on ``path`` for the ``with`` block (another installer waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
