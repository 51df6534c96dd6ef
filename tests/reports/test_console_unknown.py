"""An unknown verdict says why on the console, and a run that never reached its
final drain says that (issue 33)."""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from reports.console import console_summary


def _summary(run_dir: Path) -> str:
    con = Console(record=True, width=200, color_system=None)
    console_summary(run_dir, console=con)
    return con.export_text()


def _edit_results(run_dir: Path, **changes) -> None:
    path = run_dir / "results.json"
    results = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "drains":
            results["stats"]["drains"] = value
        else:
            results[key] = value
    path.write_text(json.dumps(results))


def test_unknown_verdict_lists_its_reasons_under_the_verdict_line(fixture_copy) -> None:
    run_dir = fixture_copy("unknown")
    _edit_results(run_dir, unknown=["2 checker error(s): lost-write: OutOfMemoryError",
                                    "3 acknowledged write(s) were never read (unseen)"],
                  drains={"ops": 4, "ok": 4})
    lines = _summary(run_dir).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("verdict: unknown"))
    under = lines[at + 1:at + 3]
    assert under == ["  because 2 checker error(s): lost-write: OutOfMemoryError",
                     "  because 3 acknowledged write(s) were never read (unseen)"]
    assert "final drain" not in "\n".join(lines)


def test_a_run_without_a_final_drain_says_so_first(fixture_copy) -> None:
    run_dir = fixture_copy("unknown")
    _edit_results(run_dir, unknown=["3 acknowledged write(s) were never read (unseen)"],
                  drains={"ops": 0, "ok": 0})
    lines = _summary(run_dir).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("verdict: unknown"))
    assert lines[at + 1].startswith("  because the run never reached its final drain (interrupted or killed)")
    assert lines[at + 2] == "  because 3 acknowledged write(s) were never read (unseen)"


def test_valid_and_invalid_verdicts_print_no_reasons(fixture_copy) -> None:
    for kind in ("valid", "invalid"):
        run_dir = fixture_copy(kind)
        _edit_results(run_dir, unknown=["stale reason"], drains={"ops": 0, "ok": 0})
        assert "because" not in _summary(run_dir)


def test_results_without_a_drain_count_claim_nothing_about_the_drain(fixture_copy) -> None:
    run_dir = fixture_copy("unknown")      # results written before stats.drains existed
    text = _summary(run_dir)
    assert "final drain" not in text

