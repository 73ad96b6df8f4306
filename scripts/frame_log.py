#!/usr/bin/env python3
"""Print the frame log of some cases of a run directory: the evidence behind a declared deviation.

    python scripts/frame_log.py /tmp/rmq core.errors/second-open core.errors/begin-before-open

For each case: its verdict and ``connection_fate``, then one line per frame (milliseconds since the case's
first frame, party, direction, channel, performative, fields; SASL passwords are masked in the records
already). Used to record the probes of docs/probes/. Exit status: 0, or 2 when a case has no frames.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from amqp_conformance.peers.frames import render
from amqp_conformance.reports.records import read_results

FRAMES_FILE = "frames.jsonl"


def case_log(records: list[dict], frames: list[dict], case_id: str) -> str:
    """The text block for one case (its last run in the directory); "" when it has no frames."""
    result = next((r for r in reversed(records) if r["case_id"] == case_id), None)
    run_id = result["run_id"] if result else None
    mine = [f for f in frames if f["case_id"] == case_id and (run_id is None or f["run_id"] == run_id)]
    if not mine:
        return ""
    t0 = mine[0]["t_ns"]
    lines = [f"## {case_id}", ""]
    if result:
        lines += [f"verdict {result['verdict']}; connection_fate: "
                  f"{render(result['observed'].get('connection_fate'))}", ""]
    lines.append("```")
    for frame in mine:
        arrow = "->" if frame["dir"] == "out" else "<-"
        fields = frame.get("fields")
        fields = json.loads(fields) if isinstance(fields, str) else fields
        lines.append(f"{(frame['t_ns'] - t0) / 1e6:9.3f}ms [{frame.get('party') or '?'}] {arrow} "
                     f"ch{frame.get('channel')} {frame['performative']} {render(fields or {})}")
    lines.append("```")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the frame logs of the cases named."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("cases", nargs="+", metavar="CASE")
    args = parser.parse_args(argv)
    records = read_results(args.run_dir)
    path = args.run_dir / FRAMES_FILE
    frames = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.is_file() else []
    missing = []
    for case_id in args.cases:
        block = case_log(records, frames, case_id)
        if not block:
            missing.append(case_id)
        print(block)
    if missing:
        print(f"frame_log: no frames for {', '.join(missing)} in {path}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
