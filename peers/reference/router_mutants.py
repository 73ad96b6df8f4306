"""Mutants of the reference router: each breaks exactly one guarantee of 001's final-disposition table.

Registered into :data:`mutants.MUTANTS` (so ``--reference-mutant NAME`` selects them; their base broker is
``reference-router``). ``fixtures/tests/test_router_mutants.py`` asserts which router cases FAIL for each.
"""

from __future__ import annotations

from proton import Delivery

from .mutants import Mutant
from .router import RELEASED, Outcome, RoutedConsumer, Router


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
    Mutant("router-forgets-departed-consumer", "never answers the producer when a consumer leaves holding it",
           "001 final dispositions, released / modified (the producer gets a final state)", ForgetsDepartedConsumer),
)}
