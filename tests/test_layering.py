"""The floors hold: no package imports one above it (docs/design.md, "Packages and their floors").

Every import statement counts, including those inside functions, so a lazy
import cannot hide an upward dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("infra", "broker", "nemesis", "workloads", "checkers", "harness", "reports")

# package -> the kchaos packages it must not import
FORBIDDEN = {
    "checkers": {"harness", "nemesis", "broker", "infra", "workloads", "reports"},
    "reports": {"harness", "nemesis", "broker", "infra", "workloads"},
    "infra": set(PACKAGES) - {"infra"},
    "broker": set(PACKAGES) - {"broker", "infra"},
    "workloads": {"nemesis", "infra", "broker", "harness", "reports"},
    "nemesis": {"harness", "reports", "workloads"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level kchaos package, line) of every import in a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out |= {(n.split(".")[0], node.lineno) for n in names if n.split(".")[0] in PACKAGES}
    return out


def upward_imports(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name, line in sorted(imported_packages(path)):
            if name in FORBIDDEN[package]:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_upward(package: str) -> None:
    assert upward_imports(package) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from harness.history import HistoryWriter\n")
    assert imported_packages(module) == {("harness", 4)}
