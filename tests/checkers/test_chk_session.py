"""The time around the checks: conversion beside the Spark start, and the
driver's class archive (checkers.session)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import checkers
from checkers import session
from history.ops import HistoryFormatError
from history.parquet import parquet_is_current
from chk_builder import History, small_history

ROOT = Path(__file__).resolve().parents[2]


def small() -> History:
    return small_history(nemesis=False)


def run_dir(tmp_path: Path, corrupt: bool = False) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    small().write(run / "history.jsonl")
    if corrupt:
        with open(run / "history.jsonl", "a") as fh:
            fh.write('{"broken\n{"index": 99, "time": 1, "process": 0, "type": "invoke", "f": "send"}\n')
    return run


def failing_start(monkeypatch: Any) -> None:
    @contextlib.contextmanager
    def no_jvm(master: str, conf: Any, spark: Any) -> Iterator[Any]:
        raise RuntimeError("no JVM today")
        yield
    monkeypatch.setattr(session, "analysis_session", no_jvm)


@pytest.mark.spark
def test_conversion_runs_while_spark_starts(tmp_path: Path, monkeypatch: Any, spark: Any) -> None:
    """The conversion waits for the session start to begin: done one after the
    other, it would time out."""
    started = threading.Event()
    real = checkers.checking.history_to_parquet

    def convert(src: Path, dst: Path) -> int:
        if not started.wait(60):
            raise AssertionError("the conversion ran before the Spark session started")
        return real(src, dst)

    @contextlib.contextmanager
    def starting(master: str, conf: Any, given: Any) -> Iterator[Any]:
        started.set()
        yield spark
    monkeypatch.setattr(checkers.checking, "history_to_parquet", convert)
    monkeypatch.setattr(session, "analysis_session", starting)
    run = run_dir(tmp_path)
    r = checkers.analyze_run(run, {"engine": "spark"})
    assert r.valid is True and r.checker["parquet"] == "converted"
    assert {"convert", "start", "checks"} <= set(r.checker["stages"])
    assert parquet_is_current(run / "history.jsonl", run / "history.parquet")


@pytest.mark.spark
def test_bad_history_on_spark_still_writes_unknown_and_raises(tmp_path: Path, spark: Any) -> None:
    run = run_dir(tmp_path, corrupt=True)
    with pytest.raises(HistoryFormatError):
        checkers.analyze_run(run, {"engine": "spark"}, spark=spark)
    doc = json.loads((run / "results.json").read_text())
    assert doc["valid"] == "unknown" and doc["errors"][0].startswith("history: ")


def test_spark_that_fails_to_start_gives_the_crashed_result(tmp_path: Path, monkeypatch: Any) -> None:
    failing_start(monkeypatch)
    run = run_dir(tmp_path)
    r = checkers.analyze_run(run, {"engine": "spark"})
    assert r.valid == "unknown" and r.errors == ["spark: RuntimeError: no JVM today"]
    assert "convert" in r.checker["stages"]        # the conversion was waited for
    assert json.loads((run / "results.json").read_text())["valid"] == "unknown"


def test_bad_history_beats_a_failed_spark_start(tmp_path: Path, monkeypatch: Any) -> None:
    """Both failed: the input's fault is named, as when the conversion came first."""
    failing_start(monkeypatch)
    run = run_dir(tmp_path, corrupt=True)
    with pytest.raises(HistoryFormatError):
        checkers.analyze_run(run, {"engine": "spark"})
    assert json.loads((run / "results.json").read_text())["errors"][0].startswith("history: ")
    with pytest.raises(HistoryFormatError):
        checkers.check(run / "history.jsonl", {"engine": "spark"})


def test_archive_key_follows_options_and_cache(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("KCHAOS_CACHE", str(tmp_path))
    a = session.cds_archive("-XX:TieredStopAtLevel=1")
    assert a.parent == tmp_path / "spark-cds" and a.suffix == ".jsa"
    assert session.cds_archive("-XX:TieredStopAtLevel=1") == a
    assert session.cds_archive("-XX:+UseSerialGC") != a


def test_refusal_is_read_from_the_jvm_log(tmp_path: Path) -> None:
    log = tmp_path / "cds.log"
    log.write_text("[0.02s][info][cds] trying to map x.jsa\n"
                   "[0.04s][info][cds] Mapped dynamic region #0 at base 0x7f (ReadWrite)\n")
    assert session._refused(log) == ""
    log.write_text("[0.02s][info][cds] trying to map x.jsa\n"
                   "[0.02s][info][cds] UseSharedSpaces: Unable to map shared spaces\n")
    assert session._refused(log) == "UseSharedSpaces: Unable to map shared spaces"
    log.write_text("[0.02s][info][cds] trying to map x.jsa\n")
    assert session._refused(log) == "not mapped"


START = """
from checkers import session
s = session.new_session()
print(s.range(3).count(), session.cds_state, flush=True)
session.stop_session(s)
"""


@pytest.mark.spark
def test_a_corrupt_archive_costs_a_warning_not_the_analysis(tmp_path: Path) -> None:
    """A JVM that dies on its archive (a truncated one crashes JDK 17) is
    started again without it; the archive is not offered again."""
    env = {**os.environ, "KCHAOS_CACHE": str(tmp_path), "KCHAOS_SPARK_CDS": "1"}
    probe = "from checkers import session; print(session.cds_archive(session.DEFAULT_CONF[session.EXTRA_JAVA]))"
    archive = Path(subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout.strip())
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"garbage\n")
    r = subprocess.run([sys.executable, "-c", START], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-2:] == ["3", "refused"]
    assert r.stderr.count("refused its class archive") == 1
    assert archive.with_suffix(".refused").exists()


AHEAD = """
from pyspark import SparkContext
from checkers import session
conf = {"spark.sql.shuffle.partitions": "3"}
session.start_ahead("local[2]", conf)
ahead = session._ahead[0]
with session.analysis_session("local[2]", conf) as s:
    print(s is ahead.spark, s.range(3).count(), flush=True)
session.wait_stopped()
print(SparkContext._active_spark_context is None, flush=True)
session.start_ahead("local[2]", conf)
first = session._ahead[0]
with session.analysis_session("local[1]", None) as s:
    print(s is not first.spark, s.sparkContext.master, flush=True)
"""


@pytest.mark.spark
def test_a_session_started_ahead_is_the_analysis_s_own_or_stopped() -> None:
    """``start_ahead``'s session is the one the next analysis with its
    settings uses, and that analysis stops it; an analysis with other
    settings stops it and starts its own."""
    r = subprocess.run([sys.executable, "-c", AHEAD], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "3", "True", "True", "local[1]"]


@pytest.mark.parametrize(("checker", "ops", "wanted"), [
    ({}, 100_000, False), ({}, 100_001, True), ({"engine": "spark"}, 10, True),
    ({"engine": "reference"}, 10**7, False), ({"spark_master": "spark://h:7077"}, 10, True)])
def test_the_run_starts_spark_ahead_only_when_its_analysis_will_use_it(tmp_path: Path, monkeypatch: Any,
                                                                       checker: dict, ops: int,
                                                                       wanted: bool) -> None:
    """As ``choose_engine`` chooses, from the ops the run recorded: a run
    checked by the reference engine starts no JVM."""
    calls: list[tuple] = []
    monkeypatch.setattr(session, "start_ahead", lambda master, conf: calls.append((master, conf)))
    (tmp_path / "config.json").write_text(json.dumps({"checker": {}}))
    assert checkers.start_spark_ahead(tmp_path, checker, ops) is wanted
    assert len(calls) == int(wanted)
