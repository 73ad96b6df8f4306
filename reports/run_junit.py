"""JUnit XML of one run, straight from its result records (``run --junit FILE``): no Spark, no Java.

The same shape as the compliance matrix's ``junit.xml`` (:func:`amqp_conformance.reports.matrix.render_junit`,
which this reuses): a testsuite per broker and version, a testcase per case run named ``case id [set]`` with
classname ``broker.table``; FAIL is a ``<failure>``, ERROR an ``<error>``, NON-STRICT and UNSUPPORTED are
``<skipped>`` with the verdict in the message; every testcase carries its verdict as a property.
"""

from __future__ import annotations

from typing import Any

from .matrix import MatrixReport, render_junit


def run_junit(records: list[dict[str, Any]]) -> str:
    """The JUnit XML document of ``records`` (``results.jsonl`` lines): one testcase per record, with its
    verdict's kind and its whole reason."""
    cells = [{"broker": (r.get("broker") or {}).get("name", "unknown"),
              "broker_version": (r.get("broker") or {}).get("version") or "unknown",
              "table": r.get("table") or r["case_id"].split("/", 1)[0], "case_id": r["case_id"],
              "expectation_set": r["expectation_set"], "verdict": r["verdict"], "reason": r.get("reason") or ""}
             for r in records]
    return render_junit(MatrixReport(cells=cells))
