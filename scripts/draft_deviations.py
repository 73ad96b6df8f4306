#!/usr/bin/env python3
"""Draft ``[[deviation]]`` entries, with ``observed`` patterns, from a run directory's results.

    amqp-conformance run --broker rabbitmq --profile /tmp/bare.toml --out /tmp/rmq   # a profile without deviations
    python scripts/draft_deviations.py /tmp/rmq --profile rabbitmq > /tmp/draft.toml

Every FAIL (and NON-STRICT) case of the directory's last run gets the pattern of what the broker did
(fixtures/deviation_draft.py); cases with one pattern share an entry; a case the profile already declares
keeps that entry's reason and reference, every other one says TODO. Read each pattern against the frames,
then write the reason and a specific source before pasting an entry into the profile (which refuses a
reference that cites nothing). Exit status: 0 (entries printed, or none needed), 2 on a usage problem.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from amqp_conformance.fixtures.baseline import last_run
from amqp_conformance.fixtures.deviation_draft import draft_entries, draft_wire_type_entries, to_toml, wire_type_toml
from amqp_conformance.fixtures.profiles import ProfileError, load_profile
from amqp_conformance.reports.records import RESULTS_FILE, read_results


def main(argv: list[str] | None = None) -> int:
    """Print the drafted entries of ``RUN_DIR``'s last run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a directory 'amqp-conformance run --out' wrote")
    parser.add_argument("--profile", help="a profile (name or .toml file) whose reasons and references to keep")
    args = parser.parse_args(argv)
    records = read_results(args.run_dir)
    if not records:
        print(f"draft_deviations: no results in {args.run_dir / RESULTS_FILE}", file=sys.stderr)
        return 2
    records = last_run(records)
    try:
        profile = load_profile(args.profile) if args.profile else None
    except ProfileError as exc:
        print(f"draft_deviations: {exc}", file=sys.stderr)
        return 2
    entries = draft_entries(records, profile)
    ill_typed = draft_wire_type_entries(records)
    sys.stdout.write(to_toml(entries) + ("\n" if entries and ill_typed else "") + wire_type_toml(ill_typed))
    print(f"{len(entries)} entries for {sum(len(e['cases']) for e in entries)} cases of {len(records)} results"
          + (f"; {len(ill_typed)} ill-typed field(s)" if ill_typed else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
