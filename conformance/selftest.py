"""``amqp-conformance selftest``: the suite proves it catches what it claims to catch.

The catalogue runs once against the healthy reference broker (the baseline: nothing may FAIL, else the
self-test means nothing; and once against the healthy reference router too when a selected mutant or variant
runs on it, so a ``-k`` that selects router cases alone has a baseline that runs them), once against each
conformant variant in :data:`amqp_conformance.peers.reference.conformant_variants.CONFORMANT` (a broker that
keeps every guarantee and makes a choice the sources leave open another way: it must pass as the baseline does,
else a row or script has taken the reference's choice for a rule), and once against each mutant in
:data:`amqp_conformance.peers.reference.mutants.MUTANTS`, each a broker that breaks one documented
guarantee. A mutant is *caught* when at least one case FAILs against it; it *survives* otherwise. Each run
is its own pytest subprocess (a mutant cannot leak state into the next), ``--jobs`` of them at a time.

``--mutant NAME`` runs the baseline and the mutants named only; ``--with-variants`` adds the conformant
variants back (they check the catalogue's rows, whatever the mutant, and cost a run each).

Exit codes: 0 every mutant caught, and a clean baseline and clean variants; 1 a mutant survived, or the
baseline or a conformant variant FAILed or ERRORed; 2 usage (unknown mutant, nothing selected).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from amqp_conformance.fixtures.brokers import base_broker
from amqp_conformance.fixtures.logtext import last_line
from amqp_conformance.fixtures.plugin import UNCLAIMED
from amqp_conformance.peers.reference.conformant_variants import CONFORMANT
from amqp_conformance.peers.reference.mutants import MUTANTS, Mutant
from amqp_conformance.reports.records import read_results

CONFORMANCE_DIR = Path(__file__).parent
BASELINE = "(baseline)"
BASE_BROKER = "reference"
# cases side by side within each run: a run against the embedded reference spends most of its wall time asleep
# (quiet times, the rows' bounded watches), so two at a time cut its wall time by 40 % for the same CPU
# (6 Dec 2026: the reference catalogue, 321 case runs, 23.1 s one at a time, 14.5 s two at a time)
CASES_SIDE_BY_SIDE = 2


class SelftestUsage(Exception):
    """A usage problem: printed as one line, exit 2."""


@dataclass
class MutantRun:
    """One catalogue run: against a mutant (or the baseline), what FAILed, what ERRORed, how it ended."""

    name: str
    description: str
    broker_name: str = BASE_BROKER
    caught_by: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cases: int = 0
    exit_code: int = 0
    seconds: float = 0.0
    output: str = ""

    @property
    def caught(self) -> bool:
        """True when at least one case FAILed: the suite noticed the broken guarantee."""
        return bool(self.caught_by)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``selftest`` on the CLI's sub-command parser."""
    parser = commands.add_parser("selftest", help="run the catalogue against each mutant of the reference broker")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only cases matching this pytest -k expression")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="mutants run in parallel (default: two per core)")
    parser.add_argument("--mutant", action="append", default=[], metavar="NAME",
                        help="only this mutant, beside the baseline (repeatable; default: every registered mutant "
                             "and every conformant variant)")
    parser.add_argument("--with-variants", action="store_true",
                        help="with --mutant: run the conformant variants too (without --mutant they always run)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an expected frame (2)")
    parser.add_argument("--cases", type=int, default=CASES_SIDE_BY_SIDE, metavar="N",
                        help=f"cases side by side within each run, as 'run -n N' (default {CASES_SIDE_BY_SIDE}: "
                             "the same verdicts, the runs' quiet times and bounded watches overlap)")
    parser.add_argument("--out", default=None, help="keep each run's records here (default: a temporary dir)")
    parser.set_defaults(func=cmd_selftest)


def cmd_selftest(args: argparse.Namespace) -> int:
    """Run the baseline, the conformant variants and every selected mutant; print the table (or JSON); 0 only if
    all mutants are caught and the baseline and every variant pass."""
    unknown = [name for name in args.mutant if name not in MUTANTS]
    if unknown:
        raise SelftestUsage(f"unknown mutant {unknown[0]!r}; known: {', '.join(sorted(MUTANTS))}")
    if args.jobs < 1:
        raise SelftestUsage("--jobs must be at least 1")
    if args.cases < 1:
        raise SelftestUsage("--cases must be at least 1 (1: each run's cases one at a time)")
    mutants = [MUTANTS[name] for name in (args.mutant or sorted(MUTANTS))]
    variants = list(CONFORMANT.values()) if args.with_variants or not args.mutant else []
    with tempfile.TemporaryDirectory(prefix="amqp-selftest-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        runs = run_all(mutants, variants, out, args.keyword, args.jobs, args.timeout, args.cases)
    bases = len(runs) - len(variants) - len(mutants)
    baselines, variant_runs, mutant_runs = runs[:bases], runs[bases:bases + len(variants)], runs[bases + len(variants):]
    baseline = merged(baselines)
    if baseline.cases == 0:
        raise SelftestUsage(f"no case matched{f' -k {args.keyword!r}' if args.keyword else ''}; "
                            f"list the cases with 'amqp-conformance cases'")
    if args.format == "json":
        print(json.dumps([{"mutant": r.name, "description": r.description, "broker": r.broker_name,
                           "caught_by": r.caught_by} for r in mutant_runs], indent=2))
    else:
        print_table(baselines, variant_runs, mutant_runs)
        if not variants:
            print(f"conformant variants: not run ({len(CONFORMANT)}; --mutant runs only the mutants named: add "
                  f"--with-variants to run them too)")
    if baseline.caught or baseline.errors:
        print(f"amqp-conformance: selftest: the healthy reference broker does not pass the catalogue "
              f"({len(baseline.caught_by)} FAIL, {len(baseline.errors)} ERROR: "
              f"{', '.join((baseline.caught_by + baseline.errors)[:5])}); the self-test is meaningless until it does",
              file=sys.stderr)
        return 1
    failing = [r for r in variant_runs if r.caught or r.errors]
    for run in failing:
        print(f"amqp-conformance: selftest: conformant variant {run.name} ({run.description}) does not pass "
              f"({len(run.caught_by)} FAIL, {len(run.errors)} ERROR: {', '.join((run.caught_by + run.errors)[:5])}): "
              f"those rows or their scripts take the reference's choice for a rule; their frame logs: "
              f"{Path(args.out) / run.name if args.out else 'run again with --out DIR to keep them'}", file=sys.stderr)
    if failing:
        return 1
    survivors = [r.name for r in mutant_runs if not r.caught]
    if survivors:
        print(f"amqp-conformance: selftest: {len(survivors)} mutant(s) survived: {', '.join(survivors)}",
              file=sys.stderr)
        return 1
    return 0


def default_jobs() -> int:
    """How many runs go side by side by default: two per core. A run waits on its broker much of the time (quiet
    times, idle probes), so one per core leaves the cores half idle (27 Nov 2026, 2 cores: 5 min 32 s with 2 at a
    time, 3 min 45 s with 3; 2 Dec, 81 mutants and 17 variants: 309 s with 3, 263 s with 4, the same verdicts)."""
    return max(1, 2 * (os.cpu_count() or 1))


def run_all(mutants: list[Mutant], variants: list[Mutant], out: Path, keyword: str | None, jobs: int,
            timeout: float, cases: int = 1) -> list[MutantRun]:
    """The baselines first in the list (the healthy reference broker, then each other healthy broker a selected
    mutant or variant runs on, in the order first named), then one run per conformant variant (``variants``: of
    :data:`CONFORMANT`, in its order), then one per mutant, ``jobs`` at a time, each with ``cases`` of its cases
    side by side."""
    others = [*variants, *mutants]
    brokers = dict.fromkeys([BASE_BROKER, *(base_broker(m) for m in others)])
    targets = [MutantRun(BASELINE, f"the healthy {broker} broker", broker) for broker in brokers] + [
        MutantRun(m.name, m.description, base_broker(m)) for m in others]
    keywords = [keyword] * len(brokers) + [scoped(keyword, m.scope) for m in others]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda item: run_one(item[0], out, item[1], timeout, cases),
                             zip(targets, keywords, strict=True)))


def merged(baselines: list[MutantRun]) -> MutantRun:
    """The baselines as one run: their case runs, FAILs and ERRORs added up (what the exit code judges)."""
    return MutantRun(BASELINE, "the healthy reference brokers", cases=sum(r.cases for r in baselines),
                     caught_by=[case for r in baselines for case in r.caught_by],
                     errors=[case for r in baselines for case in r.errors],
                     seconds=max((r.seconds for r in baselines), default=0.0))


def scoped(keyword: str | None, scope: tuple[str, ...]) -> str | None:
    """The -k expression for a mutant: the user's ``keyword`` within the mutant's tables (``scope``)."""
    if not scope:
        return keyword
    tables = " or ".join(scope)
    return f"({tables}) and ({keyword})" if keyword else tables


def pytest_command(run: MutantRun, run_dir: Path, keyword: str | None, timeout: float, cases: int = 1) -> list[str]:
    """The pytest command line that runs the catalogue against ``run``'s mutant (or the healthy broker), ``cases``
    of its cases side by side (``--amqp-jobs``, as ``run -n``)."""
    command = [sys.executable, "-m", "pytest", str(CONFORMANCE_DIR), "-c", str(CONFORMANCE_DIR / "pytest.ini"),
               "--rootdir", str(CONFORMANCE_DIR), "--amqp-out", str(run_dir), "--case-timeout", str(timeout),
               "-q", "-p", "no:randomly", "-p", "no:xdist"]
    if run.name != BASELINE:
        command += ["--reference-mutant", run.name]
    if run.broker_name != BASE_BROKER:
        command += ["--broker", run.broker_name]
    if keyword:
        command += ["-k", keyword]
    if cases > 1:
        command += ["--amqp-jobs", str(cases)]
    return command


def run_one(run: MutantRun, out: Path, keyword: str | None, timeout: float, cases: int = 1) -> MutantRun:
    """Run the catalogue in a subprocess and fill ``run`` with the cases that FAILed and ERRORed."""
    run_dir = out / (run.name if run.name != BASELINE else "baseline" if run.broker_name == BASE_BROKER
                     else f"baseline-{run.broker_name}")
    start = time.monotonic()
    proc = subprocess.run(pytest_command(run, run_dir, keyword, timeout, cases), capture_output=True, text=True,
                          check=False)
    run.seconds = time.monotonic() - start
    run.exit_code = proc.returncode
    run.output = proc.stdout[-4000:] + proc.stderr[-2000:]
    results = read_results(run_dir)
    run.cases = len(results)
    run.caught_by = sorted({r["case_id"] for r in results if r["verdict"] == "FAIL"})
    run.errors = sorted({r["case_id"] for r in results if r["verdict"] == "ERROR"})
    if proc.returncode == 4 and UNCLAIMED in run.output:
        return run  # the selection holds no case its broker's profile claims (a router beside UM rows): none ran
    if proc.returncode not in (0, 1, 5):  # usage error, internal error, interrupted: the run itself broke
        run.errors.append(f"pytest exit {proc.returncode}: {last_line(run.output, '(no output)')}")
    return run


def print_table(baselines: list[MutantRun], variants: list[MutantRun], runs: list[MutantRun]) -> None:
    """The human table: each baseline's and each conformant variant's counts, then each mutant, its description
    and the cases that caught it (or SURVIVED)."""
    name_width = max([len(r.name) for r in runs] + [len("mutant")])
    desc_width = min(60, max([len(r.description) for r in runs] + [len("description")]))
    for baseline in baselines:
        print(f"baseline: {baseline.cases} case runs against {baseline.description}, "
              f"{len(baseline.caught_by)} FAIL, {len(baseline.errors)} ERROR ({baseline.seconds:.1f}s)")
    for variant in variants:
        print(f"conformant variant {variant.name} ({variant.description}): {variant.cases} case runs, "
              f"{len(variant.caught_by)} FAIL, {len(variant.errors)} ERROR ({variant.seconds:.1f}s)")
    print(f"{'mutant':<{name_width}}  {'description':<{desc_width}}  caught by (FAIL)")
    for run in runs:
        caught = ", ".join(run.caught_by) if run.caught else "SURVIVED"
        extra = f"  [+{len(run.errors)} ERROR]" if run.errors else ""
        print(f"{run.name:<{name_width}}  {run.description[:desc_width]:<{desc_width}}  {caught}{extra}")
    killed = sum(r.caught for r in runs)
    print(f"{killed}/{len(runs)} mutants caught")
