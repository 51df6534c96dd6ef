"""A soak: one long pipelined run at full speed, and how long the user waits
after its workload ends for the history, the verdict and the report.

Runs ``kchaos run`` (this checkout's code, a process of its own) with a
pipelined config (default examples/pipelined.toml, faults off unless
``--nemesis`` names some) for ``--seconds`` of workload, and prints:

* the acknowledged sends and the ops in the history (from results.json);
* the workload's length and the wait from its end (the moment config.json
  gains ``workload_seconds``, which the runner writes as the workers stop) to
  the command's exit: healing, the final drain, reading Kafka's records, the
  checks and the report; the stages the run logged (kchaos.log);
* the peak resident memory of the harness's process tree (Python, the Spark
  driver JVM and its workers; the brokers live in containers and are not
  counted) before and after the workload's end, its CPU seconds, the history's
  size on disk and the load average.

Exits 1 if the run's verdict is not valid (a soak with faults off must be), or
the wait was over ``--wait-target`` seconds (default 120: issue 33's target).

    .venv/bin/python bench/soak.py                         # 600 s, faults off
    .venv/bin/python bench/soak.py --seconds 60 --store /tmp/soak
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_tree import watch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOGGED = re.compile(r"^\S+ (\S+) INFO MainThread (?:harness\.\w+|history\.\w+|reports\.render): (.*)$")
STAGE_LINES = ("cluster ", "heal_all", "pre-drain wait", "drain completed", "read Kafka's records",
               "analysis stage", "report written",
               "teardown", "history: the columnar copy", "history.parquet:")


def _newest_run(store: Path) -> Path | None:
    runs = [p for p in store.glob("*/2*") if p.is_dir()]
    return max(runs, key=lambda p: p.stat().st_mtime, default=None)


def _size(run_dir: Path) -> int:
    return sum(p.stat().st_size for p in run_dir.glob("history*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "examples" / "pipelined.toml"))
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--nemesis", default="none")
    ap.add_argument("--store", type=Path, default=None, help="store folder (default: a temporary one, removed)")
    ap.add_argument("--wait-target", type=float, default=120.0)
    args = ap.parse_args()
    tmp = None if args.store else tempfile.TemporaryDirectory(prefix="kchaos-soak-")
    store = args.store or Path(tmp.name)
    store.mkdir(parents=True, exist_ok=True)
    seen: dict[str, float] = {}
    peak = {"workload": 0, "after": 0}

    def on_sample(elapsed: float, rss: int) -> None:
        if "end" not in seen and int(elapsed * 10) % 10 == 0:      # config.json: once a second is enough
            run = _newest_run(store)
            try:
                if run is not None and "workload_seconds" in json.loads((run / "config.json").read_text()):
                    seen["end"] = elapsed
            except (OSError, ValueError):
                pass                                               # being written
        key = "after" if "end" in seen else "workload"
        peak[key] = max(peak[key], rss)

    argv = [sys.executable, "-m", "harness.cli", "run", "--config", args.config, "--time-limit", str(args.seconds),
            "--seed", str(args.seed), "--nemesis", args.nemesis, "--store", str(store), "-q"]
    print(f"soak: {' '.join(argv[2:])}   load {os.getloadavg()[0]:.1f}", flush=True)
    w = watch(argv, cwd=REPO, every=0.1, on_sample=on_sample)
    run = _newest_run(store)
    ok = run is not None and (run / "results.json").exists()
    if not ok:
        print(f"!! the run left no results.json (exit {w.rc}):\n" + "".join(w.output[-30:]), file=sys.stderr)
        return 1
    results = json.loads((run / "results.json").read_text())
    config = json.loads((run / "config.json").read_text())
    stats = results.get("stats", {})
    wait = w.wall - seen["end"] if "end" in seen else float("nan")
    print(f"   verdict {results.get('valid')}   exit {w.rc}   run folder {run}")
    ops = sum(sum(c.values()) for c in (stats.get("ops") or {}).values() if isinstance(c, dict))
    print(f"   workload {float(config.get('workload_seconds') or 0):.0f} s   acknowledged sends "
          f"{stats.get('acknowledged', 0):,}   completed ops {ops:,}   "
          f"history files {_size(run) / 1e9:.2f} GB")
    for line in (run / "kchaos.log").read_text(errors="replace").splitlines():
        m = LOGGED.match(line)
        if m and m.group(2).startswith(STAGE_LINES):
            print(f"   {m.group(1)[:8]}  {m.group(2)[:150]}")
    print(f"   wait after the workload's end {wait:6.1f} s (target {args.wait_target:g} s)   whole command "
          f"{w.wall:6.1f} s   CPU {w.cpu:.0f} s   peak memory {peak['workload'] / 2**30:.2f} GB during the "
          f"workload, {peak['after'] / 2**30:.2f} GB after it (the harness's process tree)   "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0 if results.get("valid") is True and wait <= args.wait_target else 1


if __name__ == "__main__":
    sys.exit(main())
