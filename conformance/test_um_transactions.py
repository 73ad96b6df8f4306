"""UM 10.11 transactional rows of the "Accepted" mappings (000_ce67ac77056e886e.txt): publishing row 6,
subscription row 8."""

TABLES = ("um.transactions.publish", "um.transactions.subscribe")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
