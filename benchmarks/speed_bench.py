"""Benchmark (not a test): the catalogue's speed where users wait, the figures of issue 16 side by side.

Runs ``amqp-conformance run`` and prints, for each line, the span of case time (first case's start to the last
case's end, from the records: broker start-up left out), the sum of the cases' own times, and the verdicts:

  1. the embedded reference with ``--no-idle-probe`` (every wait ends by time or by a barrier, as against a
     remote broker), serial and ``-n 8``;
  2. RabbitMQ (a local node, ``--strict``), serial and ``-n 8``, and whether both give the same verdicts;
  3. RabbitMQ ``-n 8 --repeat R``: how many cases are flaky;
  4. the cost of a FAIL from a frame that never comes: the catalogue against a mutant whose FAILs are such
     (``--no-idle-probe``), each FAIL's duration against the time-out.

    python benchmarks/speed_bench.py                 # R = 3
    python benchmarks/speed_bench.py --repeat 20     # the issue's flakiness check
    python benchmarks/speed_bench.py --no-rabbitmq   # the reference lines only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from amqp_conformance.conformance.repeat import flaky_cases

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def _epoch(stamp: str | float) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if isinstance(stamp, str) \
        else float(stamp)


def case_span(results: list[dict]) -> float:
    """Seconds from the first case's start to the last case's end (one repetition's records)."""
    starts = [_epoch(r["started_at"]) for r in results]
    ends = [_epoch(r["started_at"]) + r["duration_ms"] / 1000 for r in results]
    return max(ends) - min(starts)


def run_cli(args: list[str]) -> tuple[float, int, list[dict]]:
    """Wall seconds, exit code and result records of one ``amqp-conformance run``."""
    out = tempfile.mkdtemp(prefix="amqp-speed-")
    try:
        command = [sys.executable, "-m", "amqp_conformance.conformance.cli", "run", "--out", out, *args]
        started = time.perf_counter()
        code = subprocess.run(command, capture_output=True, text=True, check=False).returncode
        wall = time.perf_counter() - started
        results_file = Path(out) / "results.jsonl"
        results = [json.loads(line) for line in results_file.read_text().splitlines()] if results_file.exists() else []
        return wall, code, results
    finally:
        shutil.rmtree(out, ignore_errors=True)


def line(label: str, results: list[dict]) -> str:
    """One printed figure: span, sum and verdict counts."""
    verdicts = Counter(r["verdict"] for r in results)
    total = sum(r["duration_ms"] for r in results) / 1000
    return (f"{label:<46} span {case_span(results):6.1f} s   cases' sum {total:6.1f} s"
            f"   {len(results)} cases: {dict(sorted(verdicts.items()))}")


def verdicts_of(results: list[dict]) -> dict[str, str]:
    """Case id -> verdict."""
    return {f"{r['case_id']}:{r['expectation_set']}": r["verdict"] for r in results}


def main() -> int:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of RabbitMQ -n 8 for flakiness")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--rabbitmq", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--fail-mutant", default="ignores-stateless-disposition")
    args = parser.parse_args()
    print(f"{datetime.date.today()}: {os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    n = ["-n", str(args.jobs)]

    _, _, serial = run_cli(["--no-idle-probe"])
    print(line("reference --no-idle-probe, serial", serial))
    _, _, parallel = run_cli(["--no-idle-probe", *n])
    print(line(f"reference --no-idle-probe, -n {args.jobs}", parallel))

    if args.rabbitmq:
        _, _, serial = run_cli(["--broker", "rabbitmq", "--strict"])
        print(line("rabbitmq --strict, serial", serial))
        _, _, parallel = run_cli(["--broker", "rabbitmq", "--strict", *n])
        same = verdicts_of(serial) == verdicts_of(parallel)
        print(line(f"rabbitmq --strict, -n {args.jobs}", parallel) + f"   same verdicts as serial: {same}")
        _, code, repeated = run_cli(["--broker", "rabbitmq", "--strict", *n, "--repeat", str(args.repeat)])
        flaky = sorted(flaky_cases(repeated, sorted({r["run_id"] for r in repeated})))
        races = sum(1 for r in repeated if r.get("deviation_intermittent"))
        print(f"rabbitmq --strict -n {args.jobs} --repeat {args.repeat}: exit {code}, {len(flaky)} flaky"
              + (f": {', '.join(flaky)}" if flaky else "")
              + f"; a declared intermittent race happened in {races} case runs")

    fail_pytest = [sys.executable, "-m", "pytest", str(CONFORMANCE), "-c", str(CONFORMANCE / "pytest.ini"),
                   "--rootdir", str(CONFORMANCE), "-q", "-p", "no:randomly", "--case-timeout", "2.0",
                   "--reference-mutant", args.fail_mutant, "--no-idle-probe"]
    with tempfile.TemporaryDirectory(prefix="amqp-speed-") as out:
        subprocess.run([*fail_pytest, "--amqp-out", out], capture_output=True, text=True, check=False)
        results = [json.loads(x) for x in (Path(out) / "results.jsonl").read_text().splitlines()]
    fails = [r["duration_ms"] / 1000 for r in results if r["verdict"] == "FAIL"]
    if fails:
        print(f"FAIL cost ({args.fail_mutant}, --no-idle-probe, time-out 2.0 s): {len(fails)} FAIL, "
              f"at most {max(fails):.3f} s = {max(fails) / 2.0:.3f}x the time-out")
    else:
        print(f"FAIL cost: the mutant {args.fail_mutant} gave no FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
