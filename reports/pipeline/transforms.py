"""Transforms: pure functions DataFrame -> DataFrame over the warehouse tables (no I/O, no actions).

Inputs are the ``results`` and ``frames`` tables of :mod:`.schema` (``RESULTS_TABLE``, ``FRAMES_TABLE``).
Verdict order, worst last: PASS = INFO < NON-STRICT = UNSUPPORTED < ERROR < FAIL; *compliant* means PASS
or INFO, and a broker's "% compliant" counts the cases it ran (UNSUPPORTED ones are left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from amqp_conformance.fixtures.verdict import VERDICT_NAMES as VERDICTS
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

VERDICT_RANK = {"PASS": 0, "INFO": 0, "NON-STRICT": 1, "UNSUPPORTED": 1, "ERROR": 2, "FAIL": 3}
COMPLIANT = ("PASS", "INFO")
CASE_KEY = ("case_id", "expectation_set")
LATENCY_BY = ("broker", "settle_mode", "family")
PERCENTILES = (0.5, 0.95, 0.99)

MATRIX_COLUMNS = ("broker", "broker_version", "table", "case_id", "source_document", "source_heading",
                  "source_row", "expectation_set", "verdict", "reason", "stale_deviation", "deviation_intermittent",
                  "run_id", "run_started")


def verdict_rank(verdict: Column) -> Column:
    """How bad a verdict is (:data:`VERDICT_RANK`); an unknown verdict ranks with FAIL."""
    ranks = F.create_map(*chain.from_iterable((F.lit(k), F.lit(v)) for k, v in VERDICT_RANK.items()))
    return F.coalesce(ranks[verdict], F.lit(max(VERDICT_RANK.values())))


def version_key(column: str) -> Column:
    """A sort key for version strings: their numbers as an array (``1.10.2`` after ``1.9``)."""
    return F.expr(f"transform(filter(split(regexp_replace(`{column}`, '[^0-9]+', '.'), '[.]'), x -> x != ''), "
                  f"x -> try_cast(x AS BIGINT))")


def compliance_matrix(results: DataFrame) -> DataFrame:
    """One row per broker, broker version, case and expectation set: the verdict of the latest run of that
    broker and version that ran the case (latest by run start, then run id). Columns: :data:`MATRIX_COLUMNS`."""
    latest = Window.partitionBy("broker", "broker_version", *CASE_KEY).orderBy(
        F.desc("run_started"), F.desc("run_id"))
    return (results.withColumn("_n", F.row_number().over(latest)).filter(F.col("_n") == 1)
            .select(*MATRIX_COLUMNS))


def _verdict_counts(matrix: DataFrame, keys: Sequence[str]) -> DataFrame:
    counts = [F.count(F.when(F.col("verdict") == v, 1)).alias(v.lower().replace("-", "_")) for v in VERDICTS]
    compliant = F.count(F.when(F.col("verdict").isin(*COMPLIANT), 1))
    judged = F.count(F.when(F.col("verdict") != "UNSUPPORTED", 1))
    pct = F.when(judged > 0, F.round(compliant * 100.0 / judged, 1))
    return matrix.groupBy(*keys).agg(F.count(F.lit(1)).alias("cases"), *counts, pct.alias("compliant_pct"))


def compliance_summary(matrix: DataFrame) -> DataFrame:
    """Per broker, version and expectation set: ``cases``, a count per verdict (``pass``, ``fail``,
    ``non_strict``, ``unsupported``, ``error``, ``info``) and ``compliant_pct`` (null when nothing ran)."""
    return _verdict_counts(matrix, ("broker", "broker_version", "expectation_set"))


def compliance_by_table(matrix: DataFrame) -> DataFrame:
    """As :func:`compliance_summary`, per broker, version, table and expectation set."""
    return _verdict_counts(matrix, ("broker", "broker_version", "table", "expectation_set"))


def compliance_over_versions(matrix: DataFrame) -> DataFrame:
    """Per broker and version: ``compliant_pct`` over all its cases and sets, with ``version_order`` (1, 2, ...
    in version order per broker) for plotting compliance across versions."""
    summary = _verdict_counts(matrix, ("broker", "broker_version")).withColumn("_key", version_key("broker_version"))
    order = Window.partitionBy("broker").orderBy("_key", "broker_version")
    return (summary.withColumn("version_order", F.row_number().over(order))
            .select("broker", "broker_version", "version_order", "cases", "compliant_pct"))


REGRESSION_COLUMNS = ("broker", "kind", "case_id", "table", "expectation_set", "from_version", "to_version",
                      "from_run_id", "to_run_id", "from_verdict", "to_verdict", "reason")


def comparable_verdict() -> Column:
    """A result's verdict as runs are compared (``conformance/repeat.py`` ``comparable_verdict``, the same
    rule): a NON-STRICT from a deviation the profile declares intermittent (a race in the broker, seen in some
    runs only) reads as the PASS of the runs where the race did not happen."""
    intermittent = F.coalesce(F.col("deviation_intermittent"), F.lit(False))
    return F.when((F.col("verdict") == "NON-STRICT") & intermittent, F.lit("PASS")).otherwise(F.col("verdict"))


def _worse_than_previous(df: DataFrame, partition: Sequence[str], order: Sequence[Column | str],
                         kind: str) -> DataFrame:
    window = Window.partitionBy(*partition).orderBy(*order)
    df = df.withColumn("_comparable", comparable_verdict())
    previous = {name: F.lag(name).over(window) for name in ("verdict", "_comparable", "run_id", "broker_version")}
    stepped = df.select("*", *[col.alias(f"_prev_{name}") for name, col in previous.items()])
    worse = stepped.filter(F.col("_prev_verdict").isNotNull()
                           & (verdict_rank(F.col("_comparable")) > verdict_rank(F.col("_prev__comparable"))))
    return worse.select(
        "broker", F.lit(kind).alias("kind"), "case_id", "table", "expectation_set",
        F.col("_prev_broker_version").alias("from_version"), F.col("broker_version").alias("to_version"),
        F.col("_prev_run_id").alias("from_run_id"), F.col("run_id").alias("to_run_id"),
        F.col("_prev_verdict").alias("from_verdict"), F.col("verdict").alias("to_verdict"), "reason")


def regressions(results: DataFrame) -> DataFrame:
    """Cases whose verdict got worse (:func:`verdict_rank` of :func:`comparable_verdict`: a declared
    intermittent deviation coming and going is no regression) from one step to the next of a broker.

    Two kinds: ``run`` compares consecutive runs (by start) of the same broker and version; ``version``
    compares the latest verdicts (:func:`compliance_matrix`) of consecutive versions in version order.
    Columns: :data:`REGRESSION_COLUMNS`.
    """
    runs = _worse_than_previous(results, ("broker", "broker_version", *CASE_KEY), ("run_started", "run_id"), "run")
    latest = compliance_matrix(results).withColumn("_key", version_key("broker_version"))
    versions = _worse_than_previous(latest, ("broker", *CASE_KEY), ("_key", "broker_version"), "version")
    return runs.unionByName(versions)


def flaky_cases(results: DataFrame) -> DataFrame:
    """Cases with more than one verdict across the runs of the same broker, version and expectation set, the
    verdicts compared as :func:`comparable_verdict` reads them (a declared intermittent deviation is not
    flaky, as ``run --repeat`` judges it): ``runs``, the verdicts as recorded, ``verdicts`` (sorted) and
    ``verdict_counts`` (verdict -> runs)."""
    keys = ("broker", "broker_version", "case_id", "table", "expectation_set")
    per_verdict = (results.select(*keys, "verdict", comparable_verdict().alias("_c"))
                   .groupBy(*keys, "verdict").agg(F.count(F.lit(1)).alias("n"), F.collect_set("_c").alias("_c")))
    grouped = per_verdict.groupBy(*keys).agg(
        F.sum("n").alias("runs"), F.sort_array(F.collect_list("verdict")).alias("verdicts"),
        F.map_from_entries(F.sort_array(F.collect_list(F.struct("verdict", "n")))).alias("verdict_counts"),
        F.array_distinct(F.flatten(F.collect_list("_c"))).alias("_c"))
    return grouped.filter(F.size("_c") > 1).drop("_c").withColumn("runs", F.col("runs").cast("long"))


def stale_deviations(matrix: DataFrame) -> DataFrame:
    """Declared deviations that no longer occur: latest verdicts (:func:`compliance_matrix`) whose record says
    ``stale_deviation`` (the profile declares a deviation but the case passes now)."""
    return (matrix.filter(F.col("stale_deviation"))
            .select("broker", "broker_version", "case_id", "table", "expectation_set", "verdict", "run_id", "reason"))


SESSION = ("run_id", "case_id", "expectation_set", "party")
SESSION_KEY = ("broker", "broker_version", *SESSION)  # a session's strings; the deliveries hash them to _sid


LINK_SEQ_BITS = 31  # a frame's seq and its link's attach seq are packed into one long below 2**31 each


def _spans(marks: DataFrame, keys: Sequence[str], low: str, high: str) -> DataFrame:
    """``marks`` (with ``seq``) with, per ``keys``, ``_k`` (1, 2, ... in seq order), ``low`` (its seq) and
    ``high`` (the next mark's seq, null for the last): the frames with ``low < seq <= high`` follow mark
    ``_k`` and precede the next. For small tables (a session's opens or attaches)."""
    order = Window.partitionBy(*keys).orderBy("seq")
    return (marks.select("*", F.row_number().over(order).alias("_k"), F.lead("seq").over(order).alias(high))
            .withColumnRenamed("seq", low))


def _after(frame: str, span: str, low: str, high: str) -> list[Column]:
    """Join conditions: the ``frame``'s seq lies in the span's ``(low, high]`` (``high`` null: no end)."""
    seq = F.col(f"{frame}.seq")
    return [seq > F.col(f"{span}.{low}"), F.col(f"{span}.{high}").isNull() | (seq <= F.col(f"{span}.{high}"))]


def deliveries(frames: DataFrame) -> DataFrame:
    """One row per delivery seen in the frame records, with its settlement.

    A delivery is keyed by its session (run, case, set, party, connection, channel), the direction whose
    delivery-id space it belongs to, and its delivery-id; a connection starts at each ``open`` the peer
    sends. Its transfer time is that of its first transfer frame; it is *settled* at the first disposition
    with ``settled=true`` whose range covers it (``role=receiver`` from the other side, or ``role=sender``
    from the sending side). ``settle_mode`` is ``<snd-settle-mode>/<rcv-settle-mode>`` of the latest attach
    of its link (same direction, channel and handle as its first transfer, sent before it); ``family`` is
    the case's table.
    Columns: broker, broker_version, run_id, case_id, expectation_set, family, party, settle_mode,
    presettled, transfer_t_ns, settled_t_ns, latency_ms (null when no disposition settled it).

    Plan (numbers, not strings, on the hot path; no window over the frames): a session is its strings
    (broker, version, run, case, set, party) hashed to a 64-bit ``_sid``. One narrow pass collects the
    small table of every session with its strings, its opens and its attaches (a few rows a session; cached,
    the one thing this function caches, and left cached for the session's life). A frame's connection
    number and a transfer's link are then looked up in broadcast tables of spans (``open k`` covers the
    frames after it up to the next open), so the frames are read once more, joined to those by number, and
    aggregated per delivery on numeric keys alone (hash aggregation, one shuffle of numbers). The strings
    come back at the end from the session table. Two sessions whose strings hash alike would share a
    ``_sid``: the session table checks that no ``_sid`` has two sessions and fails the job if one does
    (``raise_error``), so a collision stops the report rather than mixing deliveries.
    """
    is_open = (F.col("performative") == "open") & (F.col("dir") == "out")
    is_attach = F.col("performative") == "attach"
    is_transfer = (F.col("performative") == "transfer") & F.col("delivery_id").isNotNull()
    is_settling = (F.col("performative") == "disposition") & F.coalesce(F.col("settled"), F.lit(False)) \
        & F.col("first").isNotNull()
    sid = F.xxhash64(*SESSION_KEY).alias("_sid")
    marked = is_open | is_attach
    # every session that has a transfer, with its opens and attaches: a few rows a session (transfers collapse)
    marks = (frames.filter(marked | is_transfer)
             .select(sid, *SESSION_KEY, F.when(is_open, "open").when(is_attach, "attach").alias("kind"),
                     *[F.when(marked, F.col(name)).alias(name)
                       for name in ("seq", "dir", "channel", "handle", "snd_settle_mode", "rcv_settle_mode")])
             # cached (read four ways below, the frames scanned once) and partitioned by _sid, so the windows
             # and the distinct below, all keyed by _sid first, need no shuffle of their own
             .distinct().repartition("_sid").cache())
    per_sid = F.count(F.lit(1)).over(Window.partitionBy("_sid"))
    sessions = (marks.select("_sid", *SESSION_KEY).distinct().withColumn("_n", per_sid)
                .filter(F.when(F.col("_n") > 1, F.raise_error(F.lit("two sessions hash to one _sid: their "
                                                                   "deliveries cannot be told apart")))
                        .otherwise(F.lit(True)))
                .drop("_n"))
    opens = _spans(marks.filter(F.col("kind") == "open").select("_sid", "seq"), ["_sid"], "_lo", "_hi")
    link_key = ("_sid", "dir", "channel", "handle")
    links = _spans(marks.filter(F.col("kind") == "attach").select(*link_key, "seq"), link_key, "_lo", "_hi")
    attaches = marks.filter(F.col("kind") == "attach").select(
        "_sid", F.col("seq").alias("_link"), "snd_settle_mode", "rcv_settle_mode")

    other = F.when(F.col("dir") == "in", "out").otherwise("in")
    relevant = frames.filter(is_transfer | is_settling).select(
        sid, "seq", "t_ns", "dir", "channel", "handle", "settled", is_transfer.alias("_transfer"),
        (F.when(is_transfer, F.col("dir")).when(F.col("role") == "sender", F.col("dir")).otherwise(other) == "out")
        .alias("_out"),
        F.when(is_transfer, F.array("delivery_id"))
        .when(F.coalesce("last", "first") >= F.col("first"), F.sequence("first", F.coalesce("last", "first")))
        .otherwise(F.array("first")).alias("ids"))
    with_conn = (relevant.alias("f")
                 .join(F.broadcast(opens).alias("o"), [F.col("f._sid") == F.col("o._sid"),
                                                       *_after("f", "o", "_lo", "_hi")], "left")
                 .select("f.*", F.coalesce(F.col("o._k"), F.lit(0)).alias("conn")))
    on_link = [F.col("f._transfer"), *[F.col(f"f.{c}") == F.col(f"a.{c}") for c in link_key],
               *_after("f", "a", "_lo", "_hi")]
    linked = (with_conn.alias("f").join(F.broadcast(links).alias("a"), on_link, "left")
              .select("f.*", F.col("a._lo").alias("_link")))
    shift = F.lit(1 << LINK_SEQ_BITS)
    first_transfer = F.min(F.when(F.col("_transfer"), F.col("seq") * shift + F.coalesce(F.col("_link") + 1, F.lit(0))))
    per_delivery = (linked.select("*", F.explode("ids").alias("delivery_id"))
                    .groupBy("_sid", "conn", "channel", "_out", "delivery_id")
                    .agg(F.min(F.when(F.col("_transfer"), F.col("t_ns"))).alias("transfer_t_ns"),
                         first_transfer.alias("_first"),
                         F.max(F.when(F.col("_transfer"), F.coalesce("settled", F.lit(False)))).alias("presettled"),
                         F.min(F.when(~F.col("_transfer"), F.col("t_ns"))).alias("disposition_t_ns"))
                    .filter(F.col("transfer_t_ns").isNotNull())
                    .select("_sid", "transfer_t_ns", "presettled", "disposition_t_ns",
                            (F.col("_first") % shift - 1).alias("_link")))
    settled_t = F.when(F.col("disposition_t_ns") >= F.col("transfer_t_ns"), F.col("disposition_t_ns"))
    return (per_delivery.join(F.broadcast(attaches), ["_sid", "_link"], "left")
            .join(F.broadcast(sessions), "_sid")
            .select("broker", "broker_version", "run_id", "case_id", "expectation_set",
                    F.substring_index("case_id", "/", 1).alias("family"), "party",
                    F.coalesce(F.concat_ws("/", "snd_settle_mode", "rcv_settle_mode"), F.lit("unknown"))
                    .alias("settle_mode"),
                    "presettled", "transfer_t_ns", settled_t.alias("settled_t_ns"),
                    ((settled_t - F.col("transfer_t_ns")) / 1e6).alias("latency_ms")))


def settlement_latency(delivered: DataFrame, by: Sequence[str] = LATENCY_BY) -> DataFrame:
    """Settlement latency percentiles of :func:`deliveries` per ``by`` (default broker, settle mode and case
    family): ``deliveries``, ``settled`` (those a disposition settled), exact ``p50_ms``, ``p95_ms``,
    ``p99_ms`` (linear interpolation) and ``max_ms``, rounded to microseconds."""
    pct = F.percentile(F.col("latency_ms"), list(PERCENTILES))
    grouped = delivered.groupBy(*by).agg(
        F.count(F.lit(1)).alias("deliveries"), F.count("latency_ms").alias("settled"), pct.alias("_p"),
        F.max("latency_ms").alias("_max"))
    names = [f"p{round(p * 100)}_ms" for p in PERCENTILES]
    return grouped.select(*by, "deliveries", "settled",
                          *[F.round(F.col("_p")[i], 3).alias(n) for i, n in enumerate(names)],
                          F.round("_max", 3).alias("max_ms"))
