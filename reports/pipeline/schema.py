"""Explicit Spark schemas of the result records, as :mod:`amqp_conformance.reports.records` writes them.

``results.jsonl``: one object a case run; ``frames.jsonl``: one object a captured frame. Values whose
shape varies (``expected``, ``observed``, a frame's ``fields``) are kept as their JSON text; the frame
fields the pipeline computes with come typed from the record's ``key_fields`` (in :data:`FRAME_LINE`, built
from :data:`~amqp_conformance.reports.records.KEY_FIELDS`), or, for records written before those, from
``fields`` parsed once more with :data:`FRAME_FIELDS`.
"""

from __future__ import annotations

from amqp_conformance.reports.records import KEY_FIELDS
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

CORRUPT = "_corrupt_record"


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


_SPARK_TYPES: dict[str, DataType] = {"long": LongType(), "boolean": BooleanType(), "string": StringType()}


def _nested(paths: list[tuple[tuple[str, ...], DataType]]) -> StructType:
    """A struct holding each path (``("state", "@type")`` is field ``@type`` of struct field ``state``)."""
    fields: dict[str, object] = {}
    for path, kind in paths:
        if len(path) == 1:
            fields[path[0]] = kind
        else:
            fields.setdefault(path[0], []).append((path[1:], kind))
    return _struct(*[(name, _nested(kind) if isinstance(kind, list) else kind) for name, kind in fields.items()])


# One line of results.jsonl (reports/records.py RunRecorder.record; fields from fixtures/execution.py).
RESULT_LINE = _struct(
    ("run_id", StringType()), ("case_id", StringType()), ("table", StringType()),
    ("source", _struct(("document", StringType()), ("heading", StringType()), ("row", StringType()))),
    ("broker", _struct(("name", StringType()), ("version", StringType()), ("launcher", StringType()),
                       ("url", StringType()))),
    ("expectation_set", StringType()), ("verdict", StringType()),
    ("expected", StringType()), ("observed", StringType()), ("reason", StringType()),
    ("mismatches", ArrayType(StringType())), ("info", ArrayType(StringType())),
    ("stale_deviation", BooleanType()), ("deviation_intermittent", BooleanType()), ("duration_ms", DoubleType()),
    ("started_at", StringType()), (CORRUPT, StringType()),
)
RESULT_REQUIRED = ("run_id", "case_id", "expectation_set", "verdict")

# One line of frames.jsonl (reports/records.py frame_record).
FRAME_LINE = _struct(
    ("run_id", StringType()), ("case_id", StringType()), ("expectation_set", StringType()),
    ("seq", LongType()), ("t_ns", LongType()), ("party", StringType()), ("dir", StringType()),
    ("channel", LongType()), ("performative", StringType()), ("fields", StringType()),
    ("payload_len", LongType()), ("raw_hex", StringType()),
    ("key_fields", _struct(*[(name, _SPARK_TYPES[kind]) for name, _, kind in KEY_FIELDS])),
    (CORRUPT, StringType()),
)
FRAME_REQUIRED = ("run_id", "case_id", "expectation_set", "seq", "t_ns", "dir", "performative")

# The key fields as they sit in a frame's ``fields`` (names as peers/amqp_types.py spells them), for records
# without ``key_fields``.
FRAME_FIELDS = _nested([(path, _SPARK_TYPES[kind]) for _, path, kind in KEY_FIELDS])

# The warehouse tables (Parquet, partitioned by broker, run_date, run_id).
PARTITIONS = ("broker", "run_date", "run_id")

RESULTS_TABLE = _struct(
    ("run_id", StringType()), ("case_id", StringType()), ("table", StringType()),
    ("source_document", StringType()), ("source_heading", StringType()), ("source_row", StringType()),
    ("broker", StringType()), ("broker_version", StringType()), ("broker_launcher", StringType()),
    ("broker_url", StringType()), ("expectation_set", StringType()), ("verdict", StringType()),
    ("expected", StringType()), ("observed", StringType()), ("reason", StringType()),
    ("mismatches", ArrayType(StringType())), ("stale_deviation", BooleanType()),
    # a NON-STRICT from a deviation the profile declares intermittent; null in warehouses written before it
    ("deviation_intermittent", BooleanType()), ("duration_ms", DoubleType()), ("started_at", TimestampType()),
    ("run_started", TimestampType()), ("run_date", DateType()),
)

FRAMES_TABLE = _struct(
    ("run_id", StringType()), ("case_id", StringType()), ("expectation_set", StringType()),
    ("broker", StringType()), ("broker_version", StringType()), ("run_date", DateType()),
    ("seq", LongType()), ("t_ns", LongType()), ("party", StringType()), ("dir", StringType()),
    ("channel", LongType()), ("performative", StringType()), ("fields", StringType()),
    ("payload_len", LongType()), ("raw_hex", StringType()),
    *[(name, _SPARK_TYPES[kind]) for name, _, kind in KEY_FIELDS],
)
