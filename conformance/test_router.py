"""Router guarantees (001_c5e7220407a77440.txt, "Message settlement and reliability"): anycast and multicast."""

TABLES = ("router.anycast", "router.multicast")


def test_case(amqp_outcome):
    """Report the row's verdict (the case ran during set-up, where an ERROR is a set-up error): pass, fail,
    xfail or skip."""
    amqp_outcome.check()
