"""From a stored history to a verdict and reports: shared by `run` and `analyze`."""
from __future__ import annotations

import logging
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from checkers import analyze_run
from harness.store import write_json
from history import allocator
from history.row_groups import index_path
from history.parquet import parquet_is_current
from reports import render_run
from reports.early import EarlyParts, early_parts

log = logging.getLogger(__name__)


def analyze(run_dir: Path, checker_cfg: dict[str, Any] | None = None) -> Any:
    """Run the checkers, write results.json and the reports; return the verdict.

    A crashing checker makes the verdict "unknown" (with its error), never a pass.
    Each stage's seconds are logged (kchaos.log, -v): bench/checker_throughput.py
    reads them.

    The report's digest of every op needs no verdict, nor do the parts made
    from it alone (reports/early.py): they are made in a thread while the
    checkers run, on the core the Spark engine leaves idle part of
    the time (its tasks are per partition) and in the Python process that waits
    for it. From the run's history.parquet when it is current (a completed
    run), else from the one the Spark engine's conversion writes, once it is
    written; with the reference engine and a JSONL history, after the checks.
    """
    run_dir = Path(run_dir)
    allocator.tune()        # the digest's arrays reuse freed memory (history/allocator.py)
    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-digest") as pool:
        early: list[Future] = []

        def digest_beside(_parquet: Path | None = None) -> None:
            if fits_beside(run_dir):
                early.append(pool.submit(_digest_beside, run_dir))

        if parquet_is_current(run_dir / "history.jsonl", run_dir / "history.parquet"):
            digest_beside()
        verdict = _check(run_dir, checker_cfg, None if early else digest_beside)
        t1, cpu1 = time.monotonic(), time.process_time()
        try:
            render_run(run_dir, early=early[0].result() if early else None)
            log.info("analysis stage report: %.2f s (CPU %.2f s)", time.monotonic() - t1,
                     time.process_time() - cpu1)
        except Exception as exc:
            log.error("rendering the report failed: %s", exc)
            log.info("report traceback:\n%s", traceback.format_exc())
    return verdict


# Memory per message of the message index (a send or a read), measured on a 10-minute soak's
# 75M (docs/benchmarks.md, "The final drain in processes"; "The checks and the digest at a
# third"): the digest about 34 bytes reading the index (125 before it did), the Spark workers
# together about 170 (each holds its partitions' whole index).
DIGEST_BYTES_PER_MESSAGE = 40
SPARK_BYTES_PER_MESSAGE = 170
MEMORY_SHARE = 0.8       # of the memory available at the start, at most, for both at once


def fits_beside(run_dir: Path, available: int | None = None) -> bool:
    """Whether the report's digest may be made beside the checks: both at
    once must fit in ``MEMORY_SHARE`` of the memory available (``available``
    bytes, else /proc/meminfo's MemAvailable). A 10-minute run at full speed
    did not: the two together were killed for memory on this 24 GB machine.
    Else the report makes the digest after the checks (their memory freed),
    which costs its time on the wait. Unknown sizes: beside, as before."""
    try:
        messages = pq.read_metadata(index_path(run_dir / "history.parquet")).num_rows
    except (OSError, ValueError, pa.ArrowException):
        return True
    if available is None:
        available = _memory_available()
    if available is None:
        return True
    need = messages * (DIGEST_BYTES_PER_MESSAGE + SPARK_BYTES_PER_MESSAGE)
    if need <= MEMORY_SHARE * available:
        return True
    log.info("the report's digest waits for the checks: %.1f GB for both at once (%d messages) "
             "against %.1f GB available", need / 1e9, messages, available / 1e9)
    return False


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _digest_beside(run_dir: Path) -> EarlyParts:
    t0, cpu0 = time.monotonic(), time.thread_time()
    parts = early_parts(run_dir)
    log.info("analysis stage digest: %.2f s (beside the checkers, with %s; CPU of its thread %.2f s)",
             time.monotonic() - t0, ", ".join(parts.made) or "nothing else", time.thread_time() - cpu0)
    return parts


def _check(run_dir: Path, checker_cfg: dict[str, Any] | None,
           converted_to: Callable[[Path], Any] | None) -> Any:
    """The checkers' verdict, results.json written; "unknown" when they crash."""
    t0, cpu0 = time.monotonic(), time.process_time()
    try:
        result = analyze_run(run_dir, checker_cfg or {}, converted_to=converted_to)
        verdict = result.valid
        stages = [f"{k} {v:.2f} s" for k, v in (result.checker.get("stages") or {}).items()]
        log.info("analysis stage checkers: %.2f s (%s)", time.monotonic() - t0,
                 ", ".join(stages + [f"CPU of this process {time.process_time() - cpu0:.2f} s"]))
    except Exception as exc:
        log.error("checkers failed (verdict unknown): %s", exc)
        log.info("checker traceback:\n%s", traceback.format_exc())
        verdict = "unknown"
        write_json(run_dir / "results.json", {"valid": "unknown", "errors": [f"checkers: {exc}"],
                                              "anomalies": {}, "stats": {}, "unclean_elections": []})
    return verdict
