"""The top-level command group imports each command's module when asked for it (harness/cli.py)."""
from __future__ import annotations

import importlib
import subprocess
import sys
from collections import defaultdict

import click

from harness.cli import COMMAND_MODULES


def test_each_module_registers_the_commands_the_table_names() -> None:
    by_module: dict[str, set[str]] = defaultdict(set)
    for name, module in COMMAND_MODULES.items():
        by_module[module].add(name)
    for module, names in by_module.items():
        group = click.Group()
        importlib.import_module(module).register(group)
        assert set(group.commands) == names, module


def test_analyze_starts_without_the_fault_ssh_and_cluster_modules() -> None:
    """`kchaos analyze` waits for its imports before its conversion and the Spark driver start."""
    probe = ("import sys; from harness.cli import app; assert app.get_command(None, 'analyze') is not None; "
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('nemesis', 'paramiko', 'networkx', 'docker', 'confluent_kafka', 'workloads', 'broker'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_help_lists_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True,
                         check=True).stdout
    listed = {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert listed == set(COMMAND_MODULES)
