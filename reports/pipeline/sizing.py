"""Sizing a local Spark to the machine and the data: shuffle partitions and the driver's heap.

In ``local[*]`` the driver JVM is all of Spark: its heap holds every task's working memory, and each
shuffle runs one task per partition on the machine's cores. Spark's defaults (200 shuffle partitions, the
heap the caller happened to give) fit neither a laptop nor a report of a few runs; these functions derive
both from the number of cores and the bytes the job reads, so a larger warehouse gets more of each.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

MIB = 1024 * 1024
# input bytes per shuffle partition beyond the cores' own: compressed Parquet (or JSON text) grows some
# tenfold or more as rows in memory, so a partition of 8 MiB read sorts and aggregates within a small heap
PARTITION_BYTES = 8 * MIB
MIN_HEAP_MIB = 1024              # the JVM's own needs plus Spark's reserved 300 MiB and room to work
HEAP_MIB_PER_INPUT_GIB = 256     # more heap per GiB read (aggregation buffers and sort pages grow with it)
MAX_HEAP_SHARE = 0.25            # never more than this share of the machine's memory
# Plan settings for a local driver whose partitions are sized here. Adaptive execution coalesces small
# shuffle partitions, but by default it aims at parallelism alone and packed the per-delivery aggregation of
# 12 M frames into three tasks that spilled 450 MiB (compressed shuffle bytes are a tenth of the rows in
# memory), one core idle at the end; aiming at 4 MiB of shuffle a partition keeps that one near ten tasks and
# still gives the many small stages over the results one task each (ten tasks each cost more time than they
# ran). And a task keeps the latency percentiles' value counts in a hash table for this many groups before
# falling back to sorting its rows: Spark's default, 128, sent every report with a few hundred latency
# groups to a sort that spilled; the value counts of a task's share of the deliveries fit the heap.
PLAN_CONF = {"spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
             "spark.sql.adaptive.advisoryPartitionSizeInBytes": "4m",
             "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "4096",
             "spark.scheduler.mode": "FAIR"}


def input_bytes(paths: Iterable[str]) -> int | None:
    """Total size in bytes of the local files and directories in ``paths`` (recursively); None when a path
    is a remote URI (``hdfs://``, ``s3a://``) or missing, since its size is not known here."""
    total = 0
    for path in paths:
        if "://" in path and not path.startswith("file:"):
            return None
        local = Path(path.removeprefix("file:"))
        if not local.exists():
            return None
        if local.is_file():
            total += local.stat().st_size
            continue
        for root, _, files in os.walk(local):
            total += sum((Path(root) / name).stat().st_size for name in files)
    return total


def shuffle_partitions(cores: int, data_bytes: int | None) -> int:
    """Shuffle partitions for ``cores`` local cores reading ``data_bytes``: two tasks a core (so a slow task
    does not leave a core idle) and one more per :data:`PARTITION_BYTES` of input; at least 2."""
    per_data = 0 if data_bytes is None else data_bytes // PARTITION_BYTES
    return max(2, 2 * cores, int(per_data))


def driver_heap_mib(data_bytes: int | None, physical_bytes: int | None = None) -> int:
    """The local driver's heap in MiB for a job reading ``data_bytes``: :data:`MIN_HEAP_MIB` plus
    :data:`HEAP_MIB_PER_INPUT_GIB` per GiB read, capped at :data:`MAX_HEAP_SHARE` of ``physical_bytes``
    (the machine's memory; the cap never goes below the minimum)."""
    heap = MIN_HEAP_MIB + (0 if data_bytes is None else data_bytes * HEAP_MIB_PER_INPUT_GIB // (1024 * MIB))
    if physical_bytes:
        heap = min(heap, max(MIN_HEAP_MIB, int(physical_bytes * MAX_HEAP_SHARE) // MIB))
    return int(heap)


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def local_conf(data_bytes: int | None, cores: int | None = None) -> dict[str, str]:
    """Spark settings for a local driver reading ``data_bytes``: ``spark.driver.memory`` (see
    :func:`driver_heap_mib`), ``spark.sql.shuffle.partitions`` (see :func:`shuffle_partitions`) and
    :data:`PLAN_CONF` (coalesce shuffle partitions towards 4 MiB each; percentile's counts hashed). The heap
    only takes effect when the JVM has not started yet."""
    cores = cores or os.cpu_count() or 1
    return {"spark.driver.memory": f"{driver_heap_mib(data_bytes, physical_memory())}m",
            "spark.sql.shuffle.partitions": str(shuffle_partitions(cores, data_bytes)), **PLAN_CONF}
