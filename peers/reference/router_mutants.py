"""Mutants of the reference router: each breaks exactly one guarantee of 001's final-disposition table.

Registered into :data:`mutants.MUTANTS` (so ``--reference-mutant NAME`` selects them; their base broker is
``reference-router``). ``fixtures/tests/test_router_mutants.py`` asserts which router cases FAIL for each.
"""

from __future__ import annotations

from typing import Any

from proton import Delivery, Endpoint, Link

from .mutant_kit import Mutant
from .router import RELEASED, Inbound, Outcome, RoutedConsumer, Router


class AcceptsDespiteReject(Router):
    """Aggregates with accepted above rejected: one accepting consumer hides another's rejection."""

    def aggregate(self, outcomes: list[Outcome]) -> Outcome:
        """Accepted wins over rejected (001 multicast says rejected wins)."""
        for state in (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.MODIFIED):
            for outcome in outcomes:
                if outcome.state == state:
                    return outcome
        return RELEASED


class SettlesBeforeAll(Router):
    """Answers the producer with the first consumer's outcome, without waiting for the others."""

    def waits_for_all(self) -> bool:
        """Never waits (001 multicast: the router waits for each consumer's final state)."""
        return False


class SettlesOnForward(Router):
    """Accepts and settles the producer's delivery as soon as the message is forwarded."""

    def settles_on_forward(self) -> bool:
        """Always (001 unsettled: the producer's state comes from the consumers')."""
        return True


class ReleasedAsAccepted(Router):
    """Tells the producer accepted when the consumers released the message."""

    def propagated(self, outcome: Outcome) -> Outcome:
        """Released becomes accepted (001: released means the message reached no consumer)."""
        return Outcome(Delivery.ACCEPTED) if outcome.state == Delivery.RELEASED else outcome


class ModifiedAsReleased(Router):
    """Loses modified in the aggregation: a modified consumer counts as released."""

    def aggregate(self, outcomes: list[Outcome]) -> Outcome:
        """Modified is ignored (001: modified when one may have been reached and none accepted or rejected)."""
        for state in (Delivery.REJECTED, Delivery.ACCEPTED):
            for outcome in outcomes:
                if outcome.state == state:
                    return outcome
        return RELEASED


class FirstOutcomeWins(Router):
    """Aggregates a multicast delivery's outcomes as rejected if any consumer rejected, else the first consumer's
    outcome that is not released: modified before accepted hides the acceptance."""

    def aggregate(self, outcomes: list[Outcome]) -> Outcome:
        """Rejected wins; else the first non-released outcome (001 multicast: accepted if at least one consumer
        accepted and none rejected, whatever the order)."""
        for outcome in outcomes:
            if outcome.state == Delivery.REJECTED:
                return outcome
        return next((outcome for outcome in outcomes if outcome.state != Delivery.RELEASED), RELEASED)


class DropsRejectCondition(Router):
    """Propagates a rejection without the consumer's error condition."""

    def propagated(self, outcome: Outcome) -> Outcome:
        """Rejected, with no error (001 anycast: the consumer's delivery state is propagated)."""
        return Outcome(Delivery.REJECTED) if outcome.state == Delivery.REJECTED else outcome


class ForwardsPresettledUnsettled(Router):
    """Forwards a pre-settled message to consumers as an unsettled delivery."""

    def forwards_presettled_settled(self) -> bool:
        """Never (001 pre-settled: the router settles the outgoing deliveries too)."""
        return False


class AnycastToAll(Router):
    """Sends an anycast message to every consumer of the address."""

    def anycast_target(self, address: str, consumers: list[RoutedConsumer]) -> list[RoutedConsumer]:
        """All of them (001 anycast: one outgoing delivery)."""
        return list(consumers)


class ForgetsDepartedConsumer(Router):
    """Never gives the producer a final state when a consumer leaves holding the delivery."""

    def gone_outcome(self, sent: bool) -> Outcome | None:
        """No outcome for a departed consumer: the producer's delivery stays unsettled forever."""
        return None


class CumulativeOutcome(Router):
    """Gives a producer's delivery its final outcome and every earlier unsettled delivery on that link the same
    one, as a cumulative acknowledgement would (one disposition may then cover them as a range)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: dict[Link, list[Delivery]] = {}  # per producer link: its unsettled deliveries, in order

    def route(self, delivery: Delivery, address: str, encoded: bytes) -> None:
        """Route as the reference does, remembering an unsettled delivery in its link's order."""
        if not delivery.settled:
            self._open.setdefault(delivery.link, []).append(delivery)
        super().route(delivery, address, encoded)

    def _complete(self, inbound: Inbound, outcome: Outcome) -> None:
        """Settle the delivery and every earlier one still open on its link with ``outcome``."""
        open_here = self._open.get(inbound.delivery.link, [])
        if inbound.delivery not in open_here:  # settled already, by a later delivery's outcome
            inbound.done = True
            return
        position = open_here.index(inbound.delivery)
        earlier, open_here[:position + 1] = open_here[:position], []
        for delivery in earlier:
            if delivery.link.state & Endpoint.LOCAL_ACTIVE:
                outcome.apply(delivery)
        super()._complete(inbound, outcome)


ROUTER_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("router-accepts-despite-reject", "reports accepted when one consumer accepted and another rejected",
           "001 final dispositions, rejected / multicast (at least one consumer rejected)", AcceptsDespiteReject),
    Mutant("router-settles-before-all", "settles the producer with the first consumer's outcome",
           "001 Unsettled, multicast (waits for every consumer's final state)", SettlesBeforeAll),
    Mutant("router-settles-on-forward", "accepts and settles the producer as soon as it forwards the message",
           "001 Unsettled (the producer's state is propagated from the consumer's)", SettlesOnForward),
    Mutant("router-released-as-accepted", "forwards a released outcome to the producer as accepted",
           "001 final dispositions, released (did not reach its destination / any consumer)", ReleasedAsAccepted),
    Mutant("router-modified-as-released", "aggregates modified as released",
           "001 final dispositions, modified (anycast and multicast)", ModifiedAsReleased),
    Mutant("router-first-outcome-wins", "aggregates as rejected if any rejected, else the first outcome not released",
           "001 final dispositions, accepted / multicast (at least one accepted, none rejected)", FirstOutcomeWins),
    Mutant("router-drops-reject-condition", "propagates rejected without the consumer's error condition",
           "001 Unsettled, anycast (delivery state propagated from the consumer)", DropsRejectCondition),
    Mutant("router-forwards-presettled-unsettled", "forwards pre-settled messages unsettled",
           "001 Pre-settled (the outgoing deliveries are settled too)", ForwardsPresettledUnsettled),
    Mutant("router-anycast-to-all", "delivers an anycast message to every consumer",
           "001 Unsettled, anycast (one resulting outgoing delivery)", AnycastToAll),
    Mutant("router-cumulative-outcome",
           "gives every earlier unsettled delivery of the producer's link the outcome it forwards",
           "001 Unsettled, anycast (each incoming delivery tied to its own outgoing delivery)", CumulativeOutcome),
    Mutant("router-forgets-departed-consumer", "never answers the producer when a consumer leaves holding it",
           "001 final dispositions, released / modified (the producer gets a final state)", ForgetsDepartedConsumer),
)}
