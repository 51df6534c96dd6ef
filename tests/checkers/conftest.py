"""Shared fixtures: one Spark session for the whole run, hypothesis budgets.

Spark costs about a second per analysis however small the history, so the
Spark side of the tests batches many histories into one multi-run Parquet
file and checks them in one pass (``checkers.check_runs``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the helper modules (chk_builder, chk_gen) sit next to the tests
sys.path.insert(0, str(Path(__file__).parent))

# KCHAOS_HYPOTHESIS_EXAMPLES (default 200) sets how many generated histories the
# Spark-vs-reference property checks; raise it for a longer soak.


def pytest_collection_modifyitems(config, items):
    """``long`` tests run only when ``-m`` names them. pyproject's addopts say
    ``-m 'not long'``, but a later ``-m`` (``-m "not cluster"``, say) replaces
    that expression (the last ``-m`` wins), and would select them again."""
    if "long" in (config.getoption("markexpr") or ""):
        return
    keep = [i for i in items if i.get_closest_marker("long") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("long") is not None])
        items[:] = keep


@pytest.fixture(scope="session")
def spark():
    from checkers.session import new_session

    session = new_session("local[2]")
    yield session
    session.stop()
