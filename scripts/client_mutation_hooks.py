"""A pytest plugin for scripts/client_mutation.py, loaded by mutmut's test process (``-p client_mutation_hooks``):
while mutmut collects which test reaches which function (``MUTANT_UNDER_TEST=stats``), the functions of the
mutated library that the shim processes of a test reached (appended to ``AMQP_CLIENT_MUTATION_HITS`` by
``client_mutation_launch.py``) are handed to mutmut before it credits the test with what it saw in its own
process, where the library never runs. (The kills are recorded by ``mutation_kills.py``, as for the catalogue.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before mutmut's own teardown hook credits the test: add the shims' hits to mutmut's record of it."""
    hits = os.environ.get("AMQP_CLIENT_MUTATION_HITS")
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not hits or not Path(hits).is_file():
        return
    from mutmut.state import state

    names = Path(hits).read_text(encoding="utf-8").split()
    state()._stats.update(names)
    Path(hits).write_text("", encoding="utf-8")
