"""``run --repeat N``: the same cases N times, and the cases whose verdict is not the same every time.

Each repetition is a pytest session with its own run id (``<run-id>-r1`` ... ``-rN``) writing into the
same run directory, so the records keep every repetition and the Spark pipeline's flaky-case view can be
fed the same data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable


def repeat_run_ids(run_id: str, repeat: int) -> list[str]:
    """The run ids of ``repeat`` repetitions: just ``run_id`` for one, ``<run_id>-r<i>`` for several."""
    return [run_id] if repeat <= 1 else [f"{run_id}-r{i + 1}" for i in range(repeat)]


def comparable_verdict(record: dict) -> str:
    """The verdict to compare across runs: a NON-STRICT from a deviation the profile declares intermittent (a
    race in the broker, seen in some runs only) counts as the PASS of the runs where the race did not happen."""
    return "PASS" if record["verdict"] == "NON-STRICT" and record.get("deviation_intermittent") else record["verdict"]


def verdicts_by_case(results: list[dict], verdict: Callable[[dict], str] = lambda record: record["verdict"]) \
        -> dict[str, dict[str, int]]:
    """For each ``case_id:expectation_set``, how many times each verdict (as ``verdict`` reads it) was recorded."""
    seen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for record in results:
        seen[f"{record['case_id']}:{record['expectation_set']}"][verdict(record)] += 1
    return {case: dict(counts) for case, counts in seen.items()}


def flaky_cases(results: list[dict], run_ids: list[str]) -> dict[str, dict[str, int]]:
    """The cases whose verdict varied across the repetitions (a declared intermittent deviation aside:
    :func:`comparable_verdict`), or that some repetition did not record."""
    ran = [r for r in results if r.get("run_id") in run_ids]
    recorded = verdicts_by_case(ran)
    return {case: recorded[case] for case, counts in verdicts_by_case(ran, comparable_verdict).items()
            if len(counts) > 1 or sum(counts.values()) != len(run_ids)}


def intermittent_cases(results: list[dict], run_ids: list[str]) -> dict[str, dict[str, int]]:
    """The cases where a declared intermittent deviation happened in some of the repetitions, with their counts."""
    ran = [r for r in results if r.get("run_id") in run_ids]
    hit = {f"{r['case_id']}:{r['expectation_set']}" for r in ran if r.get("deviation_intermittent")}
    return {case: counts for case, counts in verdicts_by_case(ran).items() if case in hit}


def report_flaky(results: list[dict], run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Print the repeat summary (and each flaky case with its verdict counts); return the flaky cases."""
    flaky = flaky_cases(results, run_ids)
    cases = len(verdicts_by_case([r for r in results if r.get("run_id") in run_ids]))
    print(f"repeat: {len(run_ids)} runs of {cases} cases, {len(flaky)} flaky")
    for label, cases in (("FLAKY", flaky),
                         ("intermittent (a race the profile declares):", intermittent_cases(results, run_ids))):
        for case, counts in sorted(cases.items()):
            shown = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
            print(f"  {label} {case}: {shown} over {len(run_ids)} runs")
    return flaky
