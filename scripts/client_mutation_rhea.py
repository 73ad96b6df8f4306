"""Automated mutation testing of a second client library: Stryker mutates rhea (a whole AMQP 1.0 stack in
JavaScript), the grid judges.

One command, from a fresh clone (Node 20+ and npm; Stryker comes from npm into the work directory)::

    python scripts/client_mutation_rhea.py [--file session.js ...] [--concurrency N] [--out DIR] [--workdir DIR]
    python scripts/client_mutation_rhea.py --survivors --open-only [--prune-stale] [--file ...]  # minutes

``--survivors`` runs again the survivors of the run kept in ``--workdir``; with ``--open-only`` and no run kept, it
lays the work directory out afresh and mutates only the places of the mutants triaged ``open`` (those a new row or
check was written for), printing each as killed or surviving (:func:`run_open_entries`; no score).

``scripts/client_mutation.py`` measures the grid's power on python-qpid-proton's Python layer, over a protocol
engine written in C that mutmut cannot reach. rhea is another implementation altogether: its own frame codec,
connection, session and link state machines, all JavaScript. Every mutant Stryker makes of the files given
(:data:`DEFAULT_FILES`: the session, which carries transfers, dispositions and flow, and the link, which carries
credit and settlement), on the lines the grid's cells run at all, runs under the rhea shim on both sides of the
embedded reference broker (and of its router mode for the router rows, and of the conformant variants in
``client_mutation_cells.BROKERS``). A mutant is **killed** when a cell FAILs or ERRORs against it and does again
when run again (``client_mutation_cells.CONFIRMING_RUNS``), or its run times out or crashes, and **survives** when
every cell passes. Lines no cell runs are not mutated (found with V8's coverage of one run of the cells on the
unmutated copy) and are counted apart, as ``client_mutation.py`` counts mutmut's unreached mutants. The survivors
are triaged as the others are (``docs/mutation-triage/clients/rhea/<file stem>.toml``), with the same report, score
and exit status.

How: the work directory holds a copy of the pinned rhea (``rhea/``), beside the grid's cells
(``client_mutation_cells.py``) and a preload (``client_mutation_resolve.js``) that serves ``require('rhea')`` from
that copy to the rhea shim. Stryker copies the directory into a sandbox, builds every mutant into the copy
(mutation switching) and runs the cells once a mutant with ``__STRYKER_ACTIVE_MUTANT__`` set; the shim processes
inherit it, so only the client runs mutated: the harness, the broker and the interposer are Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mutation import (
    KILLED_STATUSES,
    TRIAGE_DIR,
    MutantResult,
    TriageError,
    add_client_run_arguments,
    check_open_only,
    load_triage,
    open_or_untriaged,
    prune_triage,
    read_kills,
    report,
)

CLIENT = "rhea"
STRYKER = "9.5.1"  # the last @stryker-mutator/core for Node 20 (Stryker 10 needs Node 22)
FILES = ("session.js", "link.js", "connection.js", "transport.js", "frames.js", "types.js", "message.js")
DEFAULT_FILES = ("session.js", "link.js")
HELPERS = {"client_mutation_cells.py": "test_client_cells.py",
           "client_mutation_resolve.js": "client_mutation_resolve.js", "mutation_kills.py": "mutation_kills.py"}
TRIAGE = TRIAGE_DIR / "clients" / CLIENT
# Stryker's statuses as scripts/mutation.py's report counts them (its KILLED_STATUSES: killed, timeout, ...)
STATUSES = {"Killed": "killed", "Timeout": "timeout", "RuntimeError": "suspicious", "Survived": "survived",
            "NoCoverage": "no tests", "CompileError": "compile error", "Ignored": "ignored"}


def rhea_version() -> str:
    """The rhea version the shim pins (peers/shims/rhea/package.json)."""
    from amqp_conformance.peers.shimrun import SHIMS_ROOT

    return json.loads((SHIMS_ROOT / CLIENT / "package.json").read_text(encoding="utf-8"))["dependencies"]["rhea"]


NAME = re.compile(r"^([\w.-]+)\.js:\d+:\d+-\d+:\d+ \w+ -> ")


def status_of(mutant: dict) -> str:
    """A Stryker mutant's status in the report's words (:data:`STATUSES`; Stryker's own where it has none)."""
    return STATUSES.get(mutant["status"], mutant["status"])


def mutant_name(file: str, mutant: dict) -> str:
    """A mutant's stable name: file, the span of what it changes (start and end line:column), Stryker's mutator
    and the replacement (``link.js:120:9-120:14 ConditionalExpression -> false``); unique within a file (two
    mutants of one mutator may start at one place: ``a && b`` and ``a``)."""
    start, end = mutant["location"]["start"], mutant["location"]["end"]
    replacement = " ".join(str(mutant.get("replacement", "")).split())[:60]
    return (f"{file}:{start['line']}:{start['column']}-{end['line']}:{end['column']} {mutant['mutatorName']} -> "
            f"{replacement}")


def module_of_name(name: str) -> str:
    """The file stem a Stryker mutant name is of (``link.js:120:9-120:14 ...`` -> ``link``); '' when it is not
    one."""
    found = NAME.match(name)
    return found.group(1) if found else ""


def covered_lines(coverage_dir: Path, source: Path) -> set[int]:
    """The 1-based lines of ``source`` that some process reported running (V8 block coverage written with
    ``NODE_V8_COVERAGE``): a line counts when a character of it not blank lies in a range run at least once,
    inner ranges overriding the ranges around them, as V8 nests them."""
    text = source.read_text(encoding="utf-8")
    counts = [0] * len(text)
    url = source.resolve().as_uri()
    for path in coverage_dir.glob("*.json"):
        for script in json.loads(path.read_text(encoding="utf-8")).get("result", []):
            if script.get("url") != url:
                continue
            runs = [0] * len(text)
            for function in script["functions"]:
                for block in function["ranges"]:  # outer first: an inner range overrides its part
                    for at in range(block["startOffset"], min(block["endOffset"], len(text))):
                        runs[at] = block["count"]
            counts = [a + b for a, b in zip(counts, runs, strict=True)]
    lines, line = set(), 1
    for at, char in enumerate(text):
        if char == "\n":
            line += 1
        elif counts[at] and not char.isspace():
            lines.add(line)
    return lines


def line_ranges(lines: set[int]) -> list[tuple[int, int]]:
    """``lines`` as inclusive runs of consecutive numbers, in order."""
    runs: list[tuple[int, int]] = []
    for line in sorted(lines):
        if runs and runs[-1][1] == line - 1:
            runs[-1] = (runs[-1][0], line)
        else:
            runs.append((line, line))
    return runs


def cells_command() -> list[str]:
    """The test command: every cell of the grid, the client with itself, stopping at the first that fails."""
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "mutation_kills",
            "--import-mode=importlib", "test_client_cells.py"]


def cells_env(workdir: Path, kills: Path) -> dict[str, str]:
    """The environment the cells run in (also under Stryker, which passes its own on to them)."""
    return {**os.environ, "AMQP_CLIENT_MUTATION_CLIENT": CLIENT, "AMQP_CLIENT_MUTATION_SHIMS": str(workdir / "shims"),
            "AMQP_MUTATION_KILLS": str(kills)}


def refresh_harness(workdir: Path) -> None:
    """Put the harness's current cells, preload and kill recorder into ``workdir`` and build the rhea shim into
    ``workdir/shims`` (again when its sources changed): a first run and a ``--survivors`` run judge with the
    grid as it is now."""
    from amqp_conformance.peers.shimrun import SHIMS_ROOT, ensure_built, load_spec

    for source, target in HELPERS.items():
        shutil.copy2(Path(__file__).resolve().parent / source, workdir / target)
    ensure_built(load_spec(SHIMS_ROOT / CLIENT), workdir / "shims", progress=print)


def build_workdir(workdir: Path, files: list[str], kills: Path, concurrency: int) -> dict[str, set[int]]:
    """Lay out ``workdir`` (Stryker and the pinned rhea from npm, the copy to mutate, the cells, the preload and
    the rhea shim built into ``shims/``), run the cells once on the unmutated copy with V8 coverage on, and write
    Stryker's configuration mutating the covered lines of ``files``; returns each file's covered lines."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / "package.json").write_text(json.dumps({
        "name": "amqp-conformance-rhea-mutation", "private": True,
        "dependencies": {"rhea": rhea_version()}, "devDependencies": {"@stryker-mutator/core": STRYKER},
    }, indent=1) + "\n", encoding="utf-8")
    print(f"npm install (rhea {rhea_version()}, Stryker {STRYKER}) ...", flush=True)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=workdir, check=True)
    shutil.copytree(workdir / "node_modules" / "rhea", workdir / "rhea")
    refresh_harness(workdir)
    coverage = workdir / "coverage"
    print("the cells once, on the unmutated copy, with V8 coverage ...", flush=True)
    started = time.monotonic()
    run = subprocess.run(cells_command(), cwd=workdir, env={**cells_env(workdir, kills),
                                                                  "NODE_V8_COVERAGE": str(coverage)})
    if run.returncode != 0:
        raise SystemExit(f"client mutation: the cells fail on the unmutated rhea (exit {run.returncode}); fix that "
                         "first (amqp-conformance interop --clients rhea --pairs same)")
    print(f"cells: {time.monotonic() - started:.1f} s")
    covered = {file: covered_lines(coverage, workdir / "rhea" / "lib" / file) for file in files}
    mutate = [f"rhea/lib/{file}:{start}-{end}" for file in files for start, end in line_ranges(covered[file])]
    config = {
        "$schema": "./node_modules/@stryker-mutator/core/schema/stryker-schema.json",
        "testRunner": "command", "commandRunner": {"command": " ".join(cells_command())},
        "coverageAnalysis": "off", "concurrency": concurrency, "mutate": mutate,
        "reporters": ["json", "progress-append-only"], "jsonReporter": {"fileName": "reports/mutation.json"},
        "ignorePatterns": ["shims", "coverage", "reports", "node_modules/.cache"],
        "timeoutMS": 20000, "timeoutFactor": 2, "cleanTempDir": "always",
    }
    (workdir / "stryker.config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    (workdir / "covered.json").write_text(json.dumps({f: sorted(v) for f, v in covered.items()}) + "\n",
                                          encoding="utf-8")
    return covered


def read_results(workdir: Path, files: list[str], kills: Path,
                 triage: dict[str, dict[str, str]]) -> list[MutantResult]:
    """Stryker's JSON report as :class:`MutantResult` rows (the first failing cell of each from ``kills``), with
    each survivor's diff."""
    data = json.loads((workdir / "reports" / "mutation.json").read_text(encoding="utf-8"))
    first_kill = read_kills(kills)
    results = []
    for path, entry in sorted(data["files"].items()):
        file = Path(path).name
        if file not in files:
            continue
        source = entry["source"].splitlines()
        for mutant in entry["mutants"]:
            name = mutant_name(file, mutant)
            result = MutantResult(name, module_of_name(name), status_of(mutant),
                                  first_kill.get(str(mutant["id"])), triage.get(name))
            if not result.killed:
                result.diff = mutant_diff(source, mutant)
            results.append(result)
    return results


def mutant_diff(source: list[str], mutant: dict) -> str:
    """The mutant as a diff of the lines it changes (the replacement spliced into the first, the rest dropped)."""
    start, end = mutant["location"]["start"], mutant["location"]["end"]
    before = source[start["line"] - 1:end["line"]]
    after = before[0][:start["column"] - 1] + str(mutant.get("replacement", "")) + before[-1][end["column"] - 1:]
    return "\n".join([f"-{line}" for line in before] + [f"+{line}" for line in after.splitlines() or [""]])


def mutate_span(name: str) -> str:
    """Stryker's ``mutate`` range for the place of a mutant name (``FILE:line:col-line:col``): Stryker reads a
    range's columns from 0 and reports a mutant's from 1, so the start is moved back one column."""
    file, start_line, start_col, end = re.match(r"^([^:]+):(\d+):(\d+)-(\S+) ", name).groups()
    return f"{file}:{start_line}:{int(start_col) - 1}-{end}"


def run_survivors(workdir: Path, files: list[str], kills: Path, env: dict[str, str],
                  wanted: Callable[[str], bool] = lambda name: True) -> int:
    """Run Stryker again on the places of the last run's survivors only (after a change to the grid), those whose
    name ``wanted`` keeps, and fold what it finds into the last run's report: a survivor now killed becomes killed
    there, its first failing cell appended to ``kills`` under its id in that report. Mutants of other places that
    Stryker makes inside those places run too, and are left as the last run found them. Returns Stryker's exit
    status."""
    report = workdir / "reports" / "mutation.json"
    base = json.loads(report.read_text(encoding="utf-8"))
    survivors = {}
    for path, entry in base["files"].items():
        if Path(path).name in files:
            for mutant in entry["mutants"]:
                name = mutant_name(Path(path).name, mutant)
                if status_of(mutant) not in KILLED_STATUSES and wanted(name):
                    survivors[name] = mutant
    print(f"== client mutation: {len(survivors)} survivors of the last run, against the grid as it is now", flush=True)
    spans = sorted({mutate_span(name) for name in survivors})
    config = json.loads((workdir / "stryker.config.json").read_text(encoding="utf-8"))
    config.update(mutate=[f"rhea/lib/{span}" for span in spans],
                  jsonReporter={"fileName": "reports/mutation-survivors.json"})
    (workdir / "stryker.survivors.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    again_kills = kills.with_name("kills-survivors.jsonl")
    again_kills.unlink(missing_ok=True)
    run = subprocess.run(["npx", "stryker", "run", "stryker.survivors.json"], cwd=workdir,
                         env={**env, "AMQP_MUTATION_KILLS": str(again_kills)})
    if run.returncode != 0:
        return run.returncode
    again = json.loads((workdir / "reports" / "mutation-survivors.json").read_text(encoding="utf-8"))
    first_kill = read_kills(again_kills)
    now_killed = 0
    with kills.open("a", encoding="utf-8") as out:
        for path, entry in again["files"].items():
            for mutant in entry["mutants"]:
                before = survivors.get(mutant_name(Path(path).name, mutant))
                if before is not None and status_of(mutant) in KILLED_STATUSES:
                    before["status"] = mutant["status"]
                    now_killed += 1
                    if str(mutant["id"]) in first_kill:
                        out.write(json.dumps({"mutant": str(before["id"]), "case": first_kill[str(mutant["id"])],
                                              "against": ""}) + "\n")
    report.write_text(json.dumps(base) + "\n", encoding="utf-8")
    print(f"killed now: {now_killed} of the {len(survivors)} survivors")
    return 0


def run_open_entries(workdir: Path, files: list[str], triage: dict[str, dict[str, str]], kills: Path,
                     concurrency: int, prune: bool, out: Path) -> int:
    """With no run kept in ``workdir``: lay it out afresh and run Stryker on the places of the mutants triaged
    ``open`` in ``files`` only (those a new row or check was written for), printing each as killed, with the cell
    that first failed, or surviving, and keeping Stryker's report and the kill record in ``out``
    (``mutation-open.json``, ``kills.jsonl``); with ``prune``, remove the killed ones' entries from the triage. A run of
    minutes, from a fresh clone, where a whole run takes an hour; it measures no score (a whole run does). Returns
    0, or 2 when Stryker stops."""
    names = sorted(name for name, entry in triage.items()
                   if entry.get("category") == "open" and f"{module_of_name(name)}.js" in files)
    print(f"== client mutation: no run kept in {workdir}; the {len(names)} mutants triaged open in {', '.join(files)} "
          "only, against the grid as it is now", flush=True)
    if not names:
        return 0
    kills.unlink(missing_ok=True)
    build_workdir(workdir, files, kills, concurrency)
    config = json.loads((workdir / "stryker.config.json").read_text(encoding="utf-8"))
    config.update(mutate=[f"rhea/lib/{span}" for span in sorted({mutate_span(name) for name in names})],
                  jsonReporter={"fileName": "reports/mutation-open.json"})
    (workdir / "stryker.open.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    run = subprocess.run(["npx", "stryker", "run", "stryker.open.json"], cwd=workdir, env=cells_env(workdir, kills))
    if run.returncode != 0:
        return 2
    report_file = workdir / "reports" / "mutation-open.json"
    shutil.copy2(report_file, out / report_file.name)
    if kills.is_file():
        shutil.copy2(kills, out / "kills.jsonl")
    data = json.loads(report_file.read_text(encoding="utf-8"))
    first_kill = read_kills(kills)
    found = {mutant_name(Path(path).name, mutant): (status_of(mutant), first_kill.get(str(mutant["id"])))
             for path, entry in data["files"].items() for mutant in entry["mutants"]}
    killed = [name for name in names if found.get(name, ("",))[0] in KILLED_STATUSES]
    for name in names:
        status, case = found.get(name, ("not made (the triage names a place Stryker no longer mutates)", None))
        print(f"  {status:9} {name}" + (f"  <- {case}" if case else ""))
    print(f"open entries killed now: {len(killed)} of {len(names)}")
    if prune and killed:
        print(f"pruned {prune_triage(TRIAGE, killed)} killed triage entries from {TRIAGE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run Stryker over rhea under the grid's cells and print the figures; exit 1 when a survivor is untriaged
    or the score is below the target, 2 for a malformed triage file or a ``--report-only`` with no run kept."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", action="append", choices=FILES,
                        help=f"mutate this file of rhea/lib (repeatable; default: {', '.join(DEFAULT_FILES)})")
    parser.add_argument("--concurrency", type=int, default=2, help="mutants run at once")
    add_client_run_arguments(parser, CLIENT, "Stryker", "the places of the last run's survivors")
    args = parser.parse_args(argv)
    check_open_only(parser, args)
    if not shutil.which("node") or not shutil.which("npm"):
        print("client mutation: node and npm are needed (Node 20 or later): install them from your package "
              "manager", file=sys.stderr)
        return 2
    try:
        triage = load_triage(TRIAGE, module_of_name) if TRIAGE.is_dir() else {}
    except TriageError as exc:
        print(f"client mutation: {exc}", file=sys.stderr)
        return 2
    files = args.file or list(DEFAULT_FILES)
    args.out.mkdir(parents=True, exist_ok=True)
    kills = (args.workdir / "kills.jsonl").resolve()  # the kept run's: --survivors, --report-only read it, any --out
    started = time.monotonic()
    kept = (args.workdir / "reports" / "mutation.json").is_file()
    if args.survivors and args.open_only and not kept:
        status = run_open_entries(args.workdir.resolve(), files, triage, kills, args.concurrency, args.prune_stale,
                                  args.out)
        if status != 0:
            print("client mutation: Stryker stopped; see its output above", file=sys.stderr)
        return status
    if args.report_only or args.survivors:
        if not kept:
            print(f"client mutation: no run kept in {args.workdir}; run without --report-only or --survivors first",
                  file=sys.stderr)
            return 2
        covered = {f: set(v) for f, v in
                   json.loads((args.workdir / "covered.json").read_text(encoding="utf-8")).items()}
        if args.survivors:
            refresh_harness(args.workdir.resolve())
            status = run_survivors(args.workdir.resolve(), files, kills.resolve(),
                                   cells_env(args.workdir.resolve(), kills.resolve()),
                                   (lambda name: open_or_untriaged(triage, name)) if args.open_only
                                   else (lambda name: True))
            if status != 0:
                print(f"client mutation: Stryker stopped (exit {status}); see its output above", file=sys.stderr)
                return 2
    else:
        kills.unlink(missing_ok=True)
        print(f"== client mutation: Stryker over rhea's {', '.join(files)}; the grid's cells, {CLIENT} with "
              "itself, against the brokers of client_mutation_cells.BROKERS", flush=True)
        covered = build_workdir(args.workdir.resolve(), files, kills.resolve(), args.concurrency)
        run = subprocess.run(["npx", "stryker", "run"], cwd=args.workdir,
                             env=cells_env(args.workdir.resolve(), kills.resolve()))
        if run.returncode != 0:
            print(f"client mutation: Stryker stopped (exit {run.returncode}); see its output above", file=sys.stderr)
            return 2
    results = read_results(args.workdir, files, kills, triage)
    missing = [f for f in files if not any(r.module == f[:-3] for r in results)]
    if missing:
        print(f"client mutation: the last run kept in {args.workdir} did not mutate {', '.join(missing)}; run it "
              "with those files", file=sys.stderr)
        return 2
    print("\nlines the cells run (the only ones mutated): " + ", ".join(
        f"{f} {len(covered.get(f, ()))} of {len((args.workdir / 'rhea' / 'lib' / f).read_text().splitlines())}"
        for f in files))
    status = report(results, triage, time.monotonic() - started, args.out, args.target, module_of_name)
    if kills.is_file():
        shutil.copy2(kills, args.out / "kills.jsonl")  # beside the report it attributes
    if args.prune_stale:
        stale = json.loads((args.out / "mutation.json").read_text(encoding="utf-8"))["stale_triage"]
        print(f"pruned {prune_triage(TRIAGE, stale)} stale triage entries from {TRIAGE}")
    return status


if __name__ == "__main__":
    sys.exit(main())
