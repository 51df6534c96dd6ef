"""`kchaos run` (`kchaos analyze` and `kchaos report` are in harness/analyze_cli.py)."""
from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from harness.analyze_cli import verdict_line
from harness.progress import ConsoleProgress, verbosity_of, verbosity_options
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
