"""`kchaos suite` and `kchaos reproduce`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness import run_config, schedule, suite_config
from harness.progress import ConsoleProgress, verbosity_of, verbosity_options
from harness.store import resolve_run_dir
from infra.distribution import check_available
from infra.errors import KafkaVersionNotFound, UsageError

console = Console()
err_console = Console(stderr=True)

_STYLE = {"valid": "bold green", "invalid": "bold red", "unknown": "bold yellow", "error": "bold magenta",
          "interrupted": "bold yellow", "skipped": "dim", "pending": "dim"}
_CODE_WORD = {0: "valid", 1: "INVALID", 2: "unknown", 3: "error", 130: "interrupted"}


def _print_suite(suite_dir: Path, code: int, verbosity: int = 0) -> None:
    index = Text(str((suite_dir / "index.html").resolve()), style="underline")
    if verbosity < 0:  # -q: the verdict only
        word = _CODE_WORD.get(code, str(code))
        console.print(Text(word, style=_STYLE.get(word.lower(), "bold")) + Text("  ") + index, soft_wrap=True)
        return
    # imported here, as harness.suite and harness.reproduce below: they load pyarrow (~0.25 s),
    # and `kchaos --help` and usage errors need not wait for it
    from reports.suite_report import is_flaky
    data = json.loads((suite_dir / "suite.json").read_text())
    table = Table(title=Text(f"kchaos suite: {data['name']}"), title_justify="left")
    for col in ("#", "run", "verdict", "anomalies", "time"):
        table.add_column(col, justify="right" if col in ("#", "time") else "left", overflow="fold")
    for r in data["runs"]:
        failing = ", ".join(f"{a['count']} {t}" for t, a in r["anomalies"].items() if not a.get("allowed"))
        note = r.get("error") or r.get("skip_reason") or ""
        verdict = Text(r["outcome"], style=_STYLE.get(r["outcome"], ""))
        for again in r.get("reruns") or []:
            verdict += Text(" / rerun ") + Text(str(again.get("outcome")), style=_STYLE.get(again.get("outcome"), ""))
        if is_flaky(r):
            verdict += Text(" flaky", style="bold yellow")
        table.add_row(str(r["index"]), Text(r["name"]), verdict,
                      Text(failing or note), "" if r["duration_s"] is None else f"{r['duration_s']:.0f}s")
    console.print(table)
    console.print(Text("index: ") + index)
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
    digest = data.get("schedule_digest")
    for key in run_config.STORED_KEYS:
        data.pop(key, None)
    return data, digest


def _results(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "results.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def register(app: click.Group) -> None:
    @app.command("suite")
    @click.argument("suite_file", type=click.Path(path_type=Path), required=False)
    @click.option("--store", default=None, help="Store folder (default: the base config's, else ./store; "
                  "with --rerun-failed, each original run's store).")
    @click.option("--time-budget", type=float, default=None, help="Seconds for the whole suite (overrides the file).")
    @click.option("--dry-run", is_flag=True, help="List the runs the matrix expands to, once every Kafka "
                  "version they use is found in the cache or on Maven Central (or list the runs "
                  "--rerun-failed would rerun), and exit.")
    @click.option("--rerun-failed", "rerun_dir", type=click.Path(path_type=Path), default=None,
                  metavar="SUITE_DIR", help="Rerun the invalid and unknown runs of this suite folder with their "
                  "stored configs and seeds; record the reruns there and mark runs whose verdict changed flaky.")
    @verbosity_options
    def suite_cmd(suite_file: Path | None, store: str | None, time_budget: float | None, dry_run: bool,
                  rerun_dir: Path | None, verbose: int, quiet: bool) -> int:
        """Run a matrix of chaos runs (a suite TOML file), one after another on fresh clusters.

        Writes store/suites/<name>/<timestamp>/ with index.html, junit.xml and suite.json,
        and prints a line per run with its verdict and its place (k/n).
        Exit 0 all valid, 1 some invalid, 2 some unknown, 3 some harness error (the worst
        run decides), 64 usage error, 130 interrupted. With --rerun-failed SUITE_DIR
        (no suite file), the worst rerun decides.
        """
        from harness.suite import SuiteRun     # (pyarrow: see _print_suite)
        verbosity = verbosity_of(verbose, quiet)
        if rerun_dir is not None:
            if suite_file is not None or time_budget is not None:
                raise UsageError("--rerun-failed takes a suite folder instead of a suite file (and no --time-budget)")
            return _rerun_failed(rerun_dir, store, dry_run, verbosity)
        if suite_file is None:
            raise UsageError("give a suite file (kchaos suite SUITE_FILE) or --rerun-failed SUITE_DIR")
        suite = suite_config.load(suite_file)
        if time_budget is not None:
            if time_budget <= 0:
                raise UsageError(f"--time-budget must be positive, got {time_budget:g}")
            suite.time_budget = time_budget
        planned = suite_config.expand(suite, store)
        if dry_run:
            _check_versions(suite_file, planned)
            for p in planned:
                c = p.config
                console.print(f"{p.index:3d}  {p.name}  {p.cell}  ({c.nodes} nodes, {c.time_limit:g} s)",
                              highlight=False, soft_wrap=True)
            return 0
        store_dir = Path(planned[0].config.store)
        with ConsoleProgress(verbosity, prefix="kchaos suite") as progress:
            suite_dir, code = SuiteRun(suite, planned, store_dir, progress, announce=progress.note).execute()
        _print_suite(suite_dir, code, verbosity)
        return code

    @app.command("reproduce")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    @click.option("--times", type=click.IntRange(min=1), default=1, show_default=True,
                  help="How many reproductions.")
    @click.option("--store", default=None, help="Store for the new runs (default: the original's store).")
    @click.option("--time-tolerance", type=click.FloatRange(min=0), default=5.0, show_default=True,
                  help="Seconds two runs' fault steps may be apart (each step's gap after the previous "
                       "nemesis op completed).")
    @verbosity_options
    def reproduce_cmd(run_dir: Path, times: int, store: str | None, time_tolerance: float, verbose: int,
                      quiet: bool) -> int:
        """Run again with a stored run's config and seed; compare what ran, side by side.

        Compared per reproduction: the fault sequence as executed (the nemesis ops that
        completed with an action, in order: op, action, fault kind, planned target, nodes,
        and each step's gap after the previous nemesis op completed within --time-tolerance,
        except the final phase's heals after the time limit), the non-allowed anomaly types found, and
        the verdict. Nodes are compared only where the plan fixed them (a node index, all,
        a seeded minority or partition); for targets resolved at run time (leader,
        controller, isolate-leader, isolate-controller) a reproduction may hit another
        node, so only the planned target is compared and a node difference is a note.
        The planned-schedule digest (the plan recomputed from config.json) is shown as a
        cheap first check only. Software differences (config.json's ran_on: kchaos commit,
        Python packages, JDK, Kafka jars, node image) are printed first, as notes.

        Two answers apart: did everything match, and, for an original that failed, did
        the failure come back (the same verdict with every anomaly type that failed the
        original; more types still count). Exit 0 when every reproduction matches
        everything, 1 otherwise, 3 when a reproduction failed to run, 130 interrupted.
        """
        from harness import reproduce          # (both: pyarrow, see _print_suite)
        from harness.suite import default_runner
        verbosity = verbosity_of(verbose, quiet)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a run folder")
        run_dir = resolve_run_dir(run_dir)
        data, stored_digest = _stored_config(run_dir)
        cfg = run_config.from_dict(data, str(run_dir / "config.json"))
        if cfg.seed is None:
            raise UsageError(f"{run_dir / 'config.json'} has no seed: the run cannot be reproduced")
        if _results(run_dir) is None:
            raise UsageError(f"{run_dir} has no readable results.json; run `kchaos analyze {run_dir}` first")
        original = reproduce.prepare_rerun(cfg, run_dir, store)
        recomputed = schedule.digest(cfg)
        console.print(f"original {run_dir}: seed {cfg.seed}, {len(original.faults)} fault steps executed, "
                      f"verdict {original.verdict}, anomaly types: {', '.join(original.anomaly_types) or 'none'}",
                      highlight=False, soft_wrap=True)
        console.print(f"planned-schedule digest (the plan from config.json, not what ran): "
                      f"stored {stored_digest or 'not stored'}, recomputed {recomputed}",
                      highlight=False, soft_wrap=True)
        if stored_digest is not None and stored_digest != recomputed:
            console.print(Text("the plan recomputed from config.json differs from the stored digest: config.json "
                               "or the schedule code changed since the original run", style="yellow"),
                          soft_wrap=True)
        all_same, failed, came_back, matched, ran = True, False, 0, 0, 0
        for i in range(1, times + 1):
            with ConsoleProgress(verbosity) as progress:
                progress.begin(f"reproduction {i}/{times}")
                attempt = default_runner(cfg, progress)
            if attempt.interrupted:
                console.print(f"reproduction {i}/{times}: interrupted")
                return 130
            tag = f"reproduction {i}/{times}"
            if attempt.run_dir is None or attempt.error is not None:
                failed = True
                console.print(Text(f"{tag}: failed to run: {attempt.error}", style="bold magenta"))
                continue
            new = reproduce.load_run(Path(attempt.run_dir))
            cmp = reproduce.compare(original, new, time_tolerance)
            reproduce.render(cmp, console, tag)
            all_same &= cmp.matches
            ran += 1
            matched += cmp.matches
            came_back += bool(cmp.failure_came_back)
            same_digest = new.digest == recomputed and stored_digest in (None, recomputed)

            def word(ok: bool, yes: str) -> Text:
                return Text(yes, style="green") if ok else Text("DIFFERENT", style="bold red")
            console.print(Text(f"{tag}: ") + word(cmp.matches, "MATCH") + Text(f"  {attempt.run_dir}  fault sequence ")
                          + word(cmp.same_faults, "same") + Text("  anomaly types ") + word(cmp.same_types, "same")
                          + Text("  verdict ") + word(cmp.same_verdict, "same")
                          + Text("  (planned-schedule digest ") + word(same_digest, "identical") + Text(")"),
                          soft_wrap=True)
            if cmp.failure_came_back is not None:
                console.print(Text(f"{tag}: the failure ({original.verdict}: "
                                   f"{', '.join(original.anomaly_types) or 'no anomaly type'}) ")
                              + (Text("came back", style="bold green") if cmp.failure_came_back
                                 else Text("did not come back", style="bold red")), soft_wrap=True)
        if ran:
            summary = f"{ran} reproductions: everything matched in {matched} of {ran}"
            if original.verdict != reproduce.VALID:
                summary += f"; the failure came back in {came_back} of {ran}"
            console.print(summary, highlight=False, soft_wrap=True)
        if failed:
            return 3
        return 0 if all_same else 1


def _check_versions(suite_file: Path, planned: list[suite_config.PlannedRun]) -> None:
    """Every Kafka version the runs use resolves (infra.distribution.check_available),
    so a dry run does not list a run that would fail at its first step."""
    for version in dict.fromkeys(p.config.kafka_version for p in planned):
        try:
            check_available(version)
        except KafkaVersionNotFound as exc:
            runs = ", ".join(p.name for p in planned if p.config.kafka_version == version)
            raise UsageError(f"{suite_file}: {exc} (runs {runs})") from None


def _rerun_failed(suite_dir: Path, store: str | None, dry_run: bool, verbosity: int) -> int:
    """``kchaos suite --rerun-failed SUITE_DIR`` (see harness.suite.SuiteRerun)."""
    from harness.suite import SuiteRerun       # (pyarrow: see _print_suite)
    if (suite_dir / "latest").is_dir() and not (suite_dir / "suite.json").exists():
        suite_dir = (suite_dir / "latest").resolve()   # store/suites/<name>: its newest suite run
    if not suite_dir.is_dir():
        raise UsageError(f"{suite_dir} is not a suite folder")
    with ConsoleProgress(verbosity, prefix="kchaos suite") as progress:
        rerun = SuiteRerun(suite_dir, store, progress, announce=progress.note)
        if dry_run:
            for rec, cfg in zip(rerun.records, rerun.configs):
                console.print(f"{rec['index']:3d}  {rec['name']}  {rec['outcome']}  seed {cfg.seed}  {rec['cell']}",
                              highlight=False, soft_wrap=True)
            return 0
        if not rerun.records:
            progress.note("no invalid or unknown runs to rerun")
        code = rerun.execute()
    _print_suite(suite_dir, code, verbosity)
    return code
