"""A local Spark Connect server for reports: one driver JVM kept warm between reports.

A report in a fresh JVM pays 10 to 13 s at full size for the JVM compiling Spark's code while the first tasks
run (docs/pipeline.md). A Spark Connect server keeps one driver alive; ``report --master sc://HOST:PORT``
sends it the same DataFrame plans, so every report after the first runs on compiled code. This module
starts such a server from the installed PySpark (its ``spark-submit``), set up the way :mod:`.session` sets up
a local driver: loopback only, the throughput collector, quiet logs, the plan settings of :mod:`.sizing`,
and the fair scheduler with a fair default pool (a Connect client cannot choose a pool, so the report's
small jobs over the results share the cores with its job over the frames in that pool).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .local_fs import local_fs_conf
from .session import LOG4J, driver_java_options
from .sizing import PLAN_CONF

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
DEFAULT_MEMORY = "2g"
HOST = "127.0.0.1"
FAIR_DEFAULT_POOL = """<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


class ConnectServerError(Exception):
    """The server could not start; the message says why and what to do."""


def spark_home() -> Path:
    """Where Spark is: ``SPARK_HOME`` when set, else the installed PySpark package (it ships Spark's jars and
    ``bin/spark-submit``)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def connect_jar_arguments(home: Path) -> list[str]:
    """``spark-submit`` arguments that put Spark Connect on the class path: none when Spark's jars include it
    (PySpark 4), else the ``spark-connect`` package of this PySpark's version from Maven Central (3.5)."""
    if any((home / "jars").glob("spark-connect_*.jar")):
        return []
    import pyspark

    return ["--packages", f"org.apache.spark:spark-connect_2.12:{pyspark.__version__}"]


def _config_file(name: str, text: str) -> Path:
    path = Path(tempfile.gettempdir()) / name
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def server_command(port: int = DEFAULT_PORT, memory: str = DEFAULT_MEMORY, master: str = "local[*]",
                   home: Path | None = None, extra: dict[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``127.0.0.1:port`` with a driver heap of
    ``memory`` on ``master``; its settings are the module's (see the module docstring), plus ``extra``."""
    home = home or spark_home()
    log4j = _config_file("amqp-conformance-log4j2.properties", LOG4J)
    pools = _config_file("amqp-conformance-fair-pools.xml", FAIR_DEFAULT_POOL)
    conf = {"spark.connect.grpc.binding.address": HOST, "spark.connect.grpc.binding.port": str(port),
            "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
            "spark.scheduler.allocation.file": str(pools), **PLAN_CONF}
    if master.startswith("local"):
        conf.update({"spark.driver.bindAddress": HOST, "spark.driver.host": HOST})
    conf.update(extra or {})
    command = [str(home / "bin" / "spark-submit"), "--master", master, "--driver-memory", memory,
               "--driver-java-options", driver_java_options(log4j),
               *connect_jar_arguments(home), "--class", CONNECT_SERVER_CLASS]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that nothing listens on now (the system's choice), for a server of one's own."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_open(port: int, host: str = HOST) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def start_server(port: int = DEFAULT_PORT, memory: str = DEFAULT_MEMORY, master: str = "local[*]",
                 timeout: float = 180.0, log: Path | None = None) -> subprocess.Popen:
    """Start a Connect server (see :func:`server_command`) and return once it accepts connections on
    ``127.0.0.1:port``; its output goes to ``log`` (default: inherited). Raises :class:`ConnectServerError`
    when the port is taken, or the server exits or does not listen within ``timeout`` seconds (it is then
    stopped, and the error names the log's tail). A local server writes local files without a ``chmod``
    process per file (:mod:`.local_fs`)."""
    if port_open(port):
        raise ConnectServerError(f"127.0.0.1:{port} is already in use; choose another port with --port, or give "
                                 f"the server already there to report with --master sc://127.0.0.1:{port}")
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": str(home)}
    extra = local_fs_conf() if master.startswith("local") else {}
    sink = log.open("ab") if log else None
    try:
        process = subprocess.Popen(server_command(port, memory, master, home, extra), env=env, stdout=sink,
                                   stderr=subprocess.STDOUT if sink else None)
    finally:
        if sink:
            sink.close()
    deadline = time.monotonic() + timeout
    try:
        while not port_open(port):
            if process.poll() is not None or time.monotonic() > deadline:
                stop_server(process)
                tail = "" if log is None else log.read_text(errors="replace")[-2000:]
                why = (f"exited with status {process.returncode}" if process.returncode
                       else f"did not listen in {timeout:.0f} s")
                end = f"; the end of its log ({log}):\n{tail}" if tail else ""
                raise ConnectServerError(f"the Spark Connect server {why}{end}")
            time.sleep(0.5)
    except KeyboardInterrupt:  # interrupted (Ctrl-C, or a kill the caller turned into one) while it starts
        stop_server(process)
        raise
    return process


def stop_server(process: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop a server :func:`start_server` started: terminate, then kill after ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
