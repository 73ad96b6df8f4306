"""Automated mutation testing of a client library: mutmut mutates python-qpid-proton's Python layer, the grid judges.

One command, from a fresh clone (after ``pip install -e '.[dev]'``, which brings mutmut)::

    python scripts/client_mutation.py [--module _delivery ...] [--max-children N] [--out DIR] [--workdir DIR]

(every module: more than an hour on 2 cores with the five brokers; ``--module _delivery`` alone a few minutes; a run
stopped part way goes on from where it stopped with ``--resume``)

The client grid (``amqp-conformance interop``, rows in ``conformance/interop_tables``) judges client libraries by
the same rows as brokers. ``fixtures/tests/test_interop_grid.py`` shows it catching two broken clients written
by hand; this measures its power the way ``scripts/mutation.py`` measures the catalogue's, on mutants nobody
chose. Every mutant of the modules of python-qpid-proton's Python layer that carry deliveries, their states and
settlement, and the messaging handler's automatic accepting and settling (:data:`MODULES`; by default those whose
survivors are triaged, :data:`DEFAULT_MODULES`), runs under the python-proton shim on both sides of the embedded
reference broker (and of its router mode, for the router rows, and of the conformant variants in
``client_mutation_cells.BROKERS``). A mutant is **killed** when a cell FAILs or ERRORs against it and does again
when run again (``client_mutation_cells.CONFIRMING_RUNS``), or its run times out or crashes; it **survives** when
every cell passes, and is **unreached** when no cell runs its function: the shim uses only part of the library (no
reconnection, SSL, blocking API), so those are counted apart and left out of the score.
The survivors are triaged as the catalogue's are (``docs/mutation-triage/clients/python-proton/<module>.toml``;
the categories of ``scripts/mutation.py``), and the report, the score and the exit status are its.

How: mutmut mutates a copy of the installed package laid out as ``clientlib/proton/`` in the work directory.
The shims import that copy as ``proton`` (``client_mutation_launch.py``) while the harness, the broker and the
interposer keep the real one, so a kill is the client's doing. mutmut learns which test reaches which function
only in its own process, where the library does not run; the launcher writes what the shim processes reach to
a file that ``client_mutation_hooks.py`` hands to mutmut before it credits each test. The tests are the grid's
cells, one a row and broker (``client_mutation_cells.py``). Only python-proton: mutmut mutates Python; the
other clients' libraries (Java, JavaScript, Go, C++) would need their own language's mutation tool.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from mutation import (
    KILLED_STATUSES,
    TRIAGE_DIR,
    MutantResult,
    TriageError,
    add_client_run_arguments,
    check_open_only,
    diff_of,
    load_triage,
    module_of,
    not_checked,
    open_or_untriaged,
    prune_triage,
    read_kills,
    read_statuses,
    report,
    run_mutmut,
)

CLIENT = "python-proton"
# python-qpid-proton's modules whose code decides what a client sends and reports about deliveries: the
# delivery and its states, the endpoints (links' settle modes, terminus, flow), the messaging handler's
# automatic accept, settle and credit. Not mutated: the codec (_data.py: its mutants break every frame and
# say nothing of the rows), the reactor's I/O and reconnection, SSL, the blocking API, tracing.
MODULES = ("_delivery", "_endpoints", "_handlers")
# a module is measured by default once its survivors are triaged (a default run must stay fully triaged, as
# scripts/mutation.py's); until then only when asked for (--module NAME)
UNTRIAGED_MODULES: tuple[str, ...] = ()
DEFAULT_MODULES = tuple(m for m in MODULES if m not in UNTRIAGED_MODULES)
COPY = Path("clientlib") / "proton"  # where the work directory holds the copy mutmut mutates
HELPERS = {"client_mutation_cells.py": "test_client_cells.py", "client_mutation_hooks.py": "client_mutation_hooks.py",
           "client_mutation_launch.py": "client_mutation_launch.py", "mutation_kills.py": "mutation_kills.py"}
TRIAGE = TRIAGE_DIR / "clients" / CLIENT
UNREACHED = "no tests"  # mutmut's status of a mutant no test reaches


def installed_proton() -> Path:
    """The folder of the python-qpid-proton package this interpreter imports (the one the project pins)."""
    import proton

    return Path(proton.__file__).resolve().parent


def build_workdir(workdir: Path, modules: list[str]) -> None:
    """Lay out ``workdir``: the installed proton copied to ``clientlib/proton/``, the cells, hooks and launcher,
    mutmut's configuration mutating ``modules`` of the copy, and python-proton's shim built into ``shims/``."""
    if workdir.exists():
        shutil.rmtree(workdir)
    shutil.copytree(installed_proton(), workdir / COPY, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for source, target in HELPERS.items():
        shutil.copy2(Path(__file__).resolve().parent / source, workdir / target)
    config = {
        "source_paths": [str(COPY / f"{module}.py") for module in modules],
        "also_copy": ["clientlib", *HELPERS.values()],
        "pytest_add_cli_args_test_selection": ["test_client_cells.py"],
        "pytest_add_cli_args": ["-p", "client_mutation_hooks", "-p", "mutation_kills", "-p", "no:cacheprovider",
                                "--import-mode=importlib"],
    }
    lines = ["[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    (workdir / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    build_shim(workdir)


def build_shim(workdir: Path) -> None:
    """Build python-proton's shim into ``workdir/shims`` (again when its sources changed), before mutmut's
    processes, which run it side by side, would."""
    from amqp_conformance.peers.shimrun import SHIMS_ROOT, ensure_built, load_spec

    ensure_built(load_spec(SHIMS_ROOT / CLIENT), workdir / "shims", progress=print)


def main(argv: list[str] | None = None) -> int:
    """Run the mutation test of the client and print its figures; exit 1 when a survivor is untriaged or the
    score is below the target, 2 for a malformed triage file, a ``--report-only``, ``--survivors`` or ``--resume``
    with no run kept, or a run that left mutants unchecked (``--resume`` goes on with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=MODULES,
                        help="mutate only this module of python-qpid-proton (repeatable; default: "
                             f"{', '.join(DEFAULT_MODULES)}"
                             + (f"; {', '.join(UNTRIAGED_MODULES)} when asked for, their survivors not triaged yet)"
                                if UNTRIAGED_MODULES else ")"))
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once")
    again = add_client_run_arguments(parser, CLIENT, "mutmut", "the mutants the last run kept in --workdir left "
                                     "alive (survivors and unreached)")
    again.add_argument("--resume", action="store_true",
                       help="go on with a run that was stopped: run only the mutants the last run kept in --workdir "
                            "left unchecked, against the grid as it is now; the statuses it reached stand")
    args = parser.parse_args(argv)
    check_open_only(parser, args)
    try:
        triage = load_triage(TRIAGE)
    except TriageError as exc:
        print(f"client mutation: {exc}", file=sys.stderr)
        return 2
    modules = args.module or list(DEFAULT_MODULES)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    kills = (args.workdir / "kills.jsonl").resolve()  # the kept run's: --survivors, --report-only read it, any --out
    env = {"AMQP_CLIENT_MUTATION_HITS": str(args.workdir / "hits.txt"),
           "AMQP_CLIENT_MUTATION_SHIMS": str(args.workdir / "shims")}
    if args.report_only or args.survivors or args.resume:
        if not (args.workdir / "mutants").is_dir():
            print(f"client mutation: no run kept in {args.workdir}; run without --report-only, --survivors or "
                  "--resume first", file=sys.stderr)
            return 2
    if args.survivors or args.resume:
        names = [name for name, status in read_statuses(args.workdir).items() if module_of(name) in modules
                 and (status == not_checked() if args.resume else status not in KILLED_STATUSES)
                 and (not args.open_only or (status != UNREACHED and open_or_untriaged(triage, name)))]
        which = "mutants the stopped run left unchecked" if args.resume else \
            "survivors triaged open or untriaged" if args.open_only else "survivors and unreached of the last run"
        print(f"== client mutation: {len(names)} {which}, against the grid as it is now", flush=True)
        if names:
            build_shim(args.workdir)
            run_mutmut(args.workdir, kills, names=names, max_children=args.max_children, env=env)
    elif not args.report_only:
        kills.unlink(missing_ok=True)
        print(f"== client mutation: mutmut over python-qpid-proton's {', '.join(modules)}; the grid's cells, "
              f"{CLIENT} with itself, against the brokers of client_mutation_cells.BROKERS", flush=True)
        build_workdir(args.workdir, modules)
        run_mutmut(args.workdir, kills, max_children=args.max_children, env=env)
    statuses = {name: status for name, status in read_statuses(args.workdir).items() if module_of(name) in modules}
    unchecked = sum(status == not_checked() for status in statuses.values())
    if unchecked:
        print(f"client mutation: mutmut left {unchecked} of {len(statuses)} mutants unchecked (it stopped: see its "
              f"output above; a cell that fails without any mutant stops it while it collects which cell reaches "
              f"which function); go on from there with --resume", file=sys.stderr)
        return 2
    first_kill = read_kills(kills)
    results = [MutantResult(name, module_of(name), status, first_kill.get(name), triage.get(name))
               for name, status in sorted(statuses.items())]
    unreached = [r for r in results if r.status == UNREACHED]
    reached = [r for r in results if r.status != UNREACHED]
    for result in reached:
        if not result.killed:
            result.diff = diff_of(args.workdir, result.name, str(COPY / f"{result.module}.py"))
    print(f"\nunreached (no cell runs the function; left out of the score): {len(unreached)} of {len(results)} "
          f"mutants: " + ", ".join(f"{m} {sum(r.module == m for r in unreached)}" for m in modules))
    status = report(reached, triage, time.monotonic() - started, args.out, args.target)
    if kills.is_file():
        shutil.copy2(kills, args.out / "kills.jsonl")  # beside the report it attributes
    if args.prune_stale:
        stale = json.loads((args.out / "mutation.json").read_text(encoding="utf-8"))["stale_triage"]
        print(f"pruned {prune_triage(TRIAGE, stale)} stale triage entries from {TRIAGE}")
    return status


if __name__ == "__main__":
    sys.exit(main())
