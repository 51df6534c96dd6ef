"""How often kchaos finds acknowledged-write loss where it exists, and never where it doesn't.

Runs each scenario in examples/ N times and prints, per scenario: runs that
were invalid, the anomaly types seen (runs each appeared in), and the mean
time from the first fault to the first lost write (by acknowledgement time).

    .venv/bin/python bench/detection_rate.py [--runs 10] [--time-limit 120] [scenario ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config import load, validate  # noqa: E402
from harness.history import read_history  # noqa: E402
from harness.runner import Run  # noqa: E402

SCENARIOS = ("unclean-election", "acks1-isolated-leader", "safe", "clock-skew")


def first_fault_to_first_loss(run_dir: Path) -> float | None:
    """Seconds from the first nemesis op to the acknowledgement of the earliest lost write."""
    results = json.loads((run_dir / "results.json").read_text())
    lost = {(w["partition"], v) for w in results["anomalies"].get("lost-write", {}).get("witnesses", [])
            for v in w.get("values", [])}
    if not lost:
        return None
    first_fault = first_loss = None
    for op in read_history(run_dir / "history.jsonl"):
        if op["process"] == "nemesis" and first_fault is None:
            first_fault = op["time"]
        if op["f"] == "send" and op["type"] == "ok" and first_loss is None:
            if any((p, v) in lost for p, v, _ in op["value"]):
                first_loss = op["time"]
    if first_fault is None or first_loss is None:
        return None
    return (first_loss - first_fault) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--store", default="store/detection")
    args = ap.parse_args()
    rows = []
    for name in args.scenarios:
        verdicts: Counter[str] = Counter()
        types: Counter[str] = Counter()
        delays: list[float] = []
        folders = []
        for i in range(args.runs):
            cfg = load(ROOT / "examples" / f"{name}.toml")
            cfg.time_limit = args.time_limit
            cfg.store = args.store
            cfg.seed = None
            outcome = Run(validate(cfg)).execute()
            folders.append(outcome.run_dir)
            verdicts[str(outcome.verdict)] += 1
            results = json.loads((outcome.run_dir / "results.json").read_text())
            for kind, entry in results.get("anomalies", {}).items():
                if entry.get("count", 0) > 0 and not entry.get("allowed"):
                    types[kind] += 1
            delay = first_fault_to_first_loss(outcome.run_dir)
            if delay is not None:
                delays.append(delay)
            print(f"{name} run {i + 1}/{args.runs}: {outcome.verdict} ({outcome.run_dir})", flush=True)
        rows.append((name, verdicts, types, delays, folders))
    print()
    print(f"{'scenario':<24} {'invalid':>9} {'valid':>7} {'unknown':>8}  {'fault->loss s':>13}  anomaly types (runs)")
    for name, verdicts, types, delays, _ in rows:
        n = sum(verdicts.values())
        mean = f"{statistics.mean(delays):.1f}" if delays else "-"
        kinds = ", ".join(f"{k} ({c})" for k, c in types.most_common()) or "none"
        print(f"{name:<24} {verdicts['False']:>4}/{n:<4} {verdicts['True']:>7} {verdicts['unknown']:>8}  {mean:>13}  {kinds}")


if __name__ == "__main__":
    main()
