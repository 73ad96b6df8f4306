"""A pytest plugin both mutation scripts load in mutmut's test process (``-p mutation_kills``): it records which
test failed against which mutant, one JSON object a line in ``AMQP_MUTATION_KILLS`` (``mutant``, ``case``: the
test's node id, ``against``: ``AMQP_MUTATION_AGAINST``, the broker of the pass), which ``scripts/mutation.py``'s
``read_kills`` reads back (the first line of a mutant is the case that killed it)."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    """Append the failing test and the mutant it failed against, when a mutant is under test."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    path = os.environ.get("AMQP_MUTATION_KILLS")
    if report.failed and path and "__mutmut_" in mutant:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"mutant": mutant, "case": report.nodeid,
                                  "against": os.environ.get("AMQP_MUTATION_AGAINST", "")}) + "\n")
