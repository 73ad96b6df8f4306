"""UM 10.11 transactional rows of the "Accepted" mappings (000_ce67ac77056e886e.txt): publishing row 6,
subscription row 8; and the discharge rules of AMQP 1.0 part 4 (4.3, 4.5) the transactional rows rely on."""

TABLES = ("um.transactions.publish", "um.transactions.subscribe", "um.transactions.discharge")


def test_case(amqp_outcome):
    """Report the row's verdict (the case ran during set-up, where an ERROR is a set-up error): pass, fail,
    xfail or skip."""
    amqp_outcome.check()
