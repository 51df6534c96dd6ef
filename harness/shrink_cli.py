"""`kchaos shrink`: search for the smallest schedule that still fails like a stored run.

The search is harness/shrink.py's (pure); this module runs its candidates on
real clusters, prints a line per candidate as it goes, and writes the shrink
folder ``store/shrink/<name>/<timestamp>/``: ``shrunk.toml`` (the smallest
failing scenario, runnable with ``kchaos run --config``), ``shrink.json`` and
``shrink.html`` (original and shrunk side by side, and the path), and
``runs/`` with every candidate's run folder.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import click
import tomli_w
from rich.console import Console
from rich.text import Text

from harness import run_config, schedule
from harness.progress import ConsoleProgress, verbosity_of, verbosity_options
from harness.shrink import ShrinkResult, failing_share, shrink
from harness.store import new_run_dir, resolve_run_dir, write_json
from infra.errors import UsageError

console = Console()
SHRINK_DIR = "shrink"


def register(app: click.Group) -> None:
    @app.command("shrink")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    @click.option("--budget", type=click.FloatRange(min=1), default=60.0, show_default=True,
                  help="Minutes the search may take; it stops with the smallest failing schedule found so far.")
    @click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
                  help="Runs per candidate.")
    @click.option("--share", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
                  help="Share of a candidate's runs that must fail with the original's anomaly types "
                       "(default: at least one run).")
    @click.option("--store", default=None, help="Store for the shrink folder (default: the original's store).")
    @verbosity_options
    def shrink_cmd(run_dir: Path, budget: float, runs: int, share: float | None, store: str | None,
                   verbose: int, quiet: bool) -> int:
        """Search for a smaller schedule that still fails with a stored run's anomaly types.

        Candidates, in order: drop fault steps (a package fault's start with its stop,
        a scenario cycle whole), move the faults earlier and shorten the workload, halve
        each fault's duration, lower the rate and the concurrency. Each candidate runs
        --runs times with the original's seed and counts as failing when at least one
        run (or --share of them) fails with every anomaly type that failed the original.
        Writes store/shrink/<name>/<timestamp>/ with shrunk.toml, shrink.json and
        shrink.html. Exit 0 when a smaller failing schedule was found, 1 when none was,
        130 interrupted, 64 for a run that did not fail or has no history.
        """
        from harness.reproduce import load_run     # here: pyarrow, as in suite_cli
        from harness.suite import default_runner
        from reports.shrink_page import render_shrink
        verbosity = verbosity_of(verbose, quiet)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a run folder")
        run_dir = resolve_run_dir(run_dir).resolve()    # the folder itself, not a latest link
        if not (run_dir / "config.json").is_file():
            raise UsageError(f"{run_dir} has no config.json: not a kchaos run folder")
        original = load_run(run_dir)
        if original.faults is None:
            raise UsageError(f"{run_dir}: {original.problem}: nothing to shrink")
        if not (run_dir / "results.json").is_file():
            raise UsageError(f"{run_dir} has no results.json; run `kchaos analyze {run_dir}` first")
        if not original.anomaly_types:
            raise UsageError(f"{run_dir} was {original.verdict} with no failing anomaly type: nothing to shrink")
        cfg = run_config.load(run_dir / "config.json")
        if not cfg.nemesis.faults:
            raise UsageError(f"{run_dir} ran no faults: there is no schedule to shrink")
        wanted = set(original.anomaly_types)
        if original.digest is not None and original.digest != schedule.digest(cfg):
            console.print(Text("the plan recomputed from config.json differs from the stored digest: the schedule "
                               "code changed since the run, so the shrink starts from today's plan of its seed",
                               style="yellow"), soft_wrap=True)
        shrink_dir = new_run_dir((Path(store) if store else run_dir.parent.parent) / SHRINK_DIR, cfg.name)
        cfg.store, cfg.keep_cluster = str(shrink_dir / "runs"), False
        rule = f"at least {share:.0%} of its {runs} runs" if share else f"at least one of its {runs} runs"
        rule += f" failed with {', '.join(sorted(wanted))}"
        console.print(f"shrinking {run_dir}: seed {cfg.seed}, {len(original.faults)} fault steps executed, "
                      f"failing with {', '.join(sorted(wanted))}; budget {budget:g} min; a candidate fails when "
                      f"{rule}", highlight=False, soft_wrap=True)
        deadline = time.monotonic() + budget * 60
        path_runs: list[list[dict[str, Any]]] = []
        found: dict[str, Any] = {}

        def still_fails(candidate: run_config.RunConfig, change: str) -> bool:
            n = len(path_runs) + 1
            outcomes: list[set[str]] = []
            records: list[dict[str, Any]] = []
            for i in range(runs):
                with ConsoleProgress(verbosity) as progress:
                    progress.begin(f"candidate {n} run {i + 1}/{runs}: {change}")
                    attempt = default_runner(copy.deepcopy(candidate), progress)
                if attempt.interrupted:
                    raise KeyboardInterrupt
                types = set(load_run(Path(attempt.run_dir)).anomaly_types) if attempt.run_dir else set()
                outcomes.append(types)
                records.append({"run_dir": str(attempt.run_dir) if attempt.run_dir else None,
                                "verdict": attempt.verdict if attempt.error is None else "error",
                                "failing_types": sorted(types)})
                if not share and wanted <= types:
                    break                               # one failing run decides it
            path_runs.append(records)
            failed = failing_share(outcomes, wanted) >= (share or 1e-9)
            if failed:
                found["run_dir"] = next(r["run_dir"] for r, t in zip(records, outcomes) if wanted <= t)
                found["failing_types"] = sorted(next(t for t in outcomes if wanted <= t))
            word = Text("still fails: kept", style="bold green") if failed else Text("passes: dropped", style="dim")
            console.print(Text(f"[{n}] {change}: {len(candidate.nemesis.steps)} steps, "
                               f"{candidate.time_limit:g} s, rate {candidate.rate:g}, "
                               f"concurrency {candidate.concurrency}: "
                               f"{sum(wanted <= t for t in outcomes)}/{len(outcomes)} runs failed with "
                               f"{', '.join(sorted(wanted))} -> ") + word, soft_wrap=True)
            return failed

        try:
            result = shrink(cfg, still_fails, over_budget=lambda: time.monotonic() > deadline)
        except KeyboardInterrupt:
            console.print("shrink interrupted")
            return 130
        toml_path = _write_outputs(shrink_dir, run_dir, cfg, result, path_runs, found, original, rule)
        page = render_shrink(shrink_dir)
        smaller = bool(found)
        headline = (f"shrunk from {len(result.original.nemesis.steps) or len(original.faults)} planned fault steps "
                    f"to {len(result.smallest.nemesis.steps)}, workload {result.original.time_limit:g} s to "
                    f"{result.smallest.time_limit:g} s" if smaller else "no smaller schedule failed")
        console.print(f"{headline}{' (budget spent)' if result.out_of_budget else ''}; {len(result.path)} "
                      f"candidates", highlight=False, soft_wrap=True)
        console.print(Text("shrunk scenario: ") + Text(str(toml_path), style="underline"), soft_wrap=True)
        console.print(Text("shrink page: ") + Text(str(page), style="underline"), soft_wrap=True)
        return 0 if smaller else 1


def _without_none(value: Any) -> Any:
    """TOML has no null: a missing key means the default, which is what None meant."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _write_outputs(shrink_dir: Path, run_dir: Path, cfg: run_config.RunConfig, result: ShrinkResult,
                   path_runs: list[list[dict[str, Any]]], found: dict[str, Any], original, rule: str) -> Path:
    smallest = copy.deepcopy(result.smallest)
    smallest.store = "store"
    smallest.name = f"{cfg.name}-shrunk"
    toml_path = shrink_dir / "shrunk.toml"
    header = (f"# kchaos shrink of {run_dir} (seed {cfg.seed}): the smallest schedule found that still fails\n"
              f"# with {', '.join(original.anomaly_types)}. Run: kchaos run --config {toml_path}\n")
    toml_path.write_text(header + tomli_w.dumps(_without_none(smallest.to_json())))
    original_steps = [{"at": at, "f": op["f"], "value": op.get("value") or {}}
                      for at, op in schedule.fault_plan(cfg)]
    data = {
        "name": cfg.name, "toml": str(toml_path), "rule": rule,
        "headline": f"{len(original_steps)} planned fault steps shrunk to {len(smallest.nemesis.steps)}"
                    if found else "no smaller schedule failed: the original is the smallest found",
        "original": {"run_dir": str(run_dir), "steps": original_steps, "time_limit": cfg.time_limit,
                     "rate": cfg.rate, "concurrency": cfg.concurrency, "failing_types": original.anomaly_types},
        "shrunk": {"run_dir": found.get("run_dir"), "steps": smallest.nemesis.steps, "time_limit": smallest.time_limit,
                   "rate": smallest.rate, "concurrency": smallest.concurrency,
                   "failing_types": found.get("failing_types", [])},
        "out_of_budget": result.out_of_budget,
        "path": [{"change": a.change, "steps": a.steps, "failed": a.failed, "runs": runs}
                 for a, runs in zip(result.path, path_runs)],
    }
    write_json(shrink_dir / "shrink.json", data)
    return toml_path

