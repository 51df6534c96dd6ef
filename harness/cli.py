"""The ``kchaos`` command.

User mistakes and infrastructure failures are KchaosErrors: one line on
stderr and the error's exit code (64 usage, 3 harness/infrastructure).
Run verdicts map to 0 valid, 1 invalid, 2 unknown.
"""
from __future__ import annotations

import importlib
import logging
import sys

import click
from rich.console import Console

from harness.progress import ConsoleFilter, CurrentStderr
from infra.errors import KchaosError

EXIT_USAGE = 64
err_console = Console(stderr=True)

# Each command lives in a module of its own with ``register(app)``, imported
# when one of its commands is asked for (every one for the command list): so
# `kchaos analyze` starts its conversion and the Spark driver without first
# loading the fault, SSH and cluster modules (about 0.4 s; docs/benchmarks.md).
COMMAND_MODULES = {
    "run": "harness.run_cli",
    "analyze": "harness.analyze_cli", "report": "harness.analyze_cli",
    "cluster": "harness.cluster_cli", "clean": "harness.cluster_cli",
    "nemesis": "harness.nemesis_cli",
    "suite": "harness.suite_cli", "reproduce": "harness.suite_cli",
    "shrink": "harness.shrink_cli",
    "replay": "harness.replay_cli",
}


class Commands(click.Group):
    """The top-level group, its commands' modules imported on demand (``COMMAND_MODULES``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(COMMAND_MODULES[name]).register(self)
        return self.commands.get(name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
def app() -> None:
    """Jepsen-style fault-injection runs against real Apache Kafka clusters."""


def setup_console_logging() -> None:
    """Warnings of the harness on stderr, client library lines never (until
    -vv, harness.progress); the run's kchaos.log gets the rest."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(ConsoleFilter())
        if type(handler) is logging.StreamHandler:
            handler.setStream(CurrentStderr())


def main(argv: list[str] | None = None) -> None:
    setup_console_logging()
    try:
        rv = app.main(args=argv, prog_name="kchaos", standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        err_console.print("kchaos: interrupted")
        sys.exit(130)
    except click.UsageError as exc:
        err_console.print(f"kchaos: usage error: {exc.format_message()}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except KchaosError as exc:
        err_console.print(f"kchaos: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
