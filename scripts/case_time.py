#!/usr/bin/env python3
"""Where a run's time goes: the case durations of a run directory, grouped, slowest groups first.

    python scripts/case_time.py /tmp/rmqrepeat-run              # every repetition in results.jsonl
    python scripts/case_time.py /tmp/rmqrepeat-run --top 15     # and the 15 slowest cases

A group is the case's table with its verdict; a NON-STRICT case is split by the kind of deviation that
excused it, the record's ``deviation`` field ("NON-STRICT/stopped": the broker stopped the case, e.g.
dropped the connection; "NON-STRICT/differs": it answered otherwise). Seconds are per repetition (the mean
over the repetitions the directory holds), so a 20-repeat directory reads like one run.
Exit status: 0, or 2 with no results.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from amqp_conformance.reports.records import RESULTS_FILE, read_results


def load(run_dir: Path) -> list[dict]:
    """The result records of ``run_dir/results.jsonl`` of its complete runs (those with as many records as
    the largest): a repetition still running, or cut short, would skew the per-repetition means."""
    records = read_results(run_dir)
    if not records:
        raise SystemExit(f"case_time: no {run_dir / RESULTS_FILE}; give a directory an 'amqp-conformance run "
                         "--out' wrote")
    sizes: dict[str, int] = defaultdict(int)
    for record in records:
        sizes[record["run_id"]] += 1
    complete = {run for run, size in sizes.items() if size == max(sizes.values())}
    return [r for r in records if r["run_id"] in complete]


def group_of(record: dict) -> str:
    """``<table> <verdict>``; a NON-STRICT verdict names the deviation kind of its record's ``deviation``
    field ("stopped": the broker stopped the case, e.g. reset the connection; "differs": it answered
    otherwise; see fixtures/verdict.py Judgement)."""
    verdict = record["verdict"]
    if verdict == "NON-STRICT":
        verdict += f"/{record.get('deviation') or 'differs'}"
    return f"{record['table']} {verdict}"


def breakdown(records: list[dict]) -> tuple[int, list[tuple[str, int, float]]]:
    """(repetitions, [(group, cases per repetition, seconds per repetition)]), slowest group first."""
    runs = {r["run_id"] for r in records}
    count: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for record in records:
        count[group_of(record)] += 1
        seconds[group_of(record)] += record.get("duration_ms", 0.0) / 1000
    n = max(len(runs), 1)
    rows = [(group, round(count[group] / n), seconds[group] / n) for group in count]
    return len(runs), sorted(rows, key=lambda row: -row[2])


def main(argv: list[str] | None = None) -> int:
    """Print the breakdown (and the slowest cases with ``--top``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--top", type=int, default=0, help="also list this many slowest cases (mean seconds)")
    args = parser.parse_args(argv)
    records = load(args.run_dir)
    if not records:
        print(f"case_time: {args.run_dir}/results.jsonl holds no result", file=sys.stderr)
        return 2
    runs, rows = breakdown(records)
    total = sum(row[2] for row in rows)
    print(f"{runs} repetition(s); per repetition: {total:.1f} s in {sum(row[1] for row in rows)} case runs")
    for group, cases, secs in rows:
        print(f"  {secs:7.1f} s  {100 * secs / total if total else 0:5.1f} %  {cases:4d} cases  {group}")
    if args.top:
        per_case: dict[str, list[float]] = defaultdict(list)
        for record in records:
            per_case[record["case_id"]].append(record.get("duration_ms", 0.0) / 1000)
        slowest = sorted(per_case.items(), key=lambda item: -sum(item[1]) / len(item[1]))[:args.top]
        print(f"slowest {len(slowest)} cases (mean, min-max seconds):")
        for case, durations in slowest:
            print(f"  {sum(durations) / len(durations):6.2f}  {min(durations):.2f}-{max(durations):.2f}  {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
