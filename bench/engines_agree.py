"""Both engines on stored runs: every anomaly count, the verdict and each info txn's settlement must be equal.

The checker tests compare the reference and the Spark engine on generated
histories; this compares them on what real Kafka produced. Give run folders or
store folders (every folder beneath with a history.jsonl is a run):

    .venv/bin/python bench/engines_agree.py store/
    .venv/bin/python bench/engines_agree.py store/transactions/20261123T204641

Prints one line per run and exits 1 if any run differs or the Spark engine
reported an error. Each run is checked with its stored checker config and
Kafka's own record of it, as ``kchaos analyze`` would, but no results or
reports are written into the run folder (a run recorded before the message
index existed gets one there, as any Spark analysis of it would make).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import checkers  # noqa: E402
from history.ops import history_header  # noqa: E402
from history.parquet import parquet_is_current  # noqa: E402
from checkers.kafka_record import load_records  # noqa: E402
from checkers.session import new_session, stop_session  # noqa: E402


def runs(paths: list[Path]) -> list[Path]:
    found = set()
    for p in paths:
        found |= {h.parent.resolve() for h in ([p / "history.jsonl"] if (p / "history.jsonl").exists()
                                               else p.rglob("history.jsonl"))}
    return sorted(found)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", type=Path, nargs="+")
    args = ap.parse_args()
    found = runs(args.paths)
    if not found:
        print("no history.jsonl under " + " ".join(map(str, args.paths)), file=sys.stderr)
        return 64
    spark = new_session()
    differ = 0
    try:
        for run in found:
            cfg = checkers.stored_checker_config(run)
            records = load_records(run, history_header(run / "history.jsonl").get("wall_ns_at_zero"))
            src = run / "history.parquet" if parquet_is_current(run / "history.jsonl",
                                                                        run / "history.parquet") \
                else run / "history.jsonl"
            ref = checkers.check(src, {**cfg, "engine": "reference"}, records=records)
            got = checkers.check(src, {**cfg, "engine": "spark"}, spark=spark, records=records)
            rc = {t: c for t, c, _ in checkers.summary(ref)}
            sc = {t: c for t, c, _ in checkers.summary(got)}
            settled_same = ref.stats.get("settled_txns") == got.stats.get("settled_txns")   # checkers/settle.py
            same = rc == sc and ref.valid == got.valid and settled_same and not got.errors
            differ += not same
            print(f"{'same' if same else 'DIFFERENT'}  {run}  valid {ref.valid} / {got.valid}  "
                  f"{ {t: c for t, c in sc.items() if c} }  {got.errors or ''}", flush=True)
            if not same:
                print(f"    reference: { {t: c for t, c in rc.items() if c} }", flush=True)
    finally:
        stop_session(spark)
    print(f"{differ} of {len(found)} runs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
