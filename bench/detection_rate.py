"""How often kchaos finds acknowledged-write loss where it exists, and never where it doesn't.

Runs each scenario in examples/ N times and prints, per scenario: runs that
were invalid, runs with lost writes, runs whose loss the checker attributed to
an unclean election, the anomaly types seen (runs each appeared in), the
median lost-write count, and the mean time from the first fault to the first
lost write (by acknowledgement time), and the mean share of the workload's
seconds in which some write was acknowledged (writes %). Every run's line also goes to
``<store>/detection.jsonl`` as it ends, so an interrupted bench keeps its
figures; ``--summarize`` prints the table again from the stored run folders.

    .venv/bin/python bench/detection_rate.py [--runs 10] [--time-limit 120] [--seed N] [scenario ...]
    .venv/bin/python bench/detection_rate.py --summarize [scenario ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.run_config import load, validate  # noqa: E402
from history.ops import ACTION_START, read_history  # noqa: E402
from history.fault_intervals import nemesis_ops  # noqa: E402
from history.parquet import read_paired_ops  # noqa: E402
from checkers.reference import lost_messages  # noqa: E402
from checkers.run_index import RunIndex  # noqa: E402
from harness.runner import Runner  # noqa: E402
from reports.availability import write_availability  # noqa: E402
from reports.digest import digest  # noqa: E402
from reports.load import anomaly_rows, verdict_of  # noqa: E402

SCENARIOS = ("unclean-election", "acks1-isolated-leader", "safe", "clock-skew", "elr-election", "power-loss-all",
             "power-loss-all-control", "power-loss-elr", "client-cut-leader")
EXPECTED = {"unclean-election": False, "acks1-isolated-leader": False, "safe": True, "elr-election": True,
            "power-loss-all": False, "power-loss-all-control": True, "power-loss-elr": True,
            "client-cut-leader": True, "planned-moves-acks1": False, "planned-moves": True}


def first_fault_to_first_loss(run_dir: Path, results: dict[str, Any]) -> float | None:
    """Seconds from the invocation of the first fault to the acknowledgement of
    the earliest lost write: every lost write, by the reference checker's
    definition (results.json keeps only the first witnesses, in partition order)."""
    if not results["anomalies"].get("lost-write", {}).get("count"):
        return None
    ops = read_paired_ops(run_dir / "history.jsonl")
    lost, _ = lost_messages(RunIndex(ops))
    first_loss = min((m.op.time for m in lost if m.op.time is not None), default=None)
    first_fault = next((ev.invoke_time for ev in nemesis_ops(read_history(run_dir / "history.jsonl"))
                        if ev.action == ACTION_START), None)
    if first_fault is None or first_loss is None:
        return None
    return (first_loss - first_fault) / 1e9


def removing_elections(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Elections lost writes are attributed to: unclean ones, and last-leader ones from the metadata log."""
    record = (results.get("elections") or {}).get("elections") or []
    return (results.get("unclean_elections") or []) + [e for e in record if e.get("kind") == "last-leader"]


def write_share(run_dir: Path) -> float | None:
    """The share of the workload's seconds in which some write was acknowledged."""
    avail = write_availability(digest(read_history(run_dir / "history.jsonl")))
    return None if avail is None else round(avail.share, 3)


def describe(scenario: str, run_dir: Path) -> dict[str, Any]:
    """One run's figures, from its folder."""
    results = json.loads((run_dir / "results.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    counts = {row.type: row.count for row in anomaly_rows(results) if row.failing}
    return {"scenario": scenario, "run_dir": str(run_dir), "seed": config.get("seed"),
            "kafka_version": config.get("kafka_version"), "valid": results.get("valid"),
            "anomalies": counts,
            "unclean_elections": len(results.get("unclean_elections") or []),
            "attributed": any((e.get("lost_writes") or 0) > 0 for e in removing_elections(results)),
            "write_share": write_share(run_dir),
            "acknowledged": results.get("stats", {}).get("acknowledged"),
            "fault_to_loss_s": first_fault_to_first_loss(run_dir, results)}


def table(rows: list[dict[str, Any]]) -> None:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["scenario"]].append(r)
    print(f"{'scenario':<22} {'runs':>4} {'invalid':>7} {'valid':>5} {'unknown':>7} {'lost-write':>10} "
          f"{'attributed':>10} {'median lost':>11} {'fault->loss s':>13} {'writes %':>8}  anomaly types (runs)")
    for name, rs in by.items():
        verdicts = Counter(verdict_of(r) for r in rs)
        types = Counter(k for r in rs for k in r["anomalies"])
        lost = [r["anomalies"]["lost-write"] for r in rs if "lost-write" in r["anomalies"]]
        delays = [r["fault_to_loss_s"] for r in rs if r["fault_to_loss_s"] is not None]
        shares = [r["write_share"] for r in rs if r.get("write_share") is not None]
        print(f"{name:<22} {len(rs):>4} {verdicts['invalid']:>7} {verdicts['valid']:>5} {verdicts['unknown']:>7} "
              f"{len(lost):>10} {sum(r['attributed'] for r in rs):>10} "
              f"{(f'{statistics.median(lost):.0f}' if lost else '-'):>11} "
              f"{(f'{statistics.mean(delays):.1f}' if delays else '-'):>13} "
              f"{(f'{100 * statistics.mean(shares):.0f}' if shares else '-'):>8}  "
              f"{', '.join(f'{k} ({c})' for k, c in types.most_common()) or 'none'}")
    for name, rs in by.items():
        expected = EXPECTED.get(name, True)   # a scenario with no expectation: show what was not valid
        for r in rs:
            if r["valid"] is not expected:
                print(f"  {name}: valid={r['valid']} seed {r['seed']} {r['anomalies']} ({r['run_dir']})")


def stored_runs(store: Path, scenarios: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in scenarios:
        for run_dir in sorted(p for p in (store / name).glob("*") if p.is_dir() and not p.is_symlink()):
            if (run_dir / "results.json").exists():
                rows.append(describe(name, run_dir))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--store", default="store/detection")
    ap.add_argument("--seed", type=int, help="the first run's seed, the next runs N+1, N+2, ... "
                    "(to run a chosen fault plan, or the same plans under two scenarios); drawn when absent")
    ap.add_argument("--summarize", action="store_true", help="print the table from stored runs; run nothing")
    args = ap.parse_args()
    store = Path(args.store)
    if args.summarize:
        table(stored_runs(store, args.scenarios))
        return
    store.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.scenarios:
        for i in range(args.runs):
            cfg = load(ROOT / "examples" / f"{name}.toml")
            cfg.time_limit = args.time_limit
            cfg.store = str(store)
            cfg.seed = None if args.seed is None else args.seed + i
            started = time.monotonic()
            outcome = Runner(validate(cfg)).execute()
            row = describe(name, outcome.run_dir)
            row["wall_s"] = round(time.monotonic() - started, 1)
            rows.append(row)
            with (store / "detection.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{name} run {i + 1}/{args.runs}: valid={row['valid']} {row['anomalies']} "
                  f"attributed={row['attributed']} seed={row['seed']} {row['wall_s']} s ({outcome.run_dir})",
                  flush=True)
    print()
    table(rows)


if __name__ == "__main__":
    main()
