"""The core AMQP 1.0 catalogue (issue 4): settlement orderings, outcomes, transfers, bad input."""

TABLES = ("core.settlement", "core.settlement.consume", "core.outcomes", "core.outcomes.publish",
          "core.transfer", "core.flow", "core.consumers", "core.errors", "core.sasl")


def test_case(amqp_outcome):
    """Report the row's verdict (the case ran during set-up, where an ERROR is a set-up error): pass, fail,
    xfail or skip."""
    amqp_outcome.check()
