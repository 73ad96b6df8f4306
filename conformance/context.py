"""What a scenario script gets to run one case: peers to the broker under test, a node, time limits.

A script observes; it does not judge. Steps that set the case up (connect, open, attach, publish the
messages a subscription needs) raise :class:`SetupFailed` (the verdict is ERROR); what the row expects is
recorded as an observation and judged afterwards against the row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.peer import ExpectationFailed, NoCredit, PeerError, ScriptedPeer, SettledByBroker
from amqp_conformance.peers.turns import OwnClock
from proton import Session

NOTHING = {"@present": False}


def expects_nothing(pattern: Any) -> bool:
    """True when a pattern asks for an absent value (so a script need only watch for the quiet time)."""
    return pattern is None or pattern == NOTHING


class SetupFailed(PeerError):
    """A step that only prepares the case failed: the harness could not complete the case."""


class BrokerActed(SetupFailed):
    """A set-up step the broker's own frames made impossible, against what the broker stated (it settled a delivery
    it had said it would send unsettled): the broker acted, so the case is judged (never ERROR)."""


class NotApplicable(Exception):
    """The condition the row is about cannot arise with this broker, by what the broker announced (e.g. a
    channel above a channel-max of 65535): the case is UNSUPPORTED with this reason, neither run nor judged."""


@dataclass
class CaseContext:
    """One case run: the broker's address, the case's own node address, the expected observations.

    ``expected`` lets a script wait the full ``timeout`` only for what the row expects to arrive and the
    shorter ``quiet`` time when it expects nothing; it must not decide what to observe.
    """

    address: BrokerAddress
    case_id: str
    expected: dict[str, Any]
    timeout: float = 2.0
    quiet: float = 0.3
    node_prefix: str = ""
    admin: Any = None  # the broker's BrokerAdmin: provokes what a row's ``given.provocation`` names
    peers: list[ScriptedPeer] = field(default_factory=list)
    node: str = ""
    anycast_prefix: str = "anycast."  # the profile's router address prefixes (see routed_address)
    multicast_prefix: str = "multicast."
    watch: float = 0.0  # the row's bounded watch (Case.watch): the inspecting consumer's waits last this long
    barrier: str = "none"  # the profile's absence_barrier: "drain" proves a node empty (.scripts.each_received)
    refused_login_delay: float = 0.0  # the profile's: time the broker takes on purpose around a refused login
    clock: OwnClock = field(default_factory=OwnClock)  # the case's own time: its deadline is the time-out

    def __post_init__(self) -> None:
        if not self.node:
            safe = self.case_id.replace("/", ".")
            self.node = f"{self.node_prefix}conformance.{safe}.{uuid.uuid4().hex[:8]}"

    def routed_address(self, kind: str) -> str:
        """The case's own router address of ``kind`` ("anycast" or "multicast"), under the profile's prefix."""
        prefix = {"anycast": self.anycast_prefix, "multicast": self.multicast_prefix}[kind]
        return f"{prefix}{self.node.removeprefix(self.node_prefix)}"

    def peer(self, label: str, **options: Any) -> ScriptedPeer:
        """Connect a new scripted peer labelled ``label``; its frames join the case's frame log."""
        options.setdefault("hostname", self.open_hostname())
        peer = ScriptedPeer.connect(self.address, timeout=self.timeout, quiet=self.quiet, label=label, **options)
        self.peers.append(peer)
        return peer

    def open_hostname(self) -> str | None:
        """The open frame's hostname the broker's admin asks for (None: the host dialled)."""
        ask = getattr(self.admin, "open_hostname", None)
        return ask() if ask is not None else None

    def wait_for(self, observation: str, when_nothing_comes: Any = None) -> float:
        """How long to watch for ``observation``: quiet if the row expects nothing, or expects
        ``when_nothing_comes`` (the value the script observes when the awaited frame never comes, e.g.
        "attached" for a link no detach ends), else what is left of the case's time-out (:meth:`time_left`)."""
        expected = self.expected.get(observation)
        absent = expects_nothing(expected) or (when_nothing_comes is not None and expected == when_nothing_comes)
        return self.quiet if absent else self.time_left()

    def time_left(self) -> float:
        """The time-out less what the case has used of it (time queued for a turn under ``run -n`` not
        counted): a frame that never comes costs the case at most its time-out in all. Never less than half
        the time-out, so a slow set-up cannot shorten a wait into a false absence."""
        return max(self.timeout / 2, min(self.timeout, self.timeout - self.clock.elapsed()))

    def frames(self) -> list[tuple[str, Frame]]:
        """Every captured frame of every peer, as (peer label, frame), merged in time order."""
        merged = [(peer.label, frame) for peer in self.peers for frame in peer.frames]
        return sorted(merged, key=lambda item: item[1].t_ns)

    def close(self) -> None:
        """Close every peer of the case."""
        for peer in self.peers:
            try:
                peer.close()
            except (PeerError, OSError):
                pass


def no_credit(what: str, detail: str) -> NotApplicable:
    """The UNSUPPORTED verdict for a set-up step that found no credit to send with, naming the step and 2.6.7."""
    return NotApplicable(f"set-up step '{what}' found no credit to send with: {detail}. A receiver may withhold "
                         f"credit (AMQP 1.0 2.6.7), so the row cannot run against this broker")


def setup_step(what: str, step: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a set-up step; turn its failure into :class:`SetupFailed` saying which step it was. A step that found
    no credit to send with raises :class:`NotApplicable` instead: the broker may withhold credit (AMQP 1.0 2.6.7),
    so the row cannot run against it, and that is no failure of the harness. A step that found the delivery it had
    to dispose of settled by the broker raises :class:`NotApplicable` where the broker's stated sender settle mode
    allows that (2.8.2), :class:`BrokerActed` where it does not."""
    try:
        return step(*args, **kwargs)
    except NoCredit as exc:
        raise no_credit(what, exc.summary) from exc
    except SettledByBroker as exc:  # allowed: the row's condition cannot arise; else the broker broke its word
        if exc.allowed:
            raise NotApplicable(f"set-up step '{what}': {exc}, so the row cannot run against this broker") from exc
        raise BrokerActed(f"set-up step '{what}' failed: {exc}") from exc
    except ExpectationFailed as exc:
        raise SetupFailed(f"set-up step '{what}' failed: {exc.summary}") from exc
    except PeerError as exc:
        raise SetupFailed(f"set-up step '{what}' failed: {exc}") from exc


def open_session(ctx: CaseContext, label: str, **options: Any) -> tuple[ScriptedPeer, Session]:
    """A connected, opened peer with one session begun (each step a set-up step)."""
    peer = setup_step("connect", ctx.peer, label, **options)
    setup_step("open", peer.open)
    session = setup_step("begin", peer.begin)
    return peer, session
