"""Checker throughput, honestly: from history.jsonl to a verdict and a report, stage by stage.

Generates a synthetic history of N ops (bench/synthetic_history.py) with
injected anomalies, writes it as history.jsonl (the file a run leaves), then
times the whole ``kchaos analyze`` command a user waits for, in a process of
its own running this checkout's code (``python -m harness.cli analyze -v``):

* history.jsonl to verdict and report: conversion to history.parquet and its
  message index (``history.parquet``, ``history.message_index``) beside the
  engine start (``checkers.session``), the checks and witnesses
  (``checkers.spark``), results.json, then the report (``reports``: every op
  of the history, read back from the history.parquet just written) and the
  console summary;
* a completed run: the same once history.parquet is current (a run writes it
  as it goes; here the first analysis's conversion made it);

each with the stages the command logs (harness/analysis.py, ``analysis
stage``, and results.json's checker stages), the rest of the wall time (the
interpreter's start, imports, the console summary), the CPU seconds of the
command and everything it started and its peak memory, both of the process
tree (the Python process, the Spark driver JVM and its workers together, read
from /proc every 0.1 s; memory summed over the tree at each sample). Then,
in a later session, a bare scan of the same Parquet (explode the messages,
group by (partition, offset)): first as that session's first job (cold, as the
checks above ran), then warm, beside the checks run twice in the same warm
session. Every figure is printed with the 1-minute load average beside it.
Exits 1, loudly, if the anomalies found differ from those injected (so a fast
wrong answer never passes for a result).

``--small`` also times ``kchaos analyze`` (engine auto) on a 12-op run
folder, and ``--threshold`` times the reference engine against Spark (start
included) at several sizes: the figures behind ``checkers.REFERENCE_MAX_OPS``.

    .venv/bin/python bench/checker_throughput.py                 # 1M and 10M ops
    .venv/bin/python bench/checker_throughput.py --ops 1000000 --small
    .venv/bin/python bench/checker_throughput.py --ops --threshold 50000 100000 200000
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import checkers  # noqa: E402
from history.parquet import history_to_parquet  # noqa: E402
from proc_tree import watch  # noqa: E402
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


REPO = Path(__file__).resolve().parents[1]
STAGE = re.compile(r"analysis stage (\w+): ([0-9.]+) s.*?([0-9.]+) s\)")


def kchaos_analyze(run: Path, master: str, driver_memory: str) -> dict:
    """``kchaos analyze -v`` of ``run`` (engine spark) in a process of its own:
    wall and CPU seconds (the command and what it started), peak memory, the
    stages it logged, the load average at its end, its exit code and output."""
    cfg = json.loads((run / "config.json").read_text()) if (run / "config.json").exists() else {}
    cfg["checker"] = {**cfg.get("checker", {}), "engine": "spark", "spark_master": master,
                      "spark_conf": {"spark.driver.memory": driver_memory}}
    (run / "config.json").write_text(json.dumps(cfg))
    w = watch([sys.executable, "-m", "harness.cli", "analyze", "-v", str(run)], cwd=REPO)
    out = w.output
    return {"wall": w.wall, "rc": w.rc, "tree_rss": w.peak_rss, "cpu": w.cpu,
            "stages": {m.group(1): float(m.group(2)) for m in map(STAGE.search, out) if m},
            "stage_cpu": {m.group(1): float(m.group(3)) for m in map(STAGE.search, out) if m},
            "load": os.getloadavg()[0], "output": out,
            "checker": json.loads((run / "results.json").read_text()).get("checker", {})}


def _print_stages(rep: dict, label: str, ops: int) -> None:
    st, ck = rep["stages"], rep["checker"].get("stages", {})
    nan = float("nan")
    if "convert" in ck:
        print(f"   conversion      {ck['convert']:6.1f} s   (beside the engine start)")
    print(f"   engine start    {ck.get('start', nan):6.1f} s")
    if "index" in ck:
        print(f"   message index   {ck['index']:6.1f} s   (built: the history had none)")
    print(f"   checks          {ck.get('checks', nan):6.1f} s")
    print(f"   witnesses       {ck.get('witnesses', nan):6.1f} s")
    cpu = rep["stage_cpu"]
    print(f"   checkers        {st.get('checkers', nan):6.1f} s   (the stages above and results.json; "
          f"CPU of the Python process {cpu.get('checkers', nan):.1f} s)")
    print(f"   report          {st.get('report', nan):6.1f} s   (report.html and junit.xml, every op; "
          f"CPU {cpu.get('report', nan):.1f} s)")
    other = rep["wall"] - st.get("checkers", 0) - st.get("report", 0)
    print(f"   the rest        {other:6.1f} s   (interpreter start, imports, console summary)")
    print(f"   {label} {rep['wall']:6.1f} s   {ops / rep['wall']:>10,.0f} ops/s   CPU {rep['cpu']:.1f} s "
          f"(every process of the command, the JVM's included)   peak memory {rep['tree_rss'] / 2**30:.2f} GB "
          f"(the process tree's, summed)   load {rep['load']:.1f}", flush=True)


def _agrees(run: Path, rep: dict, want: dict[str, int]) -> bool:
    res = json.loads((run / "results.json").read_text())
    got = {t: a.get("count", 0) for t, a in (res.get("anomalies") or {}).items() if a.get("count")}
    print(f"   verdict {res.get('valid')}  anomalies {got}  errors {res.get('errors')}  exit {rep['rc']}", flush=True)
    report = run / "report.html"
    fresh = report.exists() and report.stat().st_mtime > time.time() - rep["wall"] - 5
    if got != want or res.get("valid") is not False or res.get("errors") or rep["rc"] != 1 or not fresh:
        print(f"!! FAILED: anomalies found {got} differ from those injected {want} (or errors {res.get('errors')}, "
              f"verdict {res.get('valid')}, exit {rep['rc']}, report written: {fresh})\n"
              + "".join(rep["output"][-20:]), file=sys.stderr, flush=True)
        return False
    return True


def one(n: int, out: Path, master: str, driver_memory: str, bare_scan: bool) -> bool:
    run, info, gen = make_run(n, out)
    size = (run / "history.jsonl").stat().st_size
    print(f"{info['ops']:>11,} ops  {info['messages']:>11,} messages  history.jsonl {size / 1e6:,.0f} MB  "
          f"(generated in {gen:.1f} s)", flush=True)
    want = expected(info)
    # 1. what kchaos analyze does with a history.jsonl alone: convert while Spark starts, check, report
    rep = kchaos_analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "converted", rep["checker"]
    _print_stages(rep, "kchaos analyze, history.jsonl", info["ops"])
    ok = _agrees(run, rep, want)
    # 2. a completed run: its history.parquet was written while it ran (here: by
    # the conversion above), so analysis starts Spark, checks and reports
    print("   a completed run (history.parquet already written: here by the conversion above):")
    rep = kchaos_analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "reused", rep["checker"]
    _print_stages(rep, "kchaos analyze, completed run", info["ops"])
    ok &= _agrees(run, rep, want)
    if not bare_scan:
        return ok
    ck = rep["checker"].get("stages", {})
    check_s = ck.get("checks", 0) + ck.get("witnesses", 0)
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
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(run)], capture_output=True, text=True,
                       cwd=REPO)
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
    ap.add_argument("--no-bare", action="store_true", help="skip the bare scan against the checks")
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
            ok &= one(n, out, args.master, args.driver_memory, not args.no_bare)
    finally:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
