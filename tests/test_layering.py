"""The floors hold: no package imports one above it (docs/design.md, "Packages and their floors").

Every import statement counts, including those inside functions, so a lazy
import cannot hide an upward dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("history", "infra", "broker", "nemesis", "workloads", "checkers", "harness", "reports")

# package -> the kchaos packages it must not import. history is the ground floor: the contract every
# other package reads and writes through, so it imports none of them; faults and clients record ops
# through it and never reach into analysis (checkers).
FORBIDDEN = {
    "history": set(PACKAGES) - {"history"},
    "checkers": {"harness", "nemesis", "broker", "infra", "workloads", "reports"},
    "reports": {"harness", "nemesis", "broker", "infra", "workloads"},
    "infra": set(PACKAGES) - {"infra"},
    "broker": set(PACKAGES) - {"broker", "infra"},
    "workloads": {"checkers", "nemesis", "infra", "broker", "harness", "reports"},
    "nemesis": {"checkers", "harness", "reports", "workloads"},
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


def modules() -> list[tuple[str, Path]]:
    return [(package, path) for package in sorted(FORBIDDEN) for path in sorted((ROOT / package).rglob("*.py"))]


@pytest.mark.parametrize(("package", "path"), modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else "")
def test_no_module_imports_upward(package: str, path: Path) -> None:
    """Each module by itself, so the failure names the module and the rule it broke."""
    bad = [f"line {line} imports {name}" for name, line in sorted(imported_packages(path)) if name in FORBIDDEN[package]]
    assert bad == [], f"{path.relative_to(ROOT)} ({package} must not import {sorted(FORBIDDEN[package])})"


def test_every_package_has_a_rule() -> None:
    assert set(FORBIDDEN) | {"harness"} == set(PACKAGES)


@pytest.mark.parametrize(("package", "imported"), [("workloads", "checkers"), ("nemesis", "checkers"),
                                                   ("history", "harness"), ("history", "checkers")])
def test_the_rules_forbid_what_the_design_forbids(package: str, imported: str) -> None:
    assert imported in FORBIDDEN[package]


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from checkers.spark import run_checks\n")
    assert imported_packages(module) == {("checkers", 4)}
