"""`kchaos analyze` and `kchaos report`: a stored run's verdict and reports, again.

Apart from `kchaos run` (harness/run_cli.py) so that they start without the
run's config, fault and client modules: harness/cli.py imports a command's
module only when that command runs, and an analysis waits for its imports
before the conversion and the Spark driver can start (docs/benchmarks.md).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from harness.analysis import analyze
from harness.progress import verbosity_of, verbosity_options
from harness.store import attach_log_file, resolve_run_dir
from history import allocator

console = Console()


def verdict_line(run_dir: Path) -> Text:
    """The -q output: the verdict and where the report is, one line."""
    from reports.load import INVALID, VALID, load_run   # here: only -q needs it
    verdict = load_run(Path(run_dir)).verdict
    label, style = {VALID: ("valid", "bold green"), INVALID: ("INVALID", "bold red")}.get(
        verdict, ("unknown", "bold yellow"))
    return Text(label, style=style) + Text(f"  {Path(run_dir) / 'report.html'}")


def register(app: click.Group) -> None:
    """Add ``kchaos analyze`` and ``kchaos report`` to the top-level group."""
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
        from reports import console_summary   # here: the report renderers load when used
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
        from reports import render_run   # here: as above
        run_dir = resolve_run_dir(run_dir)
        allocator.tune()     # the digest's arrays reuse freed memory (history/allocator.py)
        path = render_run(run_dir)
        console.print(f"report: {path}")
        return 0
