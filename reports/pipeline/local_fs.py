"""Hadoop's local file system without a ``chmod`` process per file, for a driver JVM this suite starts.

Without Hadoop's native library (PySpark ships none), Hadoop sets the permissions of every file and folder it
creates on ``file:`` by starting a ``chmod`` process. A partitioned Parquet write makes several folders and
files per partition, so ingesting 300 runs started some 3,500 processes, and the write jobs spent about half
their task time waiting for them (docs/pipeline.md). The Maven project in ``local-fs/`` holds one class,
Hadoop's ``LocalFileSystem`` whose raw layer sets permissions through ``java.nio`` instead; everything else is
Hadoop's own, checksum files included. It is built once with the ordinary Maven client into the suite's
cache folder (:mod:`amqp_conformance.fixtures.maven_build`), and named by ``spark.hadoop.fs.file.impl`` with
its jar on the driver's class path.

This only makes writes faster: where the jar cannot be built (no Java or Maven, no network the first time),
:func:`local_fs_conf` says so in one line and Spark keeps Hadoop's own local file system.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from amqp_conformance.fixtures.maven_build import MavenBuild, availability, ensure_built
from amqp_conformance.fixtures.usage import UsageProblem
from amqp_conformance.peers.toolchain import say

FS_CLASS = "org.amqpconformance.localfs.ChmodlessLocalFileSystem"
FS_KEY = "spark.hadoop.fs.file.impl"
CLASS_PATH_KEY = "spark.driver.extraClassPath"
CHMODLESS_FS = MavenBuild(
    name="chmodless-local-fs", title="the chmod-less local file system for Hadoop",
    project=Path(__file__).parent / "local-fs", version_property="hadoop.version", main_class=FS_CLASS)
COST = "writes start a chmod process per file and folder, which makes ingest slower"


def jar_of(home: Path) -> Path:
    """The jar of a built :data:`CHMODLESS_FS` home (its ``lib/`` holds that jar alone)."""
    return sorted((home / "lib").glob("*.jar"))[0]


def local_fs_conf(progress: Callable[[str], None] = say, root: Path | None = None) -> dict[str, str]:
    """Spark settings for a driver JVM not started yet that make its ``file:`` writes start no process:
    :data:`FS_KEY` naming :data:`FS_CLASS`, and the class's jar on the driver's class path. Builds the jar
    first when needed (once, into the cache folder ``root``, default the suite's). Returns ``{}`` when it
    cannot, after telling ``progress`` why and what that costs: Spark then keeps Hadoop's own local file system."""
    usable, reason = availability(CHMODLESS_FS, root)
    if not usable:
        progress(f"note: {reason}; {COST}")
        return {}
    try:
        home = ensure_built(CHMODLESS_FS, root, progress)
    except UsageProblem as exc:
        progress(f"note: {exc}; {COST}")
        return {}
    return {FS_KEY: FS_CLASS, CLASS_PATH_KEY: str(jar_of(home))}
