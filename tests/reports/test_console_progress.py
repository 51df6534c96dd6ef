"""The console's line on progress where no fault reached (issue 31), from the
checkers' ``stats.fault_progress``."""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from reports.console import console_summary


def _summary(run_dir: Path) -> str:
    con = Console(record=True, width=200, color_system=None)
    console_summary(run_dir, console=con)
    return con.export_text()


def _with_progress(run_dir: Path, progress: dict | None) -> None:
    """results.json's ``stats.fault_progress`` set to ``progress`` (None: removed)."""
    path = run_dir / "results.json"
    results = json.loads(path.read_text())
    results["stats"].pop("fault_progress", None)
    if progress is not None:
        results["stats"]["fault_progress"] = progress
    path.write_text(json.dumps(results))


def test_the_fault_seconds_with_progress_where_no_fault_reached_are_a_console_line(fixture_copy) -> None:
    run_dir = fixture_copy("valid")
    _with_progress(run_dir, {"fault_seconds": 40, "with_acks_on_unimpaired": 38})
    assert ("writes acknowledged on unimpaired partitions in 38 of 40 fault seconds (95%)"
            in _summary(run_dir).splitlines())
    _with_progress(run_dir, None)
    assert "unimpaired" not in _summary(run_dir)


def test_no_fault_second_with_an_unimpaired_partition_is_said_so_not_as_100_percent(fixture_copy) -> None:
    run_dir = fixture_copy("valid")
    _with_progress(run_dir, {"fault_seconds": 0, "with_acks_on_unimpaired": 0})
    text = _summary(run_dir)
    assert "no fault second left a partition unimpaired" in text and "(100%)" not in text
