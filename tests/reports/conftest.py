"""Shared fixtures for the report tests: each stored fixture run folder is
copied to a temporary directory and rendered once per session."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KINDS = ("valid", "invalid", "unknown")


def copy_fixture(kind: str, dest: Path) -> Path:
    target = dest / kind
    shutil.copytree(FIXTURES / kind, target)
    return target


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> dict[str, Path]:
    """{kind: run_dir} with report.html and junit.xml rendered."""
    from reports import render_run

    base = tmp_path_factory.mktemp("runs")
    out = {}
    for kind in KINDS:
        run_dir = copy_fixture(kind, base)
        report = render_run(run_dir)
        assert report == run_dir / "report.html"
        out[kind] = run_dir
    return out


@pytest.fixture
def fixture_copy(tmp_path):
    """Copy a fixture run folder into tmp_path: ``fixture_copy("valid")``."""
    return lambda kind: copy_fixture(kind, tmp_path)
