"""The ways a client shim fails the harness: each message is one line naming the shim, the problem and the fix."""

from __future__ import annotations

from .crash import LibraryCrash


class ShimError(Exception):
    """A shim's definition, build or conversation is wrong (a bad ``shim.toml``, a failed build, a line that is not
    JSON, an exit mid-command): the harness's fault or the shim's, never the broker's."""


class ShimExited(ShimError):
    """A shim exited while a command waited for its reply. ``crash`` is its client library's own crash when the
    shim's stderr shows one (:mod:`.crash`): then the client failed, not the harness."""

    def __init__(self, message: str, crash: LibraryCrash | None = None) -> None:
        super().__init__(message)
        self.crash = crash


class ShimTimeout(ShimError):
    """A shim gave no reply to a command within the harness's timeout (the process is left running)."""


class ShimUnavailable(Exception):
    """A shim cannot be built or run on this machine (a command it needs is not on PATH): skip its client, saying
    why. Not a :class:`ShimError`: nothing is wrong with the shim."""
