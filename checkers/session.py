"""One quiet SparkSession per analysis, started as fast as this host allows.

Quiet because the console belongs to kchaos: log level ERROR from the first
line (a log4j2 file shipped with the package, not setLogLevel after startup),
no progress bar, no UI. Small because the harness host is small: local[2],
4 shuffle partitions, modest driver memory, all overridable.

The JVM's own start-up warnings (``WARNING: Using incubator modules:
jdk.incubator.vector``) are not the console's either: the driver's stderr is
read line by line (``_pump_stderr``), its ``WARNING:`` lines logged at INFO (the
run's kchaos.log, or the console with -v) and every other line written to
stderr as before (its stdout stays inherited: HotSpot prints why it could not
start there), so a JVM that cannot start still says why.

Fast because an analysis pays the driver JVM's start and warm-up every time
(docs/design.md, "What the checkers decide"): the JIT stops at C1
(``JVM_OPTIONS``: C2's compile threads fight the analysis for 2 cores and its
code arrives after the short jobs end), and the driver maps Spark's classes
from an AppCDS archive (``cds_archive``) instead of loading them from 280 jars.
"""
from __future__ import annotations

import atexit
import contextlib
import glob
import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from history import allocator

log = logging.getLogger(__name__)

LOG4J2 = Path(__file__).with_name("log4j2.properties")

# Driver JVM flags: C1 only (on 1M ops the first analysis in a JVM took 16.3 s
# instead of 26.6 s, a warm one 7.5 s instead of 9.2 s; docs/design.md, "What
# the checkers decide"). The collector stays the JVM's default (G1): the
# parallel and serial ones were not measured to win.
JVM_OPTIONS = ["-XX:TieredStopAtLevel=1"]

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
    # bigger Arrow batches to Python (the consumer-group pass's applyInArrow): less overhead per row
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # ...and at most 32 MiB a batch, so a batch of long rows stays small on the JVM heap
    "spark.sql.execution.arrow.maxBytesPerBatch": str(32 << 20),
    "spark.driver.extraJavaOptions": " ".join([f"-Dlog4j2.configurationFile=file:{LOG4J2}", *JVM_OPTIONS]),
    # the Python workers' big arrays reuse freed memory instead of new zeroed pages (history/allocator.py)
    **{f"spark.executorEnv.{k}": v for k, v in allocator.ENV.items()},
}
EXTRA_JAVA = "spark.driver.extraJavaOptions"

# What the last new_session did about the class archive: "used", "recording"
# (this JVM writes one when it exits), "recorded", "refused", "off" (bench, logs).
cds_state = "off"
_recording: dict[str, Any] = {}      # the JVM writing an archive: gateway, tmp, dest


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


def cache_dir() -> Path:
    """kchaos's host cache (the rule of infra.distribution.cache_root, which
    checkers may not import): $KCHAOS_CACHE, else $XDG_CACHE_HOME/kchaos, else
    ~/.cache/kchaos."""
    base = os.environ.get("KCHAOS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kchaos")
    return Path(base) / "spark-cds"


def cds_archive(java_options: str) -> Path:
    """Where the driver's class archive for this PySpark, JVM and option set
    lives. The key covers what the JVM checks when it maps a dynamic archive
    (the jars' names, sizes and times; the JVM build) and the options, so a
    different install gets a new archive instead of a refused one."""
    import pyspark
    jars = Path(pyspark.__file__).parent / "jars"
    java = Path(os.environ.get("JAVA_HOME", "/usr")) / "bin" / "java"
    libjvm = sorted(glob.glob(str(java.resolve().parent.parent / "lib" / "server" / "libjvm.so")))
    parts: list[object] = [pyspark.__version__, str(java.resolve()), java_options]
    for p in [*sorted(jars.glob("*.jar")), *map(Path, libjvm)]:
        st = p.stat()
        parts.append((p.name, st.st_size, int(st.st_mtime)))
    key = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
    return cache_dir() / f"driver-{pyspark.__version__}-{key}.jsa"


def _cds_options(java_options: str) -> tuple[list[str], str]:
    """JVM flags for the class archive and what they do: map the cached archive,
    or record one at exit if there is none yet (once per install), or nothing
    (the archive was refused before, or KCHAOS_SPARK_CDS=0)."""
    if os.environ.get("KCHAOS_SPARK_CDS", "1") == "0":
        return [], "off"
    try:
        dest = cds_archive(java_options)
    except OSError as e:
        log.info("no class archive for the Spark driver: %s", e)
        return [], "off"
    if dest.with_suffix(".refused").exists():
        return [], "refused"
    # the JVM's CDS chatter goes to stdout by default, and a crash report to the cwd
    quiet = ["-Xlog:cds*=off", f"-XX:ErrorFile={tempfile.gettempdir()}/kchaos-spark-hs_err_%p.log"]
    if dest.exists():
        return [f"-XX:SharedArchiveFile={dest}", "-Xshare:auto", *quiet], "used"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    _recording.update(tmp=tmp, dest=dest)
    return [f"-XX:ArchiveClassesAtExit={tmp}", *quiet], "recording"


def _finish_recording() -> None:
    """End a recording driver JVM (it writes the archive as it exits: stdin's
    EOF makes PySpark's gateway exit) and put the archive in place whole."""
    global cds_state
    rec = dict(_recording)
    _recording.clear()
    if not rec:
        return
    tmp, dest, gateway = rec["tmp"], rec["dest"], rec.get("gateway")
    proc = getattr(gateway, "proc", None)
    try:
        if proc is not None:
            from pyspark import SparkContext
            with contextlib.suppress(Exception):
                gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=120)
        if proc is not None and proc.returncode == 0 and tmp.exists() and tmp.stat().st_size > 0:
            os.replace(tmp, dest)
            cds_state = "recorded"
            log.info("recorded the Spark driver's class archive %s", dest)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.info("no class archive recorded for the Spark driver: %s", e)
    finally:
        tmp.unlink(missing_ok=True)


# A line the JVM writes at start-up about its own set-up, not about the analysis.
JVM_WARNING = re.compile(r"^WARNING: ")


def _pump_stderr(fd: int) -> None:
    """Until the driver JVM exits: its ``WARNING:`` lines to the log at INFO,
    every other line (log4j's errors, why the JVM could not start) to stderr."""
    with os.fdopen(fd, "rb") as stream:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            if JVM_WARNING.match(line):
                log.info("Spark driver JVM: %s", line.rstrip())
            else:
                sys.stderr.write(line)
                sys.stderr.flush()


def _launch_driver(master: str, conf: dict[str, str]) -> None:
    """Start the driver JVM as PySpark would (``launch_gateway``, with the
    settings the builder passes), but with its stderr on a pipe read by
    ``_pump_stderr`` instead of inherited; the builder then finds it running.
    The pipe is read from before the JVM starts, and a JVM that dies at start-up
    has its stderr lines written before PySpark's error is raised."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    spark_conf = SparkConf().setMaster(master).setAppName("kchaos-checkers").setAll(list(conf.items()))
    read_fd, write_fd = os.pipe()
    pump = threading.Thread(target=_pump_stderr, args=(read_fd,), name="spark-jvm-stderr", daemon=True)
    pump.start()
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": write_fd})
    except BaseException:
        os.close(write_fd)
        pump.join(timeout=10)       # the JVM has exited: its last lines are on their way
        raise
    os.close(write_fd)              # the JVM holds its own copy; EOF comes when it exits
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


def _build(master: str, conf: dict[str, str]) -> Any:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    if SparkContext._gateway is None:
        _launch_driver(master, conf)
    builder = SparkSession.builder.master(master).appName("kchaos-checkers")
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def new_session(master: str = "local[2]", conf: dict[str, Any] | None = None) -> Any:
    """A fresh session (stop it with ``stop_session`` when done: one per analysis).
    A driver JVM that refuses or crashes on its class archive is started again
    without it, and the archive is not offered again (one warning)."""
    global cds_state
    wait_stopped()
    _ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark
    from pyspark import SparkContext
    # spark-submit otherwise runs a Python process just to find this directory
    os.environ.setdefault("SPARK_HOME", str(Path(pyspark.__file__).parent))

    merged = {**DEFAULT_CONF, **{k: str(v) for k, v in (conf or {}).items()}}
    java_options = merged[EXTRA_JAVA]
    fresh_jvm = SparkContext._gateway is None        # else the options were fixed by an earlier session
    cds, cds_state = _cds_options(java_options) if fresh_jvm else ([], "off")
    cds_log = None
    if cds_state == "used":
        fd, cds_log = tempfile.mkstemp(prefix="kchaos-cds-", suffix=".log")
        os.close(fd)
        cds.append(f"-Xlog:cds=info:file={cds_log}")
    try:
        spark = _build(master, {**merged, EXTRA_JAVA: " ".join([java_options, *cds])})
    except Exception as e:  # noqa: BLE001 - a JVM that died on its archive: try once without
        _recording.clear()
        if cds_state == "off" or SparkContext._gateway is not None:
            raise
        spark = _build(master, merged)            # raises what is not the archive's fault
        _refuse(java_options, str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__)
    else:
        why = _refused(Path(cds_log)) if cds_log else ""
        if why:                                   # the JVM went on without it: keep the session
            _refuse(java_options, why)
    finally:
        if cds_log:
            Path(cds_log).unlink(missing_ok=True)
    if cds_state == "recording":
        _recording["gateway"] = SparkContext._gateway
        atexit.register(_finish_recording)
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark's own logger prints every failed query as a page of JSON; a
    # failing check is reported in results.json instead.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


def _refuse(java_options: str, why: str) -> None:
    """One warning; the archive is not offered (nor recorded) again for this install."""
    global cds_state
    cds_state = "refused"
    dest = cds_archive(java_options)
    log.warning("the Spark driver refused its class archive %s (%s): it starts without one", dest, why)
    with contextlib.suppress(OSError):
        dest.with_suffix(".refused").touch()


def _refused(cds_log: Path) -> str:
    """Why the JVM did not map the archive ("" if it did: the log says it mapped
    the dynamic regions)."""
    try:
        text = cds_log.read_text(errors="replace")
    except OSError as e:
        return f"no CDS log: {e}"
    if "Mapped dynamic region" in text:
        return ""
    bad = [ln for ln in text.splitlines() if "UseSharedSpaces:" in ln or "Unable to" in ln or "mismatch" in ln]
    return bad[0].split("]", 3)[-1].strip() if bad else "not mapped"


def stop_session(spark: Any) -> None:
    """Stop the session; a JVM recording the class archive is ended so it writes it."""
    spark.stop()
    _finish_recording()


_stopping: list[threading.Thread] = []     # a stop begun by stop_beside, not yet waited for


def stop_beside(spark: Any) -> None:
    """``stop_session`` in a thread, so the caller goes on (the report) while
    the JVM stops: about 1 s of the driver's own work on the analysis's
    critical path otherwise (docs/benchmarks.md). The thread is not a daemon:
    the interpreter waits for it at exit, so the JVM never outlives the
    process mid-stop, and ``wait_stopped`` (every new session first) waits
    for it too, so a new session never finds the old one half stopped."""
    def stop() -> None:
        try:
            stop_session(spark)
        except Exception as e:  # noqa: BLE001 - the analysis is done; the JVM exits with this process
            log.info("stopping the Spark session: %s", e)
    thread = threading.Thread(target=stop, name="kchaos-spark-stop")
    _stopping.append(thread)
    thread.start()


def wait_stopped() -> None:
    """Wait for a session ``stop_beside`` is stopping."""
    while _stopping:
        _stopping.pop().join()


class _Ahead:
    """A session being started in a thread (``start_ahead``) for the settings ``key``."""

    def __init__(self, master: str, conf: dict[str, Any] | None):
        self.key = _key(master, conf)
        self.spark: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, args=(master, conf), name="kchaos-spark-ahead",
                                       daemon=True)

    def _start(self, master: str, conf: dict[str, Any] | None) -> None:
        try:
            self.spark = new_session(master, conf)
        except BaseException as e:  # noqa: BLE001 - analysis_session starts its own, and says why then
            self.error = e


_ahead: list[_Ahead] = []      # at most one


def _key(master: str, conf: dict[str, Any] | None) -> tuple:
    return master, tuple(sorted((str(k), str(v)) for k, v in (conf or {}).items()))


def start_ahead(master: str = "local[2]", conf: dict[str, Any] | None = None) -> None:
    """Start the session the next ``analysis_session`` with these settings will
    use, in a thread: the driver JVM's start (about 4 s, docs/benchmarks.md)
    then overlaps whatever the caller does meanwhile (a run's teardown). That
    ``analysis_session`` takes it as its own (and stops it after); one with
    other settings stops it first. Not when a session is running already
    (a test's shared one): the analysis uses that one."""
    pyspark = sys.modules.get("pyspark")      # not imported yet: no session can be running
    if _ahead or (pyspark is not None and pyspark.SparkContext._active_spark_context is not None):
        return
    ahead = _Ahead(master, conf)
    _ahead.append(ahead)
    ahead.thread.start()


def _take_ahead(master: str, conf: dict[str, Any] | None) -> Any:
    """The session ``start_ahead`` started for these settings (None: none, it
    failed, or it was for other settings, and is stopped)."""
    if not _ahead:
        return None
    ahead = _ahead.pop()
    ahead.thread.join()
    if ahead.error is not None:
        log.info("the Spark session started ahead failed (starting again): %s", ahead.error)
        return None
    if ahead.key != _key(master, conf):
        stop_session(ahead.spark)
        return None
    return ahead.spark


@contextlib.contextmanager
def analysis_session(master: str = "local[2]", conf: dict[str, Any] | None = None,
                     spark: Any = None) -> Iterator[Any]:
    """Use ``spark`` if given (tests share one), else the one ``start_ahead``
    started for these settings, else start one; stop it after.
    A session already running in this process (``new_session`` then gets it
    back) belongs to whoever started it: it is used, not stopped."""
    if spark is not None:
        yield spark
        return
    from pyspark import SparkContext
    ahead = _take_ahead(master, conf)
    wait_stopped()
    running = ahead is None and SparkContext._active_spark_context is not None
    spark = ahead if ahead is not None else new_session(master, conf)
    try:
        yield spark
    finally:
        if not running:
            stop_beside(spark)
