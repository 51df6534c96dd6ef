"""The checkers' entry points: which engine, on which file, and the verdict
written down. Everything else in the package is a check or an engine; this
module only orchestrates them (docs/design.md, "What the checkers decide").

* ``check(history, config)`` - one history (JSONL or Parquet) -> CheckResult.
* ``check_runs(parquet, config)`` - a Parquet file with a ``run`` column ->
  one CheckResult per run, in one Spark pass.
* ``analyze_run(run_dir, config)`` - what ``kchaos analyze`` does: the run's
  history.parquet (converted from history.jsonl unless it is current) ->
  results.json.
* ``write_results``, ``summary``, ``choose_engine``.

Config (a plain dict, every key optional): ``engine`` ("auto" | "spark" |
"reference"; auto: the reference up to ``REFERENCE_MAX_OPS`` ops, else Spark),
``spark_master`` ("local[2]"), ``spark_conf`` (extra Spark settings),
``max_witnesses`` (20), ``allowed`` ({anomaly type: reason}; a falsy reason
takes a default allowance away), ``min_progress`` (0..1; unset:
too-little-progress is not judged), ``min_insync_replicas`` (read from the
run's stored config).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq

from history.ops import HistoryFormatError, history_header
from history.paired import PairedOp
from history.parquet import history_to_parquet, is_parquet, iter_parquet_rows, parquet_is_current, read_paired_ops

from . import reference, session
from .common import RunFindings, Settings, assemble, crashed
from .hanging import wanted as hanging_values
from . import raft_log
from .kafka_record import RunRecords, load_records
from .result import CheckResult
from .settle import markers_of

log = logging.getLogger(__name__)

# Paired ops up to which "auto" picks the reference engine: below it the
# reference's verdict comes before a Spark session has even started
# (bench/checker_throughput.py --threshold; docs/design.md, "What the checkers decide").
REFERENCE_MAX_OPS = 100_000


def history_ops(source: Path) -> int:
    """Paired ops in a history: Parquet rows from the footers, or, for JSONL,
    half its lines (an invoke and a completion per op), counted without parsing."""
    source = Path(source)
    if is_parquet(source):
        files = sorted(source.rglob("*.parquet")) if source.is_dir() else [source]
        return sum(pq.read_metadata(f).num_rows for f in files)
    n, buf = 0, bytearray(1 << 24)
    with open(source, "rb") as fh:
        while k := fh.readinto(buf):
            n += buf.count(b"\n", 0, k)
    return n // 2


def choose_engine(source: Path, settings: Settings, spark: Any = None) -> tuple[str, str]:
    """(engine, why): the configured one, else Spark when a session is given
    (its start is paid), a non-local master is configured, or the history has
    more than REFERENCE_MAX_OPS ops; else the reference."""
    return _engine(settings, spark, lambda: history_ops(source))


def _engine(settings: Settings, spark: Any, ops: Callable[[], int]) -> tuple[str, str]:
    """``choose_engine``'s rule, with ``ops()`` the history's ops (asked only when needed)."""
    if settings.engine != "auto":
        return settings.engine, "configured"
    if spark is not None:
        return "spark", "auto: a Spark session was given"
    if not settings.spark_master.startswith("local"):
        return "spark", f"auto: Spark master {settings.spark_master} configured"
    n = ops()
    if n <= REFERENCE_MAX_OPS:
        return "reference", f"auto: {n} ops <= {REFERENCE_MAX_OPS}"
    return "spark", f"auto: {n} ops > {REFERENCE_MAX_OPS}"


def start_spark_ahead(run_dir: str | Path, config: dict[str, Any] | None, ops: int) -> bool:
    """If ``analyze_run(run_dir, config)`` will check on Spark (the engine
    chosen as ``choose_engine`` chooses it, from ``ops``: the ops the run
    recorded), start its session now (``session.start_ahead``), so the driver
    JVM starts while the caller finishes the run (its teardown) instead of
    after. Returns whether it did."""
    cfg = stored_checker_config(run_dir)
    cfg.update(config or {})
    settings = Settings.from_config(cfg)
    wanted = _engine(settings, None, lambda: ops)[0] == "spark"
    if wanted:
        session.start_ahead(settings.spark_master, settings.spark_conf)
    return wanted


def _meta(settings: Settings, t0: float, why: str | None = None,
          stages: dict[str, float] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"engine": settings.engine}
    if why:
        meta["chosen"] = why
    if settings.engine == "spark":
        meta["master"] = settings.spark_master
    meta["seconds"] = round(time.monotonic() - t0, 3)
    if stages:
        meta["stages"] = {k: round(v, 3) for k, v in stages.items()}
    return meta


def _empty(settings: Settings) -> RunFindings:
    """Findings of a history with no ops: nothing found, verdict unknown."""
    return reference.analyze([], settings)


def check(history: str | Path, config: dict[str, Any] | None = None, *, spark: Any = None,
          records: RunRecords | None = None) -> CheckResult:
    """Check one history, with Kafka's own record of the run when there is one
    (``records``; else elections come from the sampler's view). Raises
    HistoryFormatError for an unreadable history (that is the input's fault);
    any failure of the analysis itself gives a result with valid "unknown"
    and the error, never a pass."""
    return _check(history, config, spark, single=True, records=records)[0]


def check_runs(source: str | Path, config: dict[str, Any] | None = None, *,
               spark: Any = None) -> dict[int, CheckResult]:
    """Check every run of a Parquet file with a ``run`` column (one pass on
    Spark); a file without one is run 0. Runs with no ops are absent."""
    return _check(source, config, spark, single=False)


def _check(source: str | Path, config: dict[str, Any] | None, spark: Any,
           single: bool, records: RunRecords | None = None,
           parquet_out: Path | None = None,
           converted_to: Callable[[Path], Any] | None = None) -> dict[int, CheckResult]:
    """``parquet_out``: a JSONL source is converted there (and kept), not to a
    temporary file; ``converted_to(parquet_out)`` is called once it is
    written, before the Spark checks (the caller may read it beside them)."""
    settings = Settings.from_config(config)
    t0 = time.monotonic()
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(source)
    engine, why = choose_engine(source, settings, spark)
    settings = dataclasses.replace(settings, engine=engine)
    stages: dict[str, float] = {}

    def _finish(f: RunFindings, settings: Settings, records: RunRecords | None, t0: float) -> CheckResult:
        return assemble(f, settings, _meta(settings, t0, why, stages), records)

    if settings.engine == "reference":
        if parquet_out is not None and not is_parquet(source):
            t1 = time.monotonic()
            history_to_parquet(source, parquet_out)
            stages["convert"] = time.monotonic() - t1
            source = parquet_out
        findings: dict[int, RunFindings] = {}
        if not is_parquet(source) or single:
            findings[0] = reference.analyze(read_paired_ops(source), settings, markers_of(records),
                                            hanging_values(records))
        else:
            by_run: dict[int, list[PairedOp]] = defaultdict(list)
            for row in iter_parquet_rows(source):
                by_run[row.get("run") or 0].append(PairedOp.from_row(row))
            findings = {r: reference.analyze(ops, settings) for r, ops in by_run.items()}
        results = {r: _finish(f, settings, records, t0) for r, f in findings.items()}
        return results or {0: _finish(_empty(settings), settings, records, t0)}
    with contextlib.ExitStack() as stack:
        parquet = source
        conversion: _Background | None = None
        converted = True            # False once the conversion has failed
        if not is_parquet(source):      # the Spark engine reads Parquet: convert while Spark starts
            if parquet_out is None:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kchaos-check-"))
                parquet_out = Path(tmp) / "history.parquet"
            parquet = parquet_out
            conversion = _Background("kchaos-convert", history_to_parquet, source, parquet)
        try:
            from . import spark as spark_engine     # here: it loads pyspark, which the reference engine never needs
            t1 = time.monotonic()
            with session.analysis_session(settings.spark_master, settings.spark_conf, spark) as sp:
                stages["start"] = time.monotonic() - t1
                if conversion is not None:
                    pending, conversion = conversion, None
                    # while the conversion goes on, the session's first job (spark_frames.warm_up)
                    warming = _Background("kchaos-warm-up", spark_engine.warm_up, sp)
                    try:
                        stages["convert"] = pending.wait()
                    except BaseException:
                        converted = False
                        raise
                    try:
                        warming.wait()
                    except Exception as e:  # noqa: BLE001 - the passes' own jobs say what is wrong
                        log.info("warming the Spark session: %s", e)
                    if converted_to is not None:
                        converted_to(parquet)
                marker = markers_of(records) if single else None
                findings = spark_engine.analyze_runs(sp, str(parquet), settings, stages,
                                                     {0: marker} if marker is not None else None,
                                                     {0: hanging_values(records)} if single else None)
        except Exception as e:  # noqa: BLE001 - never a pass on a crash
            if not converted:       # the conversion's error, as without Spark: it propagates
                raise
            if conversion is not None:  # Spark did not start; a bad history still goes first
                stages["convert"] = conversion.wait()
            log.exception("spark analysis crashed")
            text = (str(e).strip().splitlines() or [""])[0][:300]
            return {0: crashed(settings, _meta(settings, t0, why, stages), f"spark: {type(e).__name__}: {text}")}
    if single:
        return {0: _finish(findings.get(0) or _empty(settings), settings, records, t0)}
    results = {r: _finish(f, settings, None, t0) for r, f in findings.items()}
    return results or {0: _finish(_empty(settings), settings, None, t0)}


class _Background:
    """``fn(*args)`` in a thread of its own, ``name`` (a daemon: Ctrl-C does not wait
    for it); ``wait`` returns its seconds or raises what it raised."""

    def __init__(self, name: str, fn: Any, *args: Any):
        self._error: BaseException | None = None
        self._seconds = 0.0

        def run() -> None:
            t = time.monotonic()
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - handed to wait()
                self._error = e
            self._seconds = time.monotonic() - t
        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def wait(self) -> float:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._seconds


def write_results(result: CheckResult, path: str | Path) -> None:
    """results.json, written atomically so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def stored_checker_config(run_dir: str | Path) -> dict[str, Any]:
    """The "checker" section of run_dir/config.json, with the client settings
    the run stored (they tell the checkers which anomalies the settings allow)
    and its [broker] overrides."""
    cfg: dict[str, Any] = {}
    cfg_file = Path(run_dir) / "config.json"
    if cfg_file.exists():
        stored = json.loads(cfg_file.read_text(encoding="utf-8"))
        section = stored.get("checker")
        if isinstance(section, dict):
            cfg.update(section)
        if isinstance(stored.get("client_settings"), dict):
            cfg["client_settings"] = stored["client_settings"]
        if isinstance(stored.get("broker"), dict):      # the coordinator's abort interval (hanging.py)
            cfg["broker_settings"] = stored["broker"]
        for table in ("broker", "topic"):       # the topic's setting wins (harness/schedule.py min_insync)
            t = stored.get(table)
            if isinstance(t, dict) and t.get("min.insync.replicas") is not None:
                cfg["min_insync_replicas"] = t["min.insync.replicas"]
    return cfg


def analyze_run(run_dir: str | Path, config: dict[str, Any] | None = None, *, spark: Any = None,
                converted_to: Callable[[Path], Any] | None = None) -> CheckResult:
    """history.parquet (the run's own when current, else converted from
    history.jsonl, on Spark while the session starts) -> results.json in ``run_dir``. results.json's "checker"
    says which engine ran and why, and whether the Parquet was converted.

    Config: the "checker" section of run_dir/config.json, overridden by
    ``config``. An unreadable history still gets a results.json (valid
    "unknown", the error named) before HistoryFormatError propagates.
    ``converted_to(path)``: called with the history.parquet a conversion for the
    Spark engine wrote, as soon as it is written (harness/analysis.py reads the
    report's digest from it beside the checks).
    """
    run_dir = Path(run_dir)
    cfg = stored_checker_config(run_dir)
    cfg.update(config or {})
    settings = Settings.from_config(cfg)
    t0 = time.monotonic()
    jsonl, parquet = run_dir / "history.jsonl", run_dir / "history.parquet"
    converted = not parquet_is_current(jsonl, parquet)
    records = load_records(run_dir, history_header(jsonl).get("wall_ns_at_zero"))
    try:
        # converting (when needed) while a Spark session starts: see _check
        result = _check(jsonl if converted else parquet, cfg, spark, single=True, records=records,
                        parquet_out=parquet if converted else None, converted_to=converted_to)[0]
    except HistoryFormatError as e:
        write_results(crashed(settings, _meta(settings, t0), f"history: {e}"), run_dir / "results.json")
        raise
    raft = raft_log.load(run_dir)     # Kafka's own Raft log, when the run stored one (docs/design.md, "Quorum membership")
    if raft is not None:
        result.stats["raft_log"] = raft_log.judge(raft, settings.max_witnesses)
        if result.stats["raft_log"]["divergences"]:
            result.valid = False
    result.checker["parquet"] = "converted" if converted else "reused"
    result.checker["seconds"] = round(time.monotonic() - t0, 3)
    write_results(result, run_dir / "results.json")
    return result
