#!/usr/bin/env python3
"""List the cases that FAIL (or ERROR) against a broker, to declare its deviations from evidence.

    python scripts/failing_cases.py --broker rabbitmq            # runs the catalogue, then lists
    python scripts/failing_cases.py --results .ci/results/rabbitmq   # lists from an earlier run
    python scripts/failing_cases.py --broker rabbitmq --toml     # [[deviation]] drafts with observed patterns

Each line: verdict, case id, expectation set, the first mismatch. With ``--toml`` it prints drafted
``[[deviation]]`` entries for the FAILs (fixtures/deviation_draft.py: the ``observed`` pattern of what the
broker did), whose reason and reference are left for a human to write from the broker's documentation or
source: a deviation is declared because it is understood, never to turn a run green.
Exit status: 0 when nothing FAILs or ERRORs, 1 otherwise, 2 on a usage problem.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def read_results(directory: Path) -> list[dict]:
    """The records of ``directory/results.jsonl`` (the last run's, when several runs wrote there)."""
    path = directory / "results.jsonl"
    if not path.is_file():
        raise SystemExit(f"failing_cases: no {path}; run the catalogue first or pass --broker")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    last_run = records[-1]["run_id"] if records else None
    return [r for r in records if r.get("run_id") == last_run]


def main(argv: list[str] | None = None) -> int:
    """Run (or read) the catalogue against a broker and print what FAILs or ERRORs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--broker", help="run the catalogue against this broker first")
    source.add_argument("--results", type=Path, help="a run directory holding results.jsonl")
    parser.add_argument("--profile", help="judge by this profile (default: the broker's own)")
    parser.add_argument("--toml", action="store_true", help="print [[deviation]] skeletons for the FAILs")
    args = parser.parse_args(argv)
    directory = args.results
    if args.broker:
        directory = Path(tempfile.mkdtemp(prefix=f"failing-{args.broker}-"))
        command = ["amqp-conformance", "run", "--broker", args.broker, "--out", str(directory)]
        if args.profile:
            command += ["--profile", args.profile]
        code = subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode
        if code == 2:
            return 2
    try:
        results = read_results(directory)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    bad = [r for r in results if r["verdict"] in ("FAIL", "ERROR")]
    for record in bad:
        lines = record.get("mismatches") if record["verdict"] == "FAIL" else None
        first = ((lines or [record.get("reason") or ""])[0].splitlines() or [""])[0]
        print(f"{record['verdict']:<6} {record['case_id']} [{record['expectation_set']}] {first[:200]}")
    if args.toml:  # the same drafting as scripts/draft_deviations.py: observed patterns, reasons left TODO
        from amqp_conformance.fixtures.deviation_draft import draft_entries, to_toml

        print("\n" + to_toml(draft_entries([r for r in bad if r["verdict"] == "FAIL"])), end="")
    print(f"{len(bad)} of {len(results)} results FAIL or ERROR ({directory})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
