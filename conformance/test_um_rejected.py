"""UM 10.11 "Rejected" mappings (000_ce67ac77056e886e.txt): subscription and publishing tables."""

TABLES = ("um.rejected.subscribe", "um.rejected.publish")


def test_case(amqp_outcome):
    """Report the row's verdict (the case ran during set-up, where an ERROR is a set-up error): pass, fail,
    xfail or skip."""
    amqp_outcome.check()
