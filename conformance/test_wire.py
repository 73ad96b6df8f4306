"""Wire exactness: the seed-002 disposition bytes (002_6b3472e7d3b5cb32.txt)."""

TABLES = ("wire.disposition", "wire.performatives")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
