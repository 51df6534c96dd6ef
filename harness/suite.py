"""Running a suite: its planned runs one after another on fresh clusters,
within the time budget, with the suite's reports rewritten after every run.

Suite files, their parsing and their expansion into runs are
``harness.suite_config``. Each run is stored as usual
(``store/<name>/<timestamp>/``); the suite's own folder is
``store/suites/<suite name>/<timestamp>/`` with ``suite.json``,
``index.html`` and ``junit.xml``.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness import run_config
from harness.progress import as_listener
from harness.run_config import RunConfig
from harness.runner import Runner
from harness.store import new_run_dir, write_json
from harness.suite_config import DEFAULT_RUN_OVERHEAD, SUITES_DIR, PlannedRun, Suite
from infra.errors import UsageError
from reports import render_run
from reports.load import anomaly_rows, verdict_of
from reports.suite_report import is_flaky, load_earlier, write_suite_reports

log = logging.getLogger(__name__)

SUITE_FORMAT = 1
_EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "error": 3}
EXIT_INTERRUPTED = 130


# ---- the time budget (pure) ----------------------------------------------------

class Budget:
    """Whether the next run fits in what is left of the suite's time budget.

    A run is expected to take its time_limit plus an overhead (cluster start,
    final phase, checkers): the median overhead measured on this suite's runs
    so far, or ``default_overhead`` before the first. Runs that would not fit
    are skipped; a later, shorter run may still fit.
    """

    def __init__(self, seconds: float | None, default_overhead: float = DEFAULT_RUN_OVERHEAD):
        self.seconds = seconds
        self.default_overhead = default_overhead
        self.observed: list[float] = []

    def overhead(self) -> float:
        return statistics.median(self.observed) if self.observed else self.default_overhead

    def estimate(self, time_limit: float) -> float:
        return time_limit + self.overhead()

    def admit(self, elapsed: float, time_limit: float) -> tuple[bool, str | None]:
        if self.seconds is None:
            return True, None
        need = self.estimate(time_limit)
        left = self.seconds - elapsed
        if need <= left:
            return True, None
        return False, (f"time budget: about {need:.0f} s needed, {max(0.0, left):.0f} s of "
                       f"{self.seconds:g} s left")

    def record(self, duration: float, time_limit: float) -> None:
        self.observed.append(max(0.0, duration - time_limit))


# ---- running -------------------------------------------------------------------

@dataclass
class Attempt:
    """What became of one run: its folder (if it got one), exit code, verdict."""
    run_dir: Path | None
    exit_code: int
    verdict: Any = "unknown"
    interrupted: bool = False
    error: str | None = None


# What runs one planned run: default_runner (around harness.runner.Runner), or a test's fake.
RunFn = Callable[[RunConfig, Callable[..., None]], Attempt]


def default_runner(cfg: RunConfig, progress: Callable[..., None]) -> Attempt:
    run = Runner(cfg, progress)
    try:
        outcome = run.execute()
    except Exception as exc:  # a failed run must not stop the suite
        log.exception("run %s failed", cfg.name)
        run_dir = getattr(run, "run_dir", None)
        if run_dir is not None and not (Path(run_dir) / "report.html").exists():
            try:
                render_run(run_dir)
            except Exception as render_exc:
                log.warning("rendering the report of the failed run failed: %s", render_exc)
        return Attempt(run_dir, 3, "unknown", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    return Attempt(outcome.run_dir, outcome.exit_code, outcome.verdict, outcome.interrupted)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_suite_dir(store: Path, name: str) -> Path:
    """``store/suites/<name>/<timestamp>/`` and a ``latest`` link beside it
    (``store/latest`` keeps pointing at the newest run)."""
    base = Path(store) / SUITES_DIR / name
    d = new_run_dir(Path(store) / SUITES_DIR, name)
    link = base / "latest"
    tmp = link.with_name(f".latest.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(d.name)
    tmp.replace(link)
    return d


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def run_summary(run_dir: Path) -> dict[str, Any]:
    """What the suite keeps of a stored run: seed, digest, verdict, anomaly counts."""
    cfg = _read_json(run_dir / "config.json")
    res = _read_json(run_dir / "results.json")
    cfg = cfg if isinstance(cfg, dict) else {}
    res = res if isinstance(res, dict) else None
    anomalies = {a.type: {"count": a.count, "allowed": a.allowed}
                 for a in anomaly_rows(res) if a.count > 0}
    return {"seed": cfg.get("seed"), "schedule_digest": cfg.get("schedule_digest"),
            "verdict": verdict_of(res), "has_results": res is not None, "anomalies": anomalies}


def exit_code_of(records: list[dict[str, Any]], interrupted: bool = False) -> int:
    """The worst run's code (0 valid < 1 invalid < 2 unknown < 3 harness error);
    2 when runs were planned but none ran; 130 when interrupted."""
    if interrupted:
        return EXIT_INTERRUPTED
    codes = [_EXIT[r["outcome"]] for r in records if r["outcome"] in _EXIT]
    if not codes:
        return 2 if records else 0
    return max(codes)


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()


class SuiteRun:
    def __init__(self, suite: Suite, planned: list[PlannedRun], store: Path,
                 progress: Callable[..., None] | None = None, runner: RunFn | None = None,
                 clock: Callable[[], float] = time.monotonic, announce: Callable[[str], None] | None = None):
        self.suite = suite
        self.planned = planned
        self.store = Path(store)
        self.progress = progress or (lambda line, periodic=False: None)   # a run's own progress
        self.announce = announce or (lambda line: self.progress(line))   # one line per suite event
        self.runner = runner or default_runner
        self.clock = clock
        self.budget = Budget(suite.time_budget, suite.run_overhead)
        self.suite_dir: Path | None = None
        self.records: list[dict[str, Any]] = []

    def _record(self, p: PlannedRun) -> dict[str, Any]:
        c = p.config
        return {"index": p.index, "cell": p.cell, "axes": p.axes, "name": c.name,
                "config": {"nodes": c.nodes, "kafka_version": c.kafka_version, "time_limit": c.time_limit,
                           "rate": c.rate, "concurrency": c.concurrency, "faults": list(c.nemesis.faults),
                           "nemesis_interval": c.nemesis.interval, "partitions": c.workload.partitions,
                           "replication_factor": c.workload.replication_factor, "mode": c.workload.mode},
                "overrides": next((v.overrides for v in self.suite.variants
                                   if v.name == p.axes.get("variant")), {}),
                "outcome": "pending", "verdict": None, "exit_code": None, "seed": c.seed,
                "schedule_digest": None, "run_dir": None, "report": None, "anomalies": {},
                "error": None, "skip_reason": None, "started": None, "duration_s": None}

    def _data(self, status: str, started: str, t0: float) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        interrupted = status == "interrupted"
        return {"format": SUITE_FORMAT, "name": self.suite.name, "description": self.suite.description,
                "source": self.suite.source, "status": status, "started": started,
                "finished": _now_iso() if status != "running" else None,
                "duration_s": round(self.clock() - t0, 1), "time_budget": self.suite.time_budget,
                "trend": self.suite.trend, "counts": counts,
                "exit_code": exit_code_of(self.records, interrupted) if status != "running" else None,
                "runs": self.records}

    def _write(self, data: dict[str, Any], earlier: list) -> None:
        write_json(self.suite_dir / "suite.json", data)
        try:
            write_suite_reports(self.suite_dir, data, earlier)
        except Exception as exc:  # the runs matter more than the index page
            log.error("rendering the suite index failed: %s", exc, exc_info=True)

    def execute(self) -> tuple[Path, int]:
        self.suite_dir = new_suite_dir(self.store, self.suite.name)
        earlier = load_earlier(self.suite_dir, self.suite.trend)
        self.records = [self._record(p) for p in self.planned]
        started, t0 = _now_iso(), self.clock()
        self._write(self._data("running", started, t0), earlier)
        interrupted = False
        try:
            interrupted = self._loop(started, t0, earlier)
        except KeyboardInterrupt:  # between runs (a run handles its own Ctrl-C)
            interrupted = True
        for rec in self.records:
            if rec["outcome"] == "pending":
                rec.update(outcome="skipped", skip_reason="the suite was interrupted")
        data = self._data("interrupted" if interrupted else "finished", started, t0)
        self._write(data, earlier)
        return self.suite_dir, data["exit_code"]

    def _loop(self, started: str, t0: float, earlier: list) -> bool:
        """Run (or skip) each planned run in order; True when interrupted."""
        total = len(self.planned)
        for p, rec in zip(self.planned, self.records):
            tag = f"[{p.index}/{total}] {p.name}"
            ok, why = self.budget.admit(self.clock() - t0, p.config.time_limit)
            if not ok:
                rec.update(outcome="skipped", skip_reason=why)
                self.announce(f"{tag}: skipped ({why})")
                self._write(self._data("running", started, t0), earlier)
                continue
            self.announce(f"{tag}: {p.cell}")
            attempt, duration = run_one(rec, p.config, self.suite_dir, self.runner, self.progress, self.clock, tag)
            if rec["outcome"] in ("valid", "invalid", "unknown"):
                self.budget.record(duration, p.config.time_limit)
            self.announce(outcome_line(tag, rec, duration, attempt))
            self._write(self._data("running", started, t0), earlier)
            if attempt.interrupted:
                return True
        return False


def run_one(rec: dict[str, Any], cfg: RunConfig, suite_dir: Path, runner: RunFn, progress: Callable[..., None],
            clock: Callable[[], float], title: str) -> tuple[Attempt, float]:
    """Run ``cfg`` and fill ``rec`` (a suite.json run record, or a rerun's)
    with what became of it; the attempt and its duration."""
    as_listener(progress).begin(title)
    rec["started"] = _now_iso()
    r0 = clock()
    try:
        attempt = runner(cfg, progress)
    except KeyboardInterrupt:
        attempt = Attempt(None, EXIT_INTERRUPTED, interrupted=True)
    duration = clock() - r0
    rec["duration_s"] = round(duration, 1)
    if attempt.run_dir is not None:
        run_dir = Path(attempt.run_dir)
        summary = run_summary(run_dir)
        rec.update(run_dir=_rel(run_dir, suite_dir),
                   seed=cfg.seed if summary["seed"] is None else summary["seed"],
                   schedule_digest=summary["schedule_digest"], anomalies=summary["anomalies"],
                   verdict=summary["verdict"])
        if (run_dir / "report.html").exists():
            rec["report"] = _rel(run_dir / "report.html", suite_dir)
    rec["exit_code"] = attempt.exit_code
    rec["error"] = attempt.error
    if attempt.interrupted:
        rec["outcome"] = "interrupted"
    elif attempt.error is not None or attempt.exit_code == 3:
        rec["outcome"] = "error"
    else:
        rec["outcome"] = {0: "valid", 1: "invalid"}.get(attempt.exit_code, "unknown")
        rec["verdict"] = rec["outcome"]
    return attempt, duration


def outcome_line(tag: str, rec: dict[str, Any], duration: float, attempt: Attempt) -> str:
    """``[2/6] nightly-kill: invalid in 95 s (3 lost-write)``: a suite's line per run."""
    failing = ", ".join(f"{a.get('count')} {t}" for t, a in (rec.get("anomalies") or {}).items()
                        if isinstance(a, dict) and not a.get("allowed"))
    why = attempt.error or failing
    return f"{tag}: {rec['outcome']} in {duration:.0f} s" + (f" ({why})" if why else "")


# ---- rerunning the invalid and unknown runs of a suite run --------------------------

RERUN_OUTCOMES = ("invalid", "unknown")


def _rerun_config(suite_dir: Path, rec: dict[str, Any], store: str | None) -> RunConfig:
    """A run's stored config.json with its seed, validated; stored beside the original
    (or in ``store``)."""
    run_dir = (suite_dir / rec["run_dir"]).resolve()
    path = run_dir / "config.json"
    if not path.is_file():
        raise UsageError(f"{suite_dir}: run {rec.get('index')} ({rec.get('name')}) has no {path}")
    cfg = run_config.load(path)
    if cfg.seed is None:
        raise UsageError(f"{path} has no seed: the run cannot be rerun as it ran")
    cfg.store = store or str(run_dir.parent.parent)
    cfg.keep_cluster = False
    try:
        return run_config.validate(cfg)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def load_suite_json(suite_dir: Path) -> dict[str, Any]:
    data = _read_json(Path(suite_dir) / "suite.json")
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise UsageError(f"{suite_dir} has no readable suite.json: not a suite folder")
    if data.get("status") == "running":
        raise UsageError(f"{suite_dir}: the suite is still running (or was killed); rerun a finished suite")
    return data


class SuiteRerun:
    """``kchaos suite --rerun-failed SUITE_DIR``: every run whose first outcome
    was invalid or unknown, run again with its stored config and seed. Each
    rerun is appended to its record's ``reruns`` in the suite folder's
    suite.json, the record is marked ``flaky`` when a rerun's verdict disagrees
    with the original's (``reports.suite_report.is_flaky``), and index.html and
    junit.xml are rewritten after every rerun."""

    def __init__(self, suite_dir: Path, store: str | None = None, progress: Callable[..., None] | None = None,
                 runner: RunFn | None = None, clock: Callable[[], float] = time.monotonic,
                 announce: Callable[[str], None] | None = None):
        self.suite_dir = Path(suite_dir)
        self.data = load_suite_json(self.suite_dir)
        self.progress = progress or (lambda line, periodic=False: None)
        self.announce = announce or (lambda line: self.progress(line))
        self.runner = runner or default_runner
        self.clock = clock
        self.records = [r for r in self.data["runs"]
                        if isinstance(r, dict) and r.get("outcome") in RERUN_OUTCOMES and r.get("run_dir")]
        # Every config read and validated before the first cluster starts.
        self.configs = [_rerun_config(self.suite_dir, r, store) for r in self.records]

    def _write(self) -> None:
        for rec in self.records:
            rec["flaky"] = is_flaky(rec)
        self.data["flaky"] = sum(1 for r in self.data["runs"] if isinstance(r, dict) and r.get("flaky"))
        write_json(self.suite_dir / "suite.json", self.data)
        try:
            write_suite_reports(self.suite_dir, self.data, load_earlier(self.suite_dir, self.data.get("trend", 10)))
        except Exception as exc:
            log.error("rendering the suite index failed: %s", exc, exc_info=True)

    def execute(self) -> int:
        """The worst rerun's exit code (as a suite's: 0 all valid ... 3), 130 interrupted."""
        done: list[dict[str, Any]] = []
        total = len(self.records)
        for k, (rec, cfg) in enumerate(zip(self.records, self.configs), 1):
            tag = f"[rerun {k}/{total}] {rec.get('name')}"
            self.announce(f"{tag}: was {rec['outcome']}, seed {cfg.seed}")
            again: dict[str, Any] = {"outcome": "pending", "verdict": None, "exit_code": None, "run_dir": None,
                                     "report": None, "anomalies": {}, "error": None, "seed": cfg.seed,
                                     "schedule_digest": None, "started": None, "duration_s": None}
            attempt, duration = run_one(again, cfg, self.suite_dir, self.runner, self.progress, self.clock, tag)
            rec.setdefault("reruns", []).append(again)
            done.append(again)
            disagree = " (flaky: the verdicts disagree)" if again["outcome"] in ("valid", "invalid", "unknown") \
                and again["outcome"] != rec["outcome"] else ""
            self.announce(outcome_line(tag, again, duration, attempt) + disagree)
            self._write()
            if attempt.interrupted:
                return EXIT_INTERRUPTED
        if not done:
            self._write()
        return exit_code_of(done)
