"""`kchaos replay`: a stored run's executed faults and client ops again, at their recorded times.

harness/replay.py turns the history into the run's plan and its workers' op
streams; this command runs it on a fresh cluster and compares the replay with
the original the way `kchaos reproduce` does (harness/reproduce.py).
"""
from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from harness import replay, run_config
from harness.progress import ConsoleProgress, verbosity_of, verbosity_options
from harness.store import resolve_run_dir
from history.ops import HistoryFormatError, read_history
from infra.errors import UsageError

console = Console()


def register(app: click.Group) -> None:
    @app.command("replay")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    @click.option("--store", default=None, help="Store for the replay's run (default: the original's store).")
    @verbosity_options
    def replay_cmd(run_dir: Path, store: str | None, verbose: int, quiet: bool) -> int:
        """Run a stored run's executed fault steps and its clients' ops again, each at its
        recorded time, and compare the replay with the original side by side.

        Closer than `kchaos reproduce` (same seed, same plan) to the same interleaving:
        the fault steps the history executed become an explicit plan at their recorded
        times, and every worker invokes its recorded ops in order at their recorded gaps.
        Kafka and the network still decide when each op lands. Exit 0 when the replay matches (fault
        sequence, anomaly types, verdict), 1 otherwise, 3 when it failed to run.
        """
        from harness import reproduce                  # here: pyarrow, as in suite_cli
        from harness.suite import default_runner
        verbosity = verbosity_of(verbose, quiet)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a run folder")
        run_dir = resolve_run_dir(run_dir)
        if not (run_dir / "config.json").is_file():
            raise UsageError(f"{run_dir} has no config.json: not a kchaos run folder")
        try:
            ops = list(read_history(run_dir / "history.jsonl"))
        except (OSError, HistoryFormatError) as exc:
            raise UsageError(f"{run_dir}: no readable history: {exc}") from None
        cfg = run_config.load(run_dir / "config.json")
        stored = run_config.load_stored_facts(run_dir / "config.json")
        workload_s = float(stored.get("workload_seconds") or cfg.time_limit)
        cfg.workload.replay = str((run_dir / "history.jsonl").resolve())
        cfg.time_limit = round(workload_s + 0.5, 3)
        if cfg.nemesis.faults:
            cfg.nemesis.steps = replay.replayed_steps(ops, cfg.time_limit)
            if not cfg.nemesis.steps:
                cfg.nemesis.faults = []
        original = reproduce.prepare_rerun(cfg, run_dir, store)
        lost = replay.unplaced_ops(ops, cfg.concurrency)
        console.print(f"replaying {run_dir}: {len(cfg.nemesis.steps)} fault steps and "
                      f"{sum(len(replay.replayed_ops(ops, w, cfg.concurrency)) for w in range(cfg.concurrency))} "
                      f"client ops at their recorded times, {workload_s:.0f} s of workload"
                      + (f"; {lost} client ops of later processes left out (a history from before the "
                         f"invokes named their worker)" if lost else ""), highlight=False, soft_wrap=True)
        with ConsoleProgress(verbosity) as progress:
            progress.begin("replay")
            attempt = default_runner(cfg, progress)
        if attempt.interrupted:
            return 130
        if attempt.run_dir is None or attempt.error is not None:
            console.print(Text(f"replay failed to run: {attempt.error}", style="bold magenta"))
            return 3
        cmp = reproduce.compare(original, reproduce.load_run(Path(attempt.run_dir)))
        reproduce.render(cmp, console, "replay")
        word = Text("MATCH", style="green") if cmp.matches else Text("DIFFERENT", style="bold red")
        console.print(Text("replay: ") + word + Text(f"  {attempt.run_dir}"), soft_wrap=True)
        if cmp.failure_came_back is not None:
            console.print(Text("replay: the failure ") + (Text("came back", style="bold green")
                          if cmp.failure_came_back else Text("did not come back", style="bold red")))
        return 0 if cmp.matches else 1
