"""Wire exactness: the seed-002 disposition bytes (002_6b3472e7d3b5cb32.txt)."""

import pytest
from amqp_conformance.conformance.scripts_wire import forget_exchanges

TABLES = ("wire.disposition", "wire.performatives")


@pytest.fixture(autouse=True, scope="module")
def _one_exchange_per_session():
    """Each pytest session runs its own wire exchange (``run --repeat`` runs its sessions in one process)."""
    forget_exchanges()
    yield


def test_case(amqp_outcome):
    """Report the row's verdict (the case ran during set-up, where an ERROR is a set-up error): pass, fail,
    xfail or skip."""
    amqp_outcome.check()
