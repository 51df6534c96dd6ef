"""One quiet SparkSession per analysis.

Quiet because the console belongs to kchaos: log level ERROR from the first
line (a log4j2 file shipped with the package, not setLogLevel after startup),
no progress bar, no UI. Small because the harness host is small: local[2],
4 shuffle partitions, modest driver memory, all overridable.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator

LOG4J2 = Path(__file__).with_name("log4j2.properties")

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    # No AQE: the plans are few and fixed, and re-planning each stage costs
    # more than it saves (most on the tiny histories of tests).
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": str(32 * 1024 * 1024),
    # bigger Arrow batches to the per-partition pass: ~30% less transfer overhead
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2}",
}


def _ensure_java() -> None:
    """PySpark 4 needs Java 17 or 21; point JAVA_HOME at one if it is unset."""
    if os.environ.get("JAVA_HOME"):
        return
    for pattern in ("/usr/lib/jvm/java-17-openjdk*", "/usr/lib/jvm/java-21-openjdk*",
                    "/usr/lib/jvm/*17*", "/usr/lib/jvm/*21*"):
        for cand in sorted(glob.glob(pattern)):
            if os.path.exists(os.path.join(cand, "bin", "java")):
                os.environ["JAVA_HOME"] = cand
                return


def new_session(master: str = "local[2]", conf: dict[str, Any] | None = None) -> Any:
    """A fresh session (stop it when done: one per analysis)."""
    _ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("kchaos-checkers")
    for k, v in {**DEFAULT_CONF, **{k: str(v) for k, v in (conf or {}).items()}}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark's own logger prints every failed query as a page of JSON; a
    # failing check is reported in results.json instead.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


@contextlib.contextmanager
def analysis_session(master: str = "local[2]", conf: dict[str, Any] | None = None,
                     spark: Any = None) -> Iterator[Any]:
    """Use ``spark`` if given (tests share one), else start one and stop it after."""
    if spark is not None:
        yield spark
        return
    spark = new_session(master, conf)
    try:
        yield spark
    finally:
        spark.stop()
