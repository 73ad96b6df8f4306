"""A pytest plugin the mutation scripts load in the tool's test process (``-p mutation_kills``): it records which
test failed against which mutant, one JSON object a line in ``AMQP_MUTATION_KILLS`` (``mutant``, ``case``: the
test's node id, ``against``: ``AMQP_MUTATION_AGAINST``, the broker of the pass), which ``scripts/mutation.py``'s
``read_kills`` reads back (the first line of a mutant is the case that killed it). The mutant is mutmut's
(``MUTANT_UNDER_TEST``) or, under Stryker's command runner, Stryker's id (``__STRYKER_ACTIVE_MUTANT__``)."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    """Append the failing test and the mutant it failed against, when a mutant is under test."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        mutant = os.environ.get("__STRYKER_ACTIVE_MUTANT__", "")
    path = os.environ.get("AMQP_MUTATION_KILLS")
    if report.failed and path and mutant:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"mutant": mutant, "case": report.nodeid,
                                  "against": os.environ.get("AMQP_MUTATION_AGAINST", "")}) + "\n")
