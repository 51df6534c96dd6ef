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


def test_the_fault_seconds_with_progress_where_no_fault_reached_are_a_console_line(fixture_copy) -> None:
    run_dir = fixture_copy("valid")
    path = run_dir / "results.json"
    results = json.loads(path.read_text())
    results["stats"]["fault_progress"] = {"fault_seconds": 40, "with_acks_on_unimpaired": 38}
    path.write_text(json.dumps(results))
    assert ("writes acknowledged on unimpaired partitions in 38 of 40 fault seconds (95%)"
            in _summary(run_dir).splitlines())
    results["stats"].pop("fault_progress")
    path.write_text(json.dumps(results))
    assert "unimpaired" not in _summary(run_dir)


def test_no_fault_second_with_an_unimpaired_partition_is_said_so_not_as_100_percent(fixture_copy) -> None:
    run_dir = fixture_copy("valid")
    path = run_dir / "results.json"
    results = json.loads(path.read_text())
    results["stats"]["fault_progress"] = {"fault_seconds": 0, "with_acks_on_unimpaired": 0}
    path.write_text(json.dumps(results))
    text = _summary(run_dir)
    assert "no fault second left a partition unimpaired" in text and "(100%)" not in text
