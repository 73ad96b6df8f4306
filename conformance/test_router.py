"""Router guarantees (001_c5e7220407a77440.txt, "Message settlement and reliability"): anycast and multicast."""

TABLES = ("router.anycast", "router.multicast")


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
