"""The core AMQP 1.0 catalogue (issue 4): settlement orderings, outcomes, transfers, bad input."""

TABLES = ("core.settlement", "core.settlement.consume", "core.outcomes", "core.outcomes.publish",
          "core.transfer", "core.flow", "core.consumers", "core.errors")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
