"""UM 10.11 transactional rows of the "Accepted" mappings (000_ce67ac77056e886e.txt): publishing row 6,
subscription row 8; and the discharge rules of AMQP 1.0 part 4 (4.3, 4.5) the transactional rows rely on."""

TABLES = ("um.transactions.publish", "um.transactions.subscribe", "um.transactions.discharge")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
