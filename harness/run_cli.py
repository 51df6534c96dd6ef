"""`kchaos run`, `kchaos analyze`, `kchaos report`."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from harness.analysis import analyze
from harness.progress import ConsoleProgress, verbosity_of, verbosity_options
from harness.store import attach_log_file, resolve_run_dir
from nemesis.packages import BY_NAME_ONLY, PACKAGES
from nemesis.scenarios import SCENARIOS

# The run config, the runner and the reports are imported in the commands that use them,
# so that `kchaos --help` answers before the clients, pyarrow and the report renderers load.

DEFAULT_CONFIG = Path(__file__).with_name("default.toml")
console = Console()
err_console = Console(stderr=True)


def _nemesis_help() -> str:
    return (f"Fault packages, comma separated: {', '.join(PACKAGES)} (all: these); by name only: "
            f"{', '.join([*BY_NAME_ONLY, *SCENARIOS])}; none for no faults.")


NEMESIS_HELP = _nemesis_help()


def run_options(f):
    for opt in reversed([
        click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
                     help="Run config (TOML, or a stored config.json). Default: the embedded default."),
        click.option("--nodes", type=int, default=None, help="Number of brokers (1-7)."),
        click.option("--kafka-version", default=None, help="Kafka release from Maven Central."),
        click.option("--time-limit", type=float, default=None, help="Seconds of workload."),
        click.option("--rate", type=float, default=None, help="Target ops per second, all workers together."),
        click.option("--concurrency", type=int, default=None, help="Worker threads (client workers)."),
        click.option("--seed", type=int, default=None, help="Seed for the schedule (drawn if absent)."),
        click.option("--nemesis", default=None, help=NEMESIS_HELP),
        click.option("--nemesis-interval", type=float, default=None, help="Mean seconds between fault steps."),
        click.option("--name", default=None, help="Run name (store/<name>/...)."),
        click.option("--store", default=None, help="Store folder (default ./store)."),
        click.option("--keep-cluster", is_flag=True, default=None, help="Leave the cluster up afterwards."),
        click.option("--spark-master", default=None, help="Spark master for the checkers (default local[2])."),
    ]):
        f = opt(f)
    return f


def build_config(config_path: Path | None, **flags):
    from harness import run_config as cfgmod   # here: see the note on imports above
    cfg = cfgmod.load(config_path or DEFAULT_CONFIG)
    nemesis = flags.pop("nemesis")
    if nemesis is not None:
        cfg.nemesis.faults = [] if nemesis.strip() in ("", "none") else [nemesis]
    interval = flags.pop("nemesis_interval")
    if interval is not None:
        cfg.nemesis.interval = interval
    inventory = flags.pop("inventory", None)
    if inventory is not None:
        cfg.backend, cfg.inventory = "ssh", str(inventory)
    spark_master = flags.pop("spark_master")
    if spark_master is not None:
        cfg.checker["spark_master"] = spark_master
    cfgmod.override(cfg, **{k: v for k, v in flags.items()})
    return cfgmod.validate(cfg)


def verdict_line(run_dir: Path) -> Text:
    """The -q output: the verdict and where the report is, one line."""
    from reports.load import INVALID, VALID, load_run   # here: see the note on imports above
    verdict = load_run(Path(run_dir)).verdict
    label, style = {VALID: ("valid", "bold green"), INVALID: ("INVALID", "bold red")}.get(
        verdict, ("unknown", "bold yellow"))
    return Text(label, style=style) + Text(f"  {Path(run_dir) / 'report.html'}")


def execute(cfg, verbosity: int = 0) -> int:
    from harness.runner import Runner   # here: see the note on imports above
    from reports import console_summary
    with ConsoleProgress(verbosity) as progress:
        outcome = Runner(cfg, progress).execute()
    if outcome.interrupted:
        err_console.print(f"kchaos: run interrupted; history so far in {outcome.run_dir / 'history.jsonl'}")
        return outcome.exit_code
    if verbosity < 0:
        console.print(verdict_line(outcome.run_dir), soft_wrap=True)
    else:
        console_summary(outcome.run_dir, console)
    return outcome.exit_code


def register(app: click.Group) -> None:
    @app.command("run")
    @run_options
    @click.option("--inventory", type=click.Path(path_type=Path), default=None,
                  help="Run on the SSH hosts of this inventory (TOML) instead of local containers.")
    @verbosity_options
    def run_cmd(config_path, verbose: int, quiet: bool, **flags) -> int:
        """A chaos run: cluster up, workload under faults, checkers, report.

        The console shows the phase, elapsed and remaining time, op counts, the
        faults in effect and a line per fault started or healed; client library
        logs go to the run's kchaos.log. Exit 0 valid, 1 anomalies found,
        2 unknown, 3 harness error, 64 usage error.
        """
        verbosity = verbosity_of(verbose, quiet)
        cfg = build_config(config_path, **flags)
        return execute(cfg, verbosity)

    @app.command("analyze")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    @click.option("--spark-master", default=None, help="Spark master (default local[2]).")
    @click.option("--engine", type=click.Choice(["auto", "spark", "reference"]), default=None,
                  help="Checker engine (default auto: the reference for small histories, Spark for large).")
    @verbosity_options
    def analyze_cmd(run_dir: Path, spark_master: str | None, engine: str | None, verbose: int, quiet: bool) -> int:
        """Re-run the checkers on a stored run and rewrite results and reports.

        Log lines of the analysis (the Spark driver JVM's start-up warnings
        among them) are added to the run's kchaos.log; -v shows them too.
        """
        from reports import console_summary   # here: see the note on imports above
        verbosity = verbosity_of(verbose, quiet)
        run_dir = resolve_run_dir(run_dir)
        stored = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}
        checker = dict(stored.get("checker") or {})
        if spark_master:
            checker["spark_master"] = spark_master
        if engine:
            checker["engine"] = engine
        log_handler = attach_log_file(run_dir)
        try:
            verdict = analyze(run_dir, checker)
        finally:
            logging.getLogger().removeHandler(log_handler)
            log_handler.close()
        if verbosity < 0:
            console.print(verdict_line(run_dir), soft_wrap=True)
        else:
            console_summary(run_dir, console)
        return {True: 0, False: 1}.get(verdict, 2)

    @app.command("report")
    @click.argument("run_dir", type=click.Path(path_type=Path))
    def report_cmd(run_dir: Path) -> int:
        """Rebuild report.html and junit.xml from a stored run."""
        from reports import render_run   # here: see the note on imports above
        run_dir = resolve_run_dir(run_dir)
        path = render_run(run_dir)
        console.print(f"report: {path}")
        return 0
