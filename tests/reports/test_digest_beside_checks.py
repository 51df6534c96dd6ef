"""``harness.analysis.analyze`` reads the report's digest in a thread while the
checkers run when the run's history.parquet is current (issue 33: the command
a user waits for): the report is the one a digest read afterwards gives. Not
when both at once would not fit in memory."""
from __future__ import annotations

import logging
import re

import pyarrow.parquet as pq

from harness import analysis
from harness.analysis import analyze
from history.row_groups import index_path
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


def test_a_history_too_big_for_both_at_once_is_digested_after_the_checks(fixture_copy, caplog,
                                                                          monkeypatch) -> None:
    """Digest and checks together must fit in the memory available (a 10-minute
    full-speed run's did not, and was killed for memory): else the digest
    waits for the checks, and the report is the same."""
    run_dir = fixture_copy("invalid")
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
    messages = pq.read_metadata(index_path(run_dir / "history.parquet")).num_rows
    need = messages * (analysis.DIGEST_BYTES_PER_MESSAGE + analysis.SPARK_BYTES_PER_MESSAGE)
    assert analysis.fits_beside(run_dir, available=int(need / analysis.MEMORY_SHARE) + 1)
    assert not analysis.fits_beside(run_dir, available=int(need / analysis.MEMORY_SHARE) - 1)
    monkeypatch.setattr(analysis, "_memory_available", lambda: need)
    with caplog.at_level(logging.INFO, logger="harness.analysis"):
        assert analyze(run_dir, {"engine": "reference"}) is False
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("the report's digest waits for the checks") for m in said), said
    assert not any("analysis stage digest" in m for m in said)
    after = _report(run_dir)
    render_run(run_dir)
    assert _report(run_dir) == after and 'class="plot"' in after
