"""The client grid's cells for python-proton with itself, one test a row and broker, as mutmut runs them
(scripts/client_mutation.py copies this file into its work directory as ``test_client_cells.py``).

Each test runs the row's cells (``amqp-conformance interop --clients python-proton --pairs same``) against the
embedded reference broker, or its router mode for the router rows, with both clients' shims running on the
mutated copy of python-qpid-proton (``client_mutation_launch.py``), and fails when a cell FAILs or ERRORs: a
row caught the mutant. A cell the client's profile makes UNSUPPORTED, or a NON-STRICT its profile declares,
passes, as in the grid.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from amqp_conformance.conformance.catalogue import Case, load_interop_catalogue
from amqp_conformance.fixtures.brokers import EmbeddedReferenceLauncher, RunningBroker
from amqp_conformance.fixtures.interop import CLIENT_PROFILES_DIR, Client, grid, run_grid
from amqp_conformance.fixtures.profiles import load_profile
from amqp_conformance.peers.shimrun import SHIMS_ROOT, ensure_built, load_spec

CLIENT = "python-proton"
BROKERS = {"reference": False, "reference-router": True}  # broker name -> router mode
CAUGHT = ("FAIL", "ERROR")
STEP_TIMEOUT_S = 3.0  # what a shim may take per step: a hung mutant costs this, a right client some 0.1 s
HERE = Path(__file__).resolve().parent  # mutmut's mutants/ folder, which holds the mutated copy and the launcher


def client_on_mutants() -> Client:
    """python-proton's shim and profile, its shim started through the launcher on the mutated library."""
    spec = load_spec(SHIMS_ROOT / CLIENT)
    run = ("{python}", str(HERE / "client_mutation_launch.py"), str(HERE), "{home}")
    return Client(CLIENT, dataclasses.replace(spec, run=run), load_profile(CLIENT, CLIENT_PROFILES_DIR))


def cells() -> list[tuple[str, Case]]:
    """(broker, row) for every row that has a cell against that broker's profile, python-proton with itself."""
    client = {CLIENT: client_on_mutants()}
    found = []
    for broker in BROKERS:
        sets = load_profile(broker).expectation_sets
        rows = {case.id: case for case, *_ in grid(load_interop_catalogue().cases, client, "same", sets)}
        found += [(broker, case) for case in rows.values()]
    return found


@pytest.fixture(scope="session")
def brokers():
    """The embedded brokers, each started when a test first asks for it."""
    started: dict[str, RunningBroker] = {}

    def get(name: str) -> RunningBroker:
        if name not in started:
            started[name] = EmbeddedReferenceLauncher(router=BROKERS[name]).start(name, load_profile(name))
        return started[name]

    yield get
    for broker in started.values():
        broker.stop()


@pytest.mark.parametrize(("broker", "case"), [pytest.param(b, c, id=f"{c.id}@{b}") for b, c in cells()])
def test_cell(broker: str, case: Case, brokers, tmp_path: Path) -> None:
    """The row's cells against ``broker`` with python-proton on both sides: none FAILs or ERRORs."""
    client = client_on_mutants()
    home = ensure_built(client.spec, Path(os.environ["AMQP_CLIENT_MUTATION_SHIMS"]), progress=lambda _: None)
    records: list[dict] = []
    run_grid(brokers(broker), {CLIENT: client}, {CLIENT: home}, [case], "same",
             lambda record, frames, row: records.append(record), tmp_path, STEP_TIMEOUT_S, lambda _: None)
    assert records, f"no cell of {case.id} ran against {broker}"
    caught = [f"{r['case_id']}: {r['verdict']}: {r['reason']}" for r in records if r["verdict"] in CAUGHT]
    assert not caught, "\n".join(caught)
