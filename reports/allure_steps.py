"""Group a case's captured, party-labelled frame log into exchanges: one Allure step each.

An exchange is what a reader of the wire thinks of as one move: a peer's connection handshake (protocol
headers and SASL), ``open``, ``begin``, ``attach`` of one link, the ``flow`` frames on it, one delivery's
``transfer`` frames, one ``disposition``, ``detach``, ``end``, ``close``. Grouping is a pure function of
the frames (:func:`exchanges`), so it is tested without Allure; :func:`step_results` turns the exchanges
into Allure step results (one child step per frame) with the frames' own times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from amqp_conformance.peers.frames import Frame, render

# Performatives answered by the other side: their exchange stays open until both directions were seen.
PAIRED = frozenset({"open", "begin", "attach", "detach", "end", "close"})
HANDSHAKE = frozenset({"amqp-header", "sasl-header", "tls-header", "sasl-mechanisms", "sasl-init",
                       "sasl-challenge", "sasl-response", "sasl-outcome"})
ARROW = {"out": "→", "in": "←"}


@dataclass
class Exchange:
    """Frames of one move on the wire, in time order, with a title that says what the move was."""

    kind: str
    party: str
    key: tuple
    frames: list[Frame] = field(default_factory=list)
    link: str | None = None
    closed: bool = False

    @property
    def start_ns(self) -> int:
        """Monotonic time of the first frame."""
        return self.frames[0].t_ns

    @property
    def stop_ns(self) -> int:
        """Monotonic time of the last frame."""
        return self.frames[-1].t_ns

    @property
    def title(self) -> str:
        """A one-line summary: ``publisher: transfer delivery 0 on 'snd-37' → broker (settled)``."""
        first = self.frames[0]
        fields = first.fields
        link = f" '{self.link}'" if self.link else ""
        if self.kind == "handshake":
            mechanism = next((f.fields.get("mechanism") for f in self.frames if f.performative == "sasl-init"), None)
            what = f"connect (SASL {mechanism})" if mechanism else "connect (protocol headers)"
        elif self.kind == "open":
            what = "open"
        elif self.kind in ("begin", "end"):
            what = f"{self.kind} channel {first.channel}"
        elif self.kind == "attach":
            what = f"attach link{link} (peer is {fields.get('role', '?')})" if first.direction == "out" else \
                f"attach link{link} (broker is {fields.get('role', '?')})"
        elif self.kind == "flow":
            credit = [f.fields.get("link-credit") for f in self.frames if f.fields.get("link-credit") is not None]
            what = f"flow{' on' + link if link else ''}" + (f" (link-credit {credit[-1]})" if credit else "")
        elif self.kind == "transfer":
            settled = any(f.fields.get("settled") for f in self.frames)
            count = f", {len(self.frames)} frames" if len(self.frames) > 1 else ""
            aborted = ", aborted" if any(f.fields.get("aborted") for f in self.frames) else ""
            what = (f"transfer delivery {self.key[-1]} on{link} {ARROW[first.direction]} broker"
                    f" ({'settled' if settled else 'unsettled'}{count}{aborted})")
        elif self.kind == "disposition":
            state = fields.get("state")
            state_name = state.get("@type", "?") if isinstance(state, dict) else "no state"
            last = fields.get("last")
            span = f"{fields.get('first')}" + (f"..{last}" if last not in (None, fields.get("first")) else "")
            what = (f"disposition {state_name} {'settled' if fields.get('settled') else 'unsettled'} "
                    f"{ARROW[first.direction]} broker (role {fields.get('role')}, delivery {span})")
        elif self.kind == "detach":
            closing = [f for f in self.frames if f.fields.get("error")]
            error = closing[0].fields["error"].get("condition") if closing else None
            what = f"detach link{link}" + (f" (error {error})" if error else "")
        elif self.kind == "heartbeat":
            what = f"heartbeat ×{len(self.frames)}"
        else:
            what = ", ".join(sorted({f.performative for f in self.frames}))
        errors = [f.fields["error"] for f in self.frames if self.kind in ("end", "close") and f.fields.get("error")]
        if errors and isinstance(errors[0], dict):
            what += f" (error {errors[0].get('condition')})"
        return f"{self.party}: {what}"


class _Grouper:
    """Walks the merged frame log once, keeping each peer's link names and delivery ids."""

    def __init__(self) -> None:
        self.groups: list[Exchange] = []
        self.links: dict[tuple, str] = {}  # (party, direction, channel, handle) -> link name
        self.last_delivery: dict[tuple, Any] = {}  # (party, direction, channel, handle) -> delivery id
        # (kind, key) -> the latest exchange started with them: at most one of a kind and key is open at a time
        # (a new one starts only when none is), so finding it is a look-up, not a scan (65,537 transfers: 2 min)
        self.latest: dict[tuple, Exchange] = {}

    def link_of(self, party: str, frame: Frame) -> str | None:
        handle = frame.fields.get("handle")
        return None if handle is None else self.links.get((party, frame.direction, frame.channel, handle))

    def key_of(self, party: str, frame: Frame) -> tuple[str, tuple, str | None]:
        perf = frame.performative
        if perf in HANDSHAKE:
            return "handshake", (party,), None
        if perf == "attach":
            name = frame.fields.get("name")
            self.links[(party, frame.direction, frame.channel, frame.fields.get("handle"))] = name
            return "attach", (party, frame.channel, name), name
        if perf == "empty":
            return "heartbeat", (party,), None
        if perf in ("open", "close"):
            return perf, (party,), None
        if perf in ("begin", "end"):
            return perf, (party, frame.channel if perf == "end" or frame.direction == "out" else
                          frame.fields.get("remote-channel", frame.channel)), None
        link = self.link_of(party, frame)
        if perf in ("detach", "flow"):
            return perf, (party, frame.channel, link), link
        if perf == "transfer":
            where = (party, frame.direction, frame.channel, frame.fields.get("handle"))
            delivery = frame.fields.get("delivery-id")
            if delivery is None:
                delivery = self.last_delivery.get(where)
            self.last_delivery[where] = delivery
            return "transfer", (party, frame.direction, frame.channel, link, delivery), link
        if perf == "disposition":
            return "disposition", (party, frame.t_ns), None  # each disposition is its own move
        return "other", (party, perf), None

    def add(self, party: str, frame: Frame) -> None:
        kind, key, link = self.key_of(party, frame)
        group = self.find_open(kind, key)
        if group is None:
            group = Exchange(kind, party, key, link=link)
            self.groups.append(group)
            self.latest[(kind, key)] = group
        if kind in PAIRED and group.frames and frame.direction != group.frames[0].direction:
            group.closed = True
        group.frames.append(frame)
        if kind == "open" and frame.direction == "in":  # the handshake ends when the broker's open arrives
            for other in self.groups:
                if other.kind == "handshake" and other.party == party:
                    other.closed = True

    def find_open(self, kind: str, key: tuple) -> Exchange | None:
        if kind in ("flow", "heartbeat"):  # consecutive frames only
            last = self.groups[-1] if self.groups else None
            return last if last is not None and last.kind == kind and last.key == key else None
        if kind == "disposition":
            return None
        group = self.latest.get((kind, key))
        return group if group is not None and not group.closed else None


def exchanges(frames: list[tuple[str, Frame]]) -> list[Exchange]:
    """The exchanges of a merged, time-ordered frame log of ``(party, frame)``, in order of their first frame.

    Every frame lands in exactly one exchange; frames of one exchange keep their order.
    """
    grouper = _Grouper()
    for party, frame in frames:
        grouper.add(party, frame)
    return grouper.groups


def frame_line(frame: Frame, origin_ns: int) -> str:
    """One frame as a step title: ``+1.234ms → [0] transfer {handle=0 ...}``."""
    shown = {k: v for k, v in frame.fields.items() if v is not None}
    extra = f" +{frame.payload_len}B payload" if frame.payload else ""
    text = f"{frame.performative} {render(shown)}{extra}" if shown else f"{frame.performative}{extra}"
    return f"+{(frame.t_ns - origin_ns) / 1e6:.3f}ms {ARROW.get(frame.direction, '?')} [{frame.channel}] {text}"


def step_results(groups: list[Exchange], wall_offset_ns: int | None = None, origin_ns: int | None = None) \
        -> list[Any]:
    """Allure ``TestStepResult`` objects: one step per exchange, one child step per frame, timed by the frames.

    ``wall_offset_ns`` converts the frames' monotonic times to wall-clock time (default: measured now);
    frame titles count from ``origin_ns`` (default: the first exchange's first frame).
    """
    from allure_commons.model2 import Status, TestStepResult

    offset = time.time_ns() - time.monotonic_ns() if wall_offset_ns is None else wall_offset_ns
    origin = origin_ns if origin_ns is not None else groups[0].start_ns if groups else 0

    def ms(t_ns: int) -> int:
        return (t_ns + offset) // 1_000_000

    steps = []
    for group in groups:
        children = [TestStepResult(name=frame_line(f, origin), status=Status.PASSED, stage="finished",
                                   start=ms(f.t_ns), stop=ms(f.t_ns)) for f in group.frames]
        steps.append(TestStepResult(name=group.title, status=Status.PASSED, stage="finished",
                                    start=ms(group.start_ns), stop=ms(group.stop_ns), steps=children))
    return steps
