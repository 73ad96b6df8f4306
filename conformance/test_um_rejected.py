"""UM 10.11 "Rejected" mappings (000_ce67ac77056e886e.txt): subscription and publishing tables."""

TABLES = ("um.rejected.subscribe", "um.rejected.publish")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
