"""The client grid's cells for one client with itself, one test a row and broker, as a mutation tool runs them:
mutmut for python-proton (scripts/client_mutation.py copies this file into its work directory as
``test_client_cells.py``), Stryker for rhea (scripts/client_mutation_rhea.py, the same way), the client named by
``AMQP_CLIENT_MUTATION_CLIENT`` (default python-proton).

Each test runs the row's cells (``amqp-conformance interop --clients CLIENT --pairs same``) against the
embedded reference broker, or its router mode for the router rows, and against the conformant variants
(``--reference-mutant``: :data:`BROKERS`), with both clients' shims running on the mutated copy of the library
(:data:`LAUNCHERS`), and fails when a cell FAILs or ERRORs: a row caught the mutant. A cell the client's profile
makes UNSUPPORTED, or a NON-STRICT its profile declares, passes, as in the grid. A cell that FAILs or ERRORs is run
again (:data:`CONFIRMING_RUNS`): it catches the mutant only when a run again FAILs or ERRORs, so a one-off failure
under the run's load is no kill. As in the grid, the shim processes serve cell after cell (one relay and one shim a
role for each broker, for all the tests mutmut runs against one mutant), except while mutmut learns which test
reaches which function: then each test starts its own, so that what a shim reaches is the test's.

The reference broker's mutation test (scripts/mutation.py, its client-grid pass) runs the same cells the other way
round: the library as built (``AMQP_CLIENT_MUTATION_LIBRARY=installed``), the broker mutated in the test process,
only the rows whose admin provocation no catalogue row asks for (``AMQP_CLIENT_MUTATION_PROVOCATIONS``, comma
separated) and only some of :data:`BROKERS` (``AMQP_CLIENT_MUTATION_BROKERS``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from amqp_conformance.conformance.catalogue import Case, load_interop_catalogue
from amqp_conformance.fixtures.brokers import EmbeddedReferenceLauncher, RunningBroker, base_broker
from amqp_conformance.fixtures.brokers import variant as variant_of
from amqp_conformance.fixtures.interop import CLIENT_PROFILES_DIR, Client, ShimPool, grid, run_cell
from amqp_conformance.fixtures.profiles import load_profile
from amqp_conformance.fixtures.verdict import Judgement
from amqp_conformance.peers.relay import FrameRelay
from amqp_conformance.peers.shimrun import SHIMS_ROOT, ensure_built, load_spec

CLIENT = os.environ.get("AMQP_CLIENT_MUTATION_CLIENT", "python-proton")
# broker name -> the reference's conformant variant it runs, or None: the reference, its router mode, and six
# variants that make the choices the sources leave open otherwise (peers/reference/conformant_variants.py; a client
# passes them but for its declared deviations): every choice at once (handles from 3, channels from 2, one credit at
# a time, each publisher asked to drain its first credit, a consumer's flow stated before each of its flows is read
# and its drains answered late, 512-byte frames, counts from 4294967294, one account, every message in three
# transfers, an empty frame before each frame), a small session incoming-window, the crossed drains counted from 0
# (every-choice's counts near the wrap hide them from a client that counts its own receiving link's deliveries from
# 0, rhea), every message in three transfers with the reference's own credit and counts (every-choice gives one
# credit at a time: the split variant alone killed rhea's link.js:311, a send buffer that never fills), an open
# that states no max-frame-size (a client that splits by a limit the broker never gave loses its message: rhea's
# session.js:164 `true`), and one that states capabilities in its open and properties, capabilities and a
# max-message-size in its attaches (what a client's API tells of them is held to the frames: rhea's dropped
# accessors, link.js:201-204, connection.js:158). A variant's
# profile and router mode are those of the broker it replaces (fixtures.brokers.base_broker)
BROKERS: dict[str, str | None] = {
    "reference": None,
    "reference-router": None,
    "reference~variant-every-choice": "variant-every-choice",
    "reference~variant-small-session-window": "variant-small-session-window",
    "reference~variant-crosses-drains": "variant-crosses-drains",
    "reference~variant-splits-transfers": "variant-splits-transfers",
    "reference~variant-no-frame-limit": "variant-no-frame-limit",
    "reference~variant-states-endpoint-fields": "variant-states-endpoint-fields",
}
if os.environ.get("AMQP_CLIENT_MUTATION_BROKERS"):
    BROKERS = {name: BROKERS[name] for name in os.environ["AMQP_CLIENT_MUTATION_BROKERS"].split(",")}
# the library as built (the broker is what is mutated), else its mutated copy (:data:`LAUNCHERS`)
INSTALLED = os.environ.get("AMQP_CLIENT_MUTATION_LIBRARY") == "installed"
PROVOCATIONS = tuple(filter(None, os.environ.get("AMQP_CLIENT_MUTATION_PROVOCATIONS", "").split(",")))


def profile_of(broker: str) -> str:
    """The registered broker whose profile judges ``broker`` of :data:`BROKERS` (its own name, or the one its
    variant replaces)."""
    variant = BROKERS[broker]
    return broker if variant is None else base_broker(variant_of(variant))
CAUGHT = ("FAIL", "ERROR")
# how many more runs a cell that FAILed or ERRORed gets to do so again before it counts as catching the mutant: a
# cell of an old row failed once, then passed 3 runs of 3, under the load of two Stryker runners on two cores, and
# "killed" 4 mutants it cannot tell apart (rhea connection.js, 5 Dec 2026, docs/selftest.md). A mutant that fails a
# cell one run in two is still caught three times in four.
CONFIRMING_RUNS = 2
STEP_TIMEOUT_S = 3.0  # what a shim may take per step: a hung mutant costs this, a right client some 0.1 s
HERE = Path(__file__).resolve().parent  # the tool's copy of the work directory: the mutated library, the launcher
# how each client's shim starts on the mutated copy beside this file instead of the library it was built with
LAUNCHERS = {
    "python-proton": ("{python}", str(HERE / "client_mutation_launch.py"), str(HERE), "{home}"),
    "rhea": ("node", "--require", str(HERE / "client_mutation_resolve.js"), "shim.js"),
}


def client_on_mutants() -> Client:
    """The client's shim and profile, its shim started through its launcher on the mutated library (as built, with
    :data:`INSTALLED`)."""
    spec = load_spec(SHIMS_ROOT / CLIENT)
    run = spec.run if INSTALLED else LAUNCHERS[CLIENT]
    return Client(CLIENT, dataclasses.replace(spec, run=run), load_profile(CLIENT, CLIENT_PROFILES_DIR))


def cells() -> list[tuple[str, Case]]:
    """(broker, row) for every row that has a cell against that broker's profile, the client with itself."""
    client = {CLIENT: client_on_mutants()}
    found = []
    for broker in BROKERS:
        sets = load_profile(profile_of(broker)).expectation_sets
        rows = {case.id: case for case, *_ in grid(load_interop_catalogue().cases, client, "same", sets)
                if not PROVOCATIONS or case.given.get("provocation") in PROVOCATIONS}
        found += [(broker, case) for case in rows.values()]
    return found


@dataclasses.dataclass
class Grid:
    """One broker with the relay in front of it and the shims that serve its cells."""

    broker: RunningBroker
    relay: FrameRelay
    pool: ShimPool
    client: Client  # the client on the mutated library (:func:`client_on_mutants`)


@pytest.fixture(scope="session")
def grids(tmp_path_factory) -> Iterator:
    """Each broker's :class:`Grid`, started when a test first asks for it; ``fresh=True`` gives the broker
    and relay with shims of its own, stopped when the test's stack closes."""
    client = client_on_mutants()
    homes = {CLIENT: ensure_built(client.spec, Path(os.environ["AMQP_CLIENT_MUTATION_SHIMS"]),
                                  progress=lambda _: None)}
    evidence = tmp_path_factory.mktemp("evidence")
    clients = {CLIENT: client}
    with ExitStack() as session:
        started: dict[str, Grid] = {}

        def get(name: str, test: ExitStack, fresh: bool = False) -> Grid:
            if name not in started:
                profile = profile_of(name)
                broker = EmbeddedReferenceLauncher(BROKERS[name], router=profile == "reference-router").start(
                    profile, load_profile(profile))
                session.callback(broker.stop)
                relay = session.enter_context(FrameRelay(broker.address.host, broker.address.port,
                                                         label=f"interop-{name}"))
                started[name] = Grid(broker, relay, ShimPool(clients, homes, evidence), client)
                session.callback(started[name].pool.close)
            if not fresh:
                return started[name]
            pool = ShimPool(clients, homes, evidence)
            test.callback(pool.close)
            return dataclasses.replace(started[name], pool=pool)

        yield get


def confirmed(first: Judgement, again: Callable[[], Judgement], runs: int = CONFIRMING_RUNS) -> str | None:
    """Whether a cell whose run gave ``first`` catches the mutant: None when ``first`` neither FAILed nor ERRORed,
    or when it did and each of up to ``runs`` more runs of the cell (``again``) did not (a one-off, told on standard
    error); else the line that says so, with the run that failed again."""
    if first.verdict not in CAUGHT:
        return None
    for run in range(1, runs + 1):
        repeat = again()
        if repeat.verdict in CAUGHT:
            return f"{first.verdict}: {first.reason} (and again on re-run {run} of {runs}: {repeat.verdict})"
    print(f"not counted: a {first.verdict} that {runs} re-runs did not repeat: {first.reason}", file=sys.stderr)
    return None


@pytest.mark.parametrize(("broker", "case"), [pytest.param(b, c, id=f"{c.id}@{b}") for b, c in cells()])
def test_cell(broker: str, case: Case, grids) -> None:
    """The row's cells against ``broker`` with the client on both sides: none FAILs or ERRORs."""
    caught, ran = [], 0
    with ExitStack() as test:
        on = grids(broker, test, fresh=os.environ.get("MUTANT_UNDER_TEST") == "stats")
        for row, expectation_set, _, _ in grid([case], {CLIENT: on.client}, "same",
                                               on.broker.profile.expectation_sets):
            on.broker.admin.adopt(expectation_set)

            def judged(row: Case = row, expectation_set: str = expectation_set) -> Judgement:
                return run_cell(row, expectation_set, on.client, on.client, on.broker, on.relay, on.pool,
                                STEP_TIMEOUT_S)[0]

            line = confirmed(judged(), judged)
            ran += 1
            if line is not None:
                caught.append(f"{row.id} [{expectation_set}]: {line}")
    assert ran, f"no cell of {case.id} ran against {broker}"
    assert not caught, "\n".join(caught)
