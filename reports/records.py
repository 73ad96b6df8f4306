"""Result records: ``results.jsonl`` (one line a case) and ``frames.jsonl`` (one line a frame).

Lines are appended and flushed as each case ends, so an interrupted run keeps every finished case; a run
writes only into files of its own (an earlier run's move away first: :mod:`.run_dir`).
Nothing here can hold a password: broker URLs are written redacted and SASL frames are masked at
capture (:func:`amqp_conformance.peers.frames.redact_frame`).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from amqp_conformance.peers.frames import Frame, to_jsonable

RESULTS_FILE = "results.jsonl"
FRAMES_FILE = "frames.jsonl"
NOT_APPLICABLE_FILE = "not-applicable.jsonl"
STALE_CLIENT_FILE = "stale-client-deviations.jsonl"


def new_run_id() -> str:
    """A run id that sorts by time: ``20261122T110500Z-1a2b3c4d``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


# The frame fields the results pipeline keys and settles deliveries by: (name in a record's ``key_fields``
# and in the warehouse's frames table, path in the frame's ``fields``, JSON type). reports/pipeline/schema.py
# builds its Spark schemas from this table.
KEY_FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("handle", ("handle",), "long"), ("delivery_id", ("delivery-id",), "long"),
    ("settled", ("settled",), "boolean"), ("role", ("role",), "string"),
    ("first", ("first",), "long"), ("last", ("last",), "long"),
    ("snd_settle_mode", ("snd-settle-mode",), "string"), ("rcv_settle_mode", ("rcv-settle-mode",), "string"),
    ("state", ("state", "@type"), "string"),
)
_JSON_TYPES: dict[str, tuple[type, ...]] = {"long": (int,), "boolean": (bool,), "string": (str,)}
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1


def key_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The :data:`KEY_FIELDS` of a frame's ``fields`` (as :func:`to_jsonable` gives them), flat and named as
    the warehouse names them; a field that is absent, or not of its type (a raw frame may carry anything),
    is left out, so a reader with the typed schema never finds a value it cannot read."""
    found: dict[str, Any] = {}
    for name, path, kind in KEY_FIELDS:
        value: Any = fields
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        if not isinstance(value, _JSON_TYPES[kind]) or (kind == "long" and isinstance(value, bool)):
            continue
        if kind == "long" and not LONG_MIN <= value <= LONG_MAX:
            continue
        found[name] = int(value) if kind == "long" else value  # proton's uint, ulong: int subclasses
    return found


def frame_record(run_id: str, case_id: str, expectation_set: str, seq: int, party: str, frame: Frame) -> dict:
    """The ``frames.jsonl`` record of one captured frame: where it was captured, its performative and
    ``fields``, its bytes, and ``key_fields`` (see :func:`key_fields`; a copy of some of ``fields`` that
    ingest reads typed in the same parse as the line instead of parsing ``fields`` a second time)."""
    fields = to_jsonable(frame.fields)
    return {
        "run_id": run_id, "case_id": case_id, "expectation_set": expectation_set, "seq": seq, "t_ns": frame.t_ns,
        "party": party, "dir": frame.direction, "channel": frame.channel, "performative": frame.performative,
        "fields": fields, "payload_len": frame.payload_len, "raw_hex": frame.raw.hex(),
        "key_fields": key_fields(fields),
    }


class RunRecorder:
    """Writes the records of one run into ``out_dir`` (or only keeps them in memory when it is None)."""

    def __init__(self, out_dir: Path | None, run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.out_dir = out_dir
        self.results: list[dict[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self._results_file: BinaryIO | None = None
        self._frames_file: BinaryIO | None = None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            # unbuffered appends: each case's lines go out in one write(2) on an O_APPEND file, so several
            # processes (pytest-xdist workers) can share the files without interleaving inside a line
            self._results_file = (out_dir / RESULTS_FILE).open("ab", buffering=0)
            self._frames_file = (out_dir / FRAMES_FILE).open("ab", buffering=0)

    def record(self, result: dict[str, Any], frames: list[tuple[str, Frame]]) -> dict[str, Any]:
        """Write one case's result record and its frames; returns the record as written."""
        record = {"run_id": self.run_id, **to_jsonable(result)}
        self.results.append(record)
        self.counts[record["verdict"]] += 1
        if self._results_file is not None and self._frames_file is not None:
            lines = [json.dumps(frame_record(self.run_id, record["case_id"], record["expectation_set"], seq, party,
                                             frame)) + "\n" for seq, (party, frame) in enumerate(frames)]
            _append(self._frames_file, "".join(lines).encode("utf-8"))
            _append(self._results_file, (json.dumps(record) + "\n").encode("utf-8"))
        return record

    def close(self) -> None:
        """Close the files."""
        for handle in (self._results_file, self._frames_file):
            if handle is not None:
                handle.close()


def _append(handle: BinaryIO, data: bytes) -> None:
    """Append ``data`` with as few write(2) calls as the OS allows (one, for a regular local file)."""
    view = memoryview(data)
    while view:
        written = handle.write(view)
        view = view[written or 0:]


def not_applicable_record(run_id: str, case: Any, expectation_set: str, profile: str,
                          claimed: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The ``not-applicable.jsonl`` record of a selected (row, expectation set) that gets no run because the
    profile does not claim the set: the case, its table and sets, the profile and what it claims."""
    return {"run_id": run_id, "case_id": case.id, "table": case.table, "expectation_set": expectation_set,
            "case_expectation_sets": list(case.expectation_sets), "profile": profile, "claimed": list(claimed)}


def write_not_applicable(out_dir: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to ``out_dir/not-applicable.jsonl`` in one write (lines stay whole)."""
    append_json_lines(out_dir / NOT_APPLICABLE_FILE, records)


def append_json_lines(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to the JSON-lines file ``path`` (its folder made when missing) in one write, so
    processes sharing the file never split a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab", buffering=0) as handle:
        _append(handle, "".join(json.dumps(r) + "\n" for r in records).encode("utf-8"))


def read_not_applicable(run_dir: Path) -> list[dict[str, Any]]:
    """The not-applicable records of a run directory, in order ([] when there are none; a line that is not a
    whole record is skipped with a warning, as for the results)."""
    from .run_dir import read_json_lines

    return read_json_lines(run_dir / NOT_APPLICABLE_FILE)


def read_results(run_dir: Path) -> list[dict[str, Any]]:
    """The result records of a run directory, in order; a line that is not a whole record (a killed run's
    last) is skipped with a warning on stderr, never a crash."""
    from .run_dir import read_json_lines

    return read_json_lines(run_dir / RESULTS_FILE)
