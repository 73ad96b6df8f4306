"""Compare the outputs of two ``amqp-conformance report`` directories, file by file.

    python scripts/compare_reports.py BEFORE_DIR AFTER_DIR

The JSON outputs are compared as data (``generated_at`` left out, rows in any order), ``compliance.csv``
line by line, ``junit.xml`` and ``compliance.html`` as text with the generation time masked. Prints one
line a file (``same`` or what differs) and exits 1 when any differs: a check that a change of the
pipeline's plan kept its outputs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

JSON_FILES = ("compliance.json", "regressions.json", "flaky.json", "latency.json", "stale-deviations.json",
              "malformed.json")
TEXT_FILES = ("compliance.csv", "junit.xml", "compliance.html")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")


def canonical(value: Any) -> Any:
    """``value`` with lists of rows sorted (by their JSON text) and ``generated_at`` dropped."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items() if k != "generated_at"}
    if isinstance(value, list):
        items = [canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


def differences(before: Path, after: Path) -> dict[str, str]:
    """File name -> ``same`` or a short description of the first difference."""
    found = {}
    for name in JSON_FILES:
        a, b = before / name, after / name
        if not a.exists() and not b.exists():
            continue
        if not (a.exists() and b.exists()):
            found[name] = "present in one only"
            continue
        x, y = canonical(json.loads(a.read_text())), canonical(json.loads(b.read_text()))
        found[name] = "same" if x == y else f"differs ({_first_difference(x, y)})"
    for name in TEXT_FILES:
        x, y = (sorted(STAMP.sub("<time>", p.read_text()).splitlines()) for p in (before / name, after / name))
        found[name] = "same" if x == y else f"differs ({len(set(x) ^ set(y))} lines)"
    return found


def _first_difference(x: Any, y: Any, path: str = "") -> str:
    if isinstance(x, dict) and isinstance(y, dict):
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                return _first_difference(x.get(key), y.get(key), f"{path}.{key}")
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return f"{path}: {len(x)} vs {len(y)} rows"
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path}: {str(x)[:80]} vs {str(y)[:80]}"


def main() -> int:
    """Print one line a report file; exit 1 when one differs."""
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    found = differences(Path(sys.argv[1]), Path(sys.argv[2]))
    for name, verdict in found.items():
        print(f"{name:<24} {verdict}")
    return 0 if all(v == "same" for v in found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
