"""Fabricated run folders and a fake runner: suites without clusters."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkers.result import ANOMALY_TYPES


def results(kind: str, counts: dict[str, int] | None = None, allowed: dict[str, str] | None = None) -> dict:
    """A small results.json: kind valid / invalid / unknown."""
    counts = counts or ({"lost-write": 3, "inconsistent-offset": 1} if kind == "invalid" else {})
    allowed = allowed or {}
    anomalies = {t: {"count": counts.get(t, 0), "allowed": t in allowed, "reason": allowed.get(t),
                     "description": f"{t} description", "witnesses": []} for t in ANOMALY_TYPES}
    valid: Any = {"valid": True, "invalid": False}.get(kind, "unknown")
    errors = ["lost-write: <b>boom</b> & crash"] if kind == "unknown" else []
    return {"valid": valid, "checker": {"engine": "reference", "seconds": 0.1}, "errors": errors,
            "anomalies": anomalies, "unclean_elections": [], "stats": {}}


def make_run_dir(run_dir: Path, name: str, kind: str | None, seed: int = 7, digest: str = "abcdef0123456789",
                 **res_kw) -> Path:
    """A stored run folder; kind None leaves results.json out (a run that crashed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"name": name, "seed": seed, "kafka_version": "4.3.1",
                                                     "nodes": 3, "schedule_digest": digest}))
    (run_dir / "history.jsonl").write_text("")
    if kind is not None:
        (run_dir / "results.json").write_text(json.dumps(results(kind, **res_kw)))
    (run_dir / "report.html").write_text("<!DOCTYPE html><title>stub report</title>")
    return run_dir


class FakeRunner:
    """Stands in for a real run: `plan` maps a run name to valid / invalid /
    unknown / error / interrupted; each run takes `seconds` on the fake clock."""

    def __init__(self, plan: dict[str, str], clock: "FakeClock", seconds: float = 100.0):
        self.plan, self.clock, self.seconds = plan, clock, seconds
        self.calls: list[str] = []

    def __call__(self, cfg, progress):
        from harness.store import link_latest, new_run_dir
        from harness.suite import Attempt
        self.calls.append(cfg.name)
        self.clock.t += self.seconds
        kind = self.plan.get(cfg.name, "valid")
        if kind == "error":
            run_dir = new_run_dir(Path(cfg.store), cfg.name)
            make_run_dir(run_dir, cfg.name, None, seed=cfg.seed or 1)
            return Attempt(run_dir, 3, "unknown", error="ClusterError: broker n2 did not start <in time>")
        if kind == "interrupted":
            return Attempt(None, 130, interrupted=True)
        run_dir = new_run_dir(Path(cfg.store), cfg.name)
        make_run_dir(run_dir, cfg.name, kind, seed=cfg.seed or 1)
        link_latest(Path(cfg.store), run_dir)   # as a run that reached its workload does
        return Attempt(run_dir, {"valid": 0, "invalid": 1}.get(kind, 2), kind)


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t
