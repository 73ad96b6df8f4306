"""Wire exactness: the seed-002 disposition bytes (002_6b3472e7d3b5cb32.txt)."""

import pytest
from amqp_conformance.conformance.scripts_wire import forget_exchanges

TABLES = ("wire.disposition", "wire.performatives")


@pytest.fixture(autouse=True, scope="module")
def _one_exchange_per_session():
    """Each pytest session runs its own wire exchange (``run --repeat`` runs its sessions in one process)."""
    forget_exchanges()
    yield


def test_case(amqp_case, amqp_runner):
    """Run the row against the broker under test; the verdict decides pass, fail, error, xfail or skip."""
    amqp_runner(amqp_case).check()
