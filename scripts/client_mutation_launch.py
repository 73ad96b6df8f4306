"""Runs the python-proton shim on mutmut's trampolined copy of python-qpid-proton (scripts/client_mutation.py).

``python client_mutation_launch.py MUTANTS_DIR SHIM_HOME``: the shim process imports ``clientlib.proton`` (the
copy mutmut mutated, under ``MUTANTS_DIR``) and serves it as ``proton``, so the shim's own ``import proton``
gets the mutated library while the harness, in another process, keeps the real one. ``MUTANT_UNDER_TEST``
(inherited from mutmut's forked test process) picks the mutant. While mutmut collects which test reaches which
function (``MUTANT_UNDER_TEST=stats``), each function this process reaches is appended, once, to the file named
by ``AMQP_CLIENT_MUTATION_HITS``, for the pytest process to credit to the running test
(``client_mutation_hooks.py``): mutmut records hits only in its own process.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from pathlib import Path

COPY = "clientlib.proton"  # the package mutmut mutated, as the workdir lays it out


def record_hits_to(path: str) -> None:
    """Make the trampolines append each function they reach (its mutmut name) to ``path``, once a process."""
    import mutmut.mutation.trampoline as trampoline

    seen: set[str] = set()

    def record(name: str, caller: str | None = None) -> None:
        if name not in seen:
            seen.add(name)
            with open(path, "a", encoding="utf-8") as out:
                out.write(name + "\n")

    trampoline.record_trampoline_hit = record


def serve_copy_as_proton(mutants: Path) -> None:
    """Import every module of the mutated copy and enter each in ``sys.modules`` under its ``proton`` name too,
    so that no ``import proton…`` loads a second, unmutated copy. A module whose optional dependencies are
    absent (``tracing``: opentracing) is left out, as it would fail to import from the real package too."""
    sys.path.insert(0, str(mutants))
    package = importlib.import_module(COPY)
    for source in sorted(Path(package.__path__[0]).glob("*.py")):
        if source.stem != "__init__":
            try:
                importlib.import_module(f"{COPY}.{source.stem}")
            except ImportError:
                continue
    for name, module in list(sys.modules.items()):
        if name == COPY or name.startswith(COPY + "."):
            sys.modules["proton" + name[len(COPY):]] = module


def main() -> None:
    """Serve the copy as ``proton`` and run the shim's ``shim.py`` from ``SHIM_HOME`` as ``__main__``."""
    mutants, home = Path(sys.argv[1]), Path(sys.argv[2])
    hits = os.environ.get("AMQP_CLIENT_MUTATION_HITS")
    if hits and os.environ.get("MUTANT_UNDER_TEST") == "stats":
        record_hits_to(hits)
    serve_copy_as_proton(mutants)
    sys.path.insert(0, str(home))
    sys.argv = [str(home / "shim.py")]
    runpy.run_path(str(home / "shim.py"), run_name="__main__")


if __name__ == "__main__":
    main()
