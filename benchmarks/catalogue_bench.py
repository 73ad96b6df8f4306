"""Benchmark (not a test): what the catalogue costs against the embedded reference broker, and why.

Prints, on this machine:
  1. the whole catalogue, serial and with pytest-xdist ``-n auto``: wall time of the pytest process and the
     cases' own time (sum of ``duration_ms``);
  2. the floor: a bare python-qpid-proton connect-attach-transfer-disposition round trip
     (``proton.utils.BlockingConnection``, one unsettled message, wait for the broker's disposition) against
     the same embedded broker, median of ``--floor-runs``;
  3. per-case cost (median and 90th percentile case duration) beside the floor;
  4. the same catalogue with ``--no-idle-probe``: every wait for a frame that must not come runs its
     ``--quiet-time``, as against a broker over the network (peers/idle.py explains the probe);
  5. the cost of a FAIL against its time-out: the catalogue against a mutant whose FAILs come from an
     expected frame that never arrives, each FAIL's duration beside ``--case-timeout``, with and without
     the probe.

Run: ``python benchmarks/catalogue_bench.py [--repeat 3]``. Timings on a shared machine are noisy: each
figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def run_catalogue(extra: list[str], timeout: float = 2.0, quiet: float = 0.3) -> tuple[float, list[dict]]:
    """Wall seconds of one pytest run of the catalogue, and its result records."""
    with tempfile.TemporaryDirectory(prefix="amqp-bench-") as out:
        command = [sys.executable, "-m", "pytest", str(CONFORMANCE), "-c", str(CONFORMANCE / "pytest.ini"),
                   "--rootdir", str(CONFORMANCE), "-q", "-p", "no:randomly", "--amqp-out", out,
                   "--case-timeout", str(timeout), "--quiet-time", str(quiet), *extra]
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        results = [json.loads(line) for line in (Path(out) / "results.jsonl").read_text().splitlines()]
    return wall, results


def floor_round_trip(runs: int) -> list[float]:
    """Seconds per bare proton connect-attach-transfer-disposition round trip against the embedded broker."""
    from amqp_conformance.peers.reference.broker import Broker
    from amqp_conformance.peers.reference.server import ReferenceServer
    from proton import Message
    from proton.utils import BlockingConnection

    server = ReferenceServer(Broker()).start()
    times = []
    try:
        for i in range(runs + 1):
            start = time.perf_counter()
            connection = BlockingConnection(f"amqp://127.0.0.1:{server.port}", timeout=10)
            sender = connection.create_sender(f"bench.floor.{i}")
            sender.send(Message(body="m1"))  # waits for the broker's disposition
            connection.close()
            if i:  # the first run warms imports and the broker up
                times.append(time.perf_counter() - start)
    finally:
        server.stop()
    return times


def p90(values: list[float]) -> float:
    """90th percentile (same unit as ``values``)."""
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def median_ms(values: list[float]) -> float:
    """Median in milliseconds."""
    return statistics.median(values) * 1000


def main() -> int:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median is printed)")
    parser.add_argument("--floor-runs", type=int, default=30)
    parser.add_argument("--fail-mutant", default="ignores-stateless-disposition",
                        help="a mutant whose FAIL waits for a frame that never comes")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(shared machine: figures are noisy)")

    floor = floor_round_trip(args.floor_runs)
    print(f"floor: bare proton connect-attach-transfer-disposition round trip: median {median_ms(floor):.1f} ms "
          f"(min {min(floor) * 1000:.1f}, max {max(floor) * 1000:.1f}; {len(floor)} runs)")

    for label, extra in (("serial", ["-p", "no:xdist"]), ("xdist -n auto", ["-n", "auto"])):
        walls, case_sums, per_case = [], [], []
        for _ in range(args.repeat):
            wall, results = run_catalogue(extra)
            walls.append(wall)
            case_sums.append(sum(r["duration_ms"] for r in results) / 1000)
            per_case += [r["duration_ms"] for r in results]
            verdicts = {r["verdict"] for r in results}
        print(f"catalogue {label}: {len(results)} case runs, wall median {statistics.median(walls):.2f} s "
              f"(runs: {', '.join(f'{w:.2f}' for w in walls)}), cases' own time {statistics.median(case_sums):.2f} s, "
              f"verdicts {sorted(verdicts)}")
        if label == "serial":
            case_ms = statistics.median(per_case)
            print(f"per case: median {case_ms:.1f} ms = {case_ms / median_ms(floor):.2f}x the floor, "
                  f"90th percentile {p90(per_case):.1f} ms = {p90(per_case) / median_ms(floor):.2f}x "
                  f"(min {min(per_case):.1f} ms, max {max(per_case):.0f} ms)")

    wall, timed = run_catalogue(["-p", "no:xdist", "--no-idle-probe"])
    print(f"catalogue serial with --no-idle-probe (quiet time 0.3 s waited out, as against a remote broker): "
          f"wall {wall:.2f} s, per case median {statistics.median(r['duration_ms'] for r in timed):.0f} ms, "
          f"verdicts {sorted({r['verdict'] for r in timed})}")

    for probe, extra in (("idle probe", []), ("--no-idle-probe", ["--no-idle-probe"])):
        for timeout in (0.5, 2.0):
            _, results = run_catalogue(["-p", "no:xdist", "--reference-mutant", args.fail_mutant, *extra],
                                       timeout=timeout)
            fails = [r["duration_ms"] / 1000 for r in results if r["verdict"] == "FAIL"]
            if fails:
                print(f"FAIL cost ({args.fail_mutant}, {probe}, --case-timeout {timeout}): {len(fails)} FAIL, "
                      f"median {statistics.median(fails):.3f} s, max {max(fails):.3f} s "
                      f"= {max(fails) / timeout:.2f}x the time-out at most")
    return 0


if __name__ == "__main__":
    sys.exit(main())
