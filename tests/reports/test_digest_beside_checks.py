"""``harness.analysis.analyze`` reads the report's digest in a thread while the
checkers run when the run's history.parquet is current (issue 33: the command
a user waits for): the report is the one a digest read afterwards gives."""
from __future__ import annotations

import logging
import re

from harness.analysis import analyze
from history.parquet import history_to_parquet
from reports import render_run

GENERATED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _report(run_dir) -> str:
    return GENERATED.sub("", (run_dir / "report.html").read_text())


def test_the_digest_read_beside_the_checks_gives_the_same_report(fixture_copy, caplog) -> None:
    run_dir = fixture_copy("invalid")
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
    with caplog.at_level(logging.INFO, logger="harness.analysis"):
        verdict = analyze(run_dir, {"engine": "reference"})
    assert verdict is False
    stage = next(r.getMessage() for r in caplog.records if "analysis stage digest" in r.getMessage())
    assert "with progress, latency, unseen, lag" in stage, stage      # reports/early.py made them beside the checks
    beside = _report(run_dir)
    assert 'class="plot"' in beside
    render_run(run_dir)                      # the digest read here, after the checks
    assert _report(run_dir) == beside


def test_a_history_without_its_parquet_is_digested_after_the_checks(fixture_copy, caplog) -> None:
    run_dir = fixture_copy("valid")
    (run_dir / "history.parquet").unlink(missing_ok=True)
    with caplog.at_level(logging.INFO, logger="harness.analysis"):
        analyze(run_dir, {"engine": "reference"})
    assert not any("analysis stage digest" in r.getMessage() for r in caplog.records)
    assert 'class="plot"' in (run_dir / "report.html").read_text()


def test_a_jsonl_history_is_digested_from_the_conversion_beside_the_spark_checks(fixture_copy, caplog) -> None:
    run_dir = fixture_copy("invalid")
    (run_dir / "history.parquet").unlink(missing_ok=True)
    with caplog.at_level(logging.INFO, logger="harness.analysis"):
        verdict = analyze(run_dir, {"engine": "spark", "spark_master": "local[1]"})
    assert verdict is False
    assert any("analysis stage digest" in r.getMessage() for r in caplog.records)
    beside = _report(run_dir)
    render_run(run_dir)
    assert _report(run_dir) == beside
