"""From a stored history to a verdict and reports: shared by `run` and `analyze`."""
from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import Any

from checkers import analyze_run
from harness.store import write_json
from reports import render_run

log = logging.getLogger(__name__)


def analyze(run_dir: Path, checker_cfg: dict[str, Any] | None = None) -> Any:
    """Run the checkers, write results.json and the reports; return the verdict.

    A crashing checker makes the verdict "unknown" (with its error), never a pass.
    Each stage's seconds are logged (kchaos.log, -v): bench/checker_throughput.py
    reads them.
    """
    t0, cpu0 = time.monotonic(), time.process_time()
    try:
        result = analyze_run(run_dir, checker_cfg or {})
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
    t1, cpu1 = time.monotonic(), time.process_time()
    try:
        render_run(run_dir)
        log.info("analysis stage report: %.2f s (CPU %.2f s)", time.monotonic() - t1, time.process_time() - cpu1)
    except Exception as exc:
        log.error("rendering the report failed: %s", exc)
        log.info("report traceback:\n%s", traceback.format_exc())
    return verdict
