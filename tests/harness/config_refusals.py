"""A bad run config is refused in one line, before anything starts: the
shared assertions of the config tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.run_config import load, validate
from infra.errors import UsageError


def refused_by_validate(tmp_path: Path, toml: str) -> str:
    """The one-line UsageError ``validate`` raises for ``toml``."""
    path = tmp_path / "run.toml"
    path.write_text(toml)
    with pytest.raises(UsageError) as info:
        validate(load(path))
    assert "\n" not in str(info.value)
    return str(info.value)


def refused_by_cli(tmp_path: Path, toml: str) -> str:
    """``kchaos run`` with ``toml``: exit 64, one line on stderr, no traceback,
    nothing stored; the line."""
    path = tmp_path / "run.toml"
    path.write_text(toml)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--config", str(path),
                           "--store", str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing started, nothing stored
    return proc.stderr
