"""Checker throughput, honestly: from history.jsonl to a verdict, stage by stage.

Generates a synthetic history of N ops (bench/synthetic_history.py) with
injected anomalies, writes it as history.jsonl (the file a run leaves), then
times what ``kchaos analyze`` does with it:

* history.jsonl to verdict: ``checkers.analyze_run`` in a fresh process, as
  ``kchaos analyze`` runs it: conversion to history.parquet and its message
  index (``history.parquet``, ``history.message_index``) beside the engine
  start (``checkers.session``), then the checks and witnesses
  (``checkers.spark``) and results.json;
* a completed run to verdict: the same once history.parquet is current (a run
  writes it as it goes; here the first analysis's conversion made it, untimed):
  engine start, checks, witnesses;

and, in a later session, a bare scan of the same Parquet (explode the
messages, group by (partition, offset)): first as that session's first job
(cold, as the checks above ran), then warm, beside the checks run twice in
the same warm session. Every figure is printed with the
1-minute load average beside it. Exits 1, loudly, if the anomalies found differ
from those injected (so a fast wrong answer never passes for a result).

``--small`` also times ``kchaos analyze`` (a subprocess, engine auto) on a
12-op run folder, and ``--threshold`` times the reference engine against Spark
(start included) at several sizes: the figures behind
``checkers.REFERENCE_MAX_OPS``.

    .venv/bin/python bench/checker_throughput.py                 # 1M and 10M ops
    .venv/bin/python bench/checker_throughput.py --ops 1000000 --small
    .venv/bin/python bench/checker_throughput.py --ops --threshold 50000 100000 200000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import checkers  # noqa: E402
from history.parquet import history_to_parquet  # noqa: E402
from synthetic_history import expected, make_run  # noqa: E402


def bare(spark, path: Path) -> float:
    """Seconds of a bare scan: explode the messages, group by (partition, offset)."""
    from pyspark.sql import functions as F      # imported here: only the Spark subprocess (COMPARE) loads pyspark
    t0 = time.monotonic()
    (spark.read.parquet(str(path)).select(F.explode("messages").alias("m"))
     .groupBy("m.partition", "m.offset").count().agg(F.sum("count")).collect())
    return time.monotonic() - t0


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def found(res) -> dict[str, int]:
    return {t: c for t, c, _ in checkers.summary(res) if c}


def _last_json_line(r: subprocess.CompletedProcess, what: str) -> dict:
    """The last JSON line a bench subprocess printed; its stderr if it failed."""
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        raise RuntimeError(f"{what} failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


# One ``checkers.analyze_run`` in a process of its own, as ``kchaos analyze`` runs
# it (a fresh driver JVM each time; in one process the second analysis would
# reuse the first one's warm JVM). Prints what the parent needs as one JSON line.
ANALYZE = """
import json, sys, time
t0 = time.monotonic()
import checkers
from checkers import session
res = checkers.analyze_run(sys.argv[1], json.loads(sys.argv[2]))
print(json.dumps({"seconds": time.monotonic() - t0, "checker": res.checker, "valid": res.valid,
                  "errors": res.errors, "cds": session.cds_state,
                  "found": {t: c for t, c, _ in checkers.summary(res) if c}}), flush=True)
"""


def analyze(run: Path, master: str, driver_memory: str) -> tuple[dict, float]:
    """(what analyze_run reported, the process's wall seconds)."""
    cfg = {"engine": "spark", "spark_master": master, "spark_conf": {"spark.driver.memory": driver_memory}}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", ANALYZE, str(run), json.dumps(cfg)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    wall = time.monotonic() - t0
    return _last_json_line(r, "analyze_run"), wall


def _stages(rep: dict, wall: float, label: str, ops: int) -> None:
    st = rep["checker"].get("stages", {})
    nan = float("nan")
    if "convert" in st:
        print(f"   conversion      {st['convert']:6.1f} s   {ops / st['convert']:>11,.0f} ops/s   "
              f"(beside the engine start)   {_load()}")
    print(f"   engine start    {st.get('start', nan):6.1f} s   class archive: {rep['cds']}   {_load()}")
    if "index" in st:
        print(f"   message index   {st['index']:6.1f} s   (built: the history had none)   {_load()}")
    print(f"   checks          {st.get('checks', nan):6.1f} s   {_load()}")
    print(f"   witnesses       {st.get('witnesses', nan):6.1f} s   {_load()}")
    print(f"   {label} {rep['seconds']:6.1f} s   {ops / rep['seconds']:>11,.0f} ops/s   "
          f"(process wall {wall:.1f} s)   {_load()}", flush=True)


def _agrees(rep: dict, want: dict[str, int]) -> bool:
    got = rep["found"]
    print(f"   verdict {rep['valid']}  anomalies {got}  errors {rep['errors']}", flush=True)
    if got != want or rep["valid"] is not False or rep["errors"]:
        print(f"!! FAILED: anomalies found {got} differ from those injected {want} "
              f"(or errors {rep['errors']}, verdict {rep['valid']})", file=sys.stderr, flush=True)
        return False
    return True


def one(n: int, out: Path, master: str, driver_memory: str) -> bool:
    run, info, gen = make_run(n, out)
    size = (run / "history.jsonl").stat().st_size
    print(f"{info['ops']:>11,} ops  {info['messages']:>11,} messages  history.jsonl {size / 1e6:,.0f} MB  "
          f"(generated in {gen:.1f} s)", flush=True)
    want = expected(info)
    # 1. what kchaos analyze does with a history.jsonl alone: convert while Spark starts
    rep, wall = analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "converted", rep["checker"]
    _stages(rep, wall, "history.jsonl to verdict", info["ops"])
    ok = _agrees(rep, want)
    # 2. a completed run: its history.parquet was written while it ran (here: by
    # the conversion above, untimed), so analysis starts Spark and checks
    print("   a completed run (history.parquet already written: here by the conversion above, not timed):")
    rep, wall = analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "reused", rep["checker"]
    _stages(rep, wall, "completed run to verdict", info["ops"])
    ok &= _agrees(rep, want)
    st = rep["checker"].get("stages", {})
    check_s = st.get("checks", 0) + st.get("witnesses", 0)
    cmp = _compare(run, master, driver_memory)
    print(f"   bare scan+group-by {cmp['cold_bare']:6.1f} s   checks+witnesses/bare {check_s / cmp['cold_bare']:4.1f}x   "
          f"(each the first work of a fresh JVM)   {_load()}", flush=True)
    print(f"   in one warm session: checks+witnesses {cmp['warm_checks']:6.1f} s, bare {cmp['warm_bare']:6.1f} s, "
          f"{cmp['warm_checks'] / cmp['warm_bare']:4.1f}x   {_load()}", flush=True)
    return ok


# In a process of its own (a fresh driver JVM: PySpark keeps one JVM per
# process across sessions): the bare scan as the session's first job (cold, as
# the checks ran above), then the bare scan and the checks twice each, warm.
COMPARE = """
import json, sys
sys.path.insert(0, sys.argv[4])
from checker_throughput import bare
import checkers.spark as engine
from checkers.common import Settings
from checkers.session import new_session, stop_session
spark = new_session(sys.argv[2], {"spark.driver.memory": sys.argv[3]})
path = sys.argv[1]
cold = bare(spark, path)
warm = min(bare(spark, path) for _ in range(2))
checks = []
for _ in range(2):
    t = {}
    engine.analyze_runs(spark, path, Settings(), t)
    checks.append(t["checks"] + t["witnesses"])
stop_session(spark)
print(json.dumps({"cold_bare": cold, "warm_bare": warm, "warm_checks": min(checks)}), flush=True)
"""


def _compare(run: Path, master: str, driver_memory: str) -> dict[str, float]:
    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-c", COMPARE, str(run / "history.parquet"), master, driver_memory,
                        str(here)], capture_output=True, text=True, cwd=here.parent)
    return _last_json_line(r, "bare scan")


def small(out: Path) -> bool:
    """``kchaos analyze`` wall time on a 12-op history (engine auto): a sample,
    ten sends and the poll that reads them all back (valid: exit 0)."""
    run = out / "small"
    run.mkdir(parents=True, exist_ok=True)
    ops = [{"process": "sampler", "type": "ok", "f": "sample",
            "value": {"controller": 1, "partitions": {"0": {"leader": 1, "isr": [1, 2, 3], "epoch": 0}}}}]
    for i in range(10):
        ops += [{"process": 0, "type": "invoke", "f": "send", "value": [[0, i, None]]},
                {"process": 0, "type": "ok", "f": "send", "value": [[0, i, i]]}]
    ops += [{"process": 1, "type": "invoke", "f": "poll", "value": None},
            {"process": 1, "type": "ok", "f": "poll", "value": {"0": [[i, i] for i in range(10)]}}]
    with open(run / "history.jsonl", "w") as fh:
        fh.write(json.dumps({"kchaos-history": 2}) + "\n")
        for k, op in enumerate(ops):
            fh.write(json.dumps({"index": k, "time": k * 1000, **op}) + "\n")
    kchaos = Path(sys.executable).with_name("kchaos")
    t0 = time.monotonic()
    r = subprocess.run([str(kchaos), "analyze", str(run)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    engine = json.loads((run / "results.json").read_text())["checker"]
    print(f"12-op history: kchaos analyze {wall:5.1f} s (exit {r.returncode}, engine {engine.get('engine')}, "
          f"{engine.get('chosen')})   {_load()}")
    return r.returncode == 0


def threshold(out: Path, master: str, sizes: list[int]) -> None:
    """Reference vs Spark (its start included, as auto would pay it)."""
    for n in sizes:
        run, info, _ = make_run(n, out)
        history_to_parquet(run / "history.jsonl", run / "history.parquet")
        t0 = time.monotonic()
        ref = checkers.check(run / "history.parquet", {"engine": "reference"})
        t_ref = time.monotonic() - t0
        t0 = time.monotonic()
        sp = checkers.check(run / "history.parquet", {"engine": "spark", "spark_master": master})
        t_sp = time.monotonic() - t0
        same = found(ref) == found(sp)
        print(f"{info['ops']:>9,} ops  reference {t_ref:6.1f} s   spark (with start) {t_sp:6.1f} s   "
              f"agree {same}   {_load()}", flush=True)
        if not same:
            print(f"   reference {found(ref)}\n   spark     {found(sp)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the run folders")
    ap.add_argument("--small", action="store_true", help="also time kchaos analyze on a 12-op history")
    ap.add_argument("--threshold", type=int, nargs="*", default=None, metavar="OPS",
                    help="also time reference vs Spark at these sizes (default 5k 20k 50k 100k 200k)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="kchaos-bench-")
    out = args.dir or Path(tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    ok = True
    try:
        if args.small:
            ok &= small(out)
        if args.threshold is not None:
            threshold(out, args.master, args.threshold or [5_000, 20_000, 50_000, 100_000, 200_000])
        for n in args.ops:
            ok &= one(n, out, args.master, args.driver_memory)
    finally:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
