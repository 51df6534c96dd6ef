"""`kchaos suite` and `kchaos reproduce`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.errors import UsageError

console = Console()
err_console = Console(stderr=True)

_STYLE = {"valid": "bold green", "invalid": "bold red", "unknown": "bold yellow", "error": "bold magenta",
          "interrupted": "bold yellow", "skipped": "dim", "pending": "dim"}


def _print_suite(suite_dir: Path, code: int) -> None:
    data = json.loads((suite_dir / "suite.json").read_text())
    table = Table(title=Text(f"kchaos suite: {data['name']}"), title_justify="left")
    for col in ("#", "run", "verdict", "anomalies", "time"):
        table.add_column(col, justify="right" if col in ("#", "time") else "left", overflow="fold")
    for r in data["runs"]:
        failing = ", ".join(f"{a['count']} {t}" for t, a in r["anomalies"].items() if not a.get("allowed"))
        note = r.get("error") or r.get("skip_reason") or ""
        table.add_row(str(r["index"]), Text(r["name"]), Text(r["outcome"], style=_STYLE.get(r["outcome"], "")),
                      Text(failing or note), "" if r["duration_s"] is None else f"{r['duration_s']:.0f}s")
    console.print(table)
    console.print(Text("index: ") + Text(str((suite_dir / "index.html").resolve()), style="underline"))
    console.print(f"exit code {code}")


def _stored_config(run_dir: Path) -> tuple[dict[str, Any], Any]:
    """config.json of a run folder as a RunConfig dict (without the digest) and the digest."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise UsageError(f"{run_dir} has no config.json: not a kchaos run folder")
    try:
        data = json.loads(path.read_text(errors="replace"))
    except ValueError as exc:
        raise UsageError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object")
    digest = data.pop("schedule_digest", None)
    return data, digest


def anomaly_types(results: Any) -> set[str]:
    """Non-allowed anomaly types with a count above zero."""
    from reports.load import anomaly_rows
    return {a.type for a in anomaly_rows(results if isinstance(results, dict) else None) if a.failing}


def _results(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "results.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def register(app: click.Group) -> None:
    @app.command("suite")
    @click.argument("suite_file", type=click.Path(path_type=Path))
    @click.option("--store", default=None, help="Store folder (default: the base config's, else ./store).")
    @click.option("--time-budget", type=float, default=None, help="Seconds for the whole suite (overrides the file).")
    @click.option("--dry-run", is_flag=True, help="List the runs the matrix expands to, and exit.")
    def suite_cmd(suite_file: Path, store: str | None, time_budget: float | None, dry_run: bool) -> int:
        """Run a matrix of chaos runs (a suite TOML file), one after another on fresh clusters.

        Writes store/suites/<name>/<timestamp>/ with index.html, junit.xml and suite.json.
        Exit 0 all valid, 1 some invalid, 2 some unknown, 3 some harness error (the worst
        run decides), 64 usage error, 130 interrupted.
        """
        from harness import suite_config
        from harness.run_cli import Progress
        from harness.suite import SuiteRun
        suite = suite_config.load(suite_file)
        if time_budget is not None:
            if time_budget <= 0:
                raise UsageError(f"--time-budget must be positive, got {time_budget:g}")
            suite.time_budget = time_budget
        planned = suite_config.expand(suite, store)
        if dry_run:
            for p in planned:
                c = p.config
                console.print(f"{p.index:3d}  {p.name}  {p.cell}  ({c.nodes} nodes, {c.time_limit:g} s)",
                              highlight=False, soft_wrap=True)
            return 0
        store_dir = Path(planned[0].config.store)
        def announce(text: str) -> None:
            err_console.print(f"kchaos suite: {text}", highlight=False, soft_wrap=True)
        with Progress() as progress:
            suite_dir, code = SuiteRun(suite, planned, store_dir, progress, announce=announce).execute()
        _print_suite(suite_dir, code)
        return code

    @app.command("reproduce")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    @click.option("--times", type=click.IntRange(min=1), default=1, show_default=True,
                  help="How many reproductions.")
    @click.option("--store", default=None, help="Store for the new runs (default: the original's store).")
    def reproduce_cmd(run_dir: Path, times: int, store: str | None) -> int:
        """Run again with a stored run's config and seed; compare the schedule and the anomalies.

        Exit 0 when every reproduction has the identical schedule digest and the same
        anomaly types, 1 otherwise, 3 when a reproduction failed to run, 130 interrupted.
        """
        from harness import config as cfgmod
        from harness import schedule
        from harness.run_cli import Progress
        from harness.suite import default_runner
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a run folder")
        from harness.store import resolve_run_dir
        run_dir = resolve_run_dir(run_dir)
        data, stored_digest = _stored_config(run_dir)
        cfg = cfgmod.from_dict(data, str(run_dir / "config.json"))
        if cfg.seed is None:
            raise UsageError(f"{run_dir / 'config.json'} has no seed: the run cannot be reproduced")
        original = _results(run_dir)
        if original is None:
            raise UsageError(f"{run_dir} has no readable results.json; run `kchaos analyze {run_dir}` first")
        cfg.store = store or str(run_dir.parent.parent)
        cfg.keep_cluster = False
        cfgmod.validate(cfg)
        recomputed = schedule.digest(cfg)
        want = anomaly_types(original)
        console.print(f"original {run_dir}: seed {cfg.seed}, schedule {stored_digest or 'not stored'}"
                      f" (recomputed {recomputed}), anomaly types: {', '.join(sorted(want)) or 'none'}",
                      highlight=False, soft_wrap=True)
        if stored_digest is None:
            console.print("note: config.json stores no schedule digest; comparing with the recomputed one",
                          highlight=False)
        elif stored_digest != recomputed:
            console.print(Text("the schedule recomputed from config.json differs from the stored digest: "
                               "the schedule code changed since the original run", style="yellow"))
        all_same, failed = True, False
        for i in range(1, times + 1):
            with Progress() as progress:
                attempt = default_runner(cfg, progress)
            if attempt.interrupted:
                console.print(f"reproduction {i}/{times}: interrupted")
                return 130
            tag = f"reproduction {i}/{times}"
            if attempt.run_dir is None or attempt.error is not None:
                failed = True
                console.print(Text(f"{tag}: failed to run: {attempt.error}", style="bold magenta"))
                continue
            _, new_digest = _stored_config(Path(attempt.run_dir))
            same_schedule = new_digest == recomputed and stored_digest in (None, recomputed)
            new_results = _results(Path(attempt.run_dir))
            got = anomaly_types(new_results)
            same_types = new_results is not None and got == want
            all_same &= same_schedule and same_types
            verdict = {True: "valid", False: "invalid"}.get((new_results or {}).get("valid"), "unknown")
            sched = Text("identical", style="green") if same_schedule else \
                Text(f"DIFFERENT (stored {stored_digest}, recomputed {recomputed}, new {new_digest})", style="bold red")
            types = Text("same", style="green") if same_types else Text("DIFFERENT", style="bold red")
            console.print(Text(f"{tag}: {attempt.run_dir}  verdict {verdict}  schedule digest ") + sched
                          + Text(" (" + (new_digest or "none") + ")  anomaly types ") + types
                          + Text(f" ({', '.join(sorted(got)) or 'none'}"
                                 + (f"; original {', '.join(sorted(want)) or 'none'}" if not same_types else "") + ")"),
                          soft_wrap=True)
        if failed:
            return 3
        return 0 if all_same else 1
