"""Exit 1 unless two run directories hold the same verdict for every (case, expectation set) they ran.

    python scripts/same_verdicts.py RUN_A RUN_B

Used by CI to check that ``run -n N`` gives the verdicts of a serial run; prints each difference with the
second run's reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

from amqp_conformance.conformance.repeat import comparable_verdict
from amqp_conformance.reports.records import read_results


def verdicts(run_dir: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(case id, expectation set) -> (verdict, reason) of the run's last run id in ``run_dir``; a declared
    intermittent deviation's NON-STRICT reads as PASS (:func:`comparable_verdict`)."""
    rows = read_results(run_dir)
    last = rows[-1]["run_id"] if rows else None
    return {(r["case_id"], r["expectation_set"]): (comparable_verdict(r), r.get("reason") or "")
            for r in rows if r["run_id"] == last}


def main(argv: list[str]) -> int:
    """Compare the two runs; 0 when every case has the same verdict in both, 1 otherwise, 2 on bad usage."""
    if len(argv) != 2:
        print("usage: python scripts/same_verdicts.py RUN_A RUN_B", file=sys.stderr)
        return 2
    first, second = (verdicts(Path(a)) for a in argv)
    if not first:
        print(f"same_verdicts: {argv[0]} holds no results", file=sys.stderr)
        return 1
    differences = [(key, first.get(key, ("absent", "")), second.get(key, ("absent", "")))
                   for key in sorted(set(first) | set(second)) if first.get(key, ("absent",))[0] !=
                   second.get(key, ("absent",))[0]]
    for (case_id, expectation_set), (a, _), (b, why) in differences:
        print(f"{case_id} [{expectation_set}]: {a} -> {b} {why[:300]}")
    print(f"same_verdicts: {len(first)} case runs, {len(differences)} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
