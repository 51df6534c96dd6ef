"""Bad input, the Parquet file, crashes, and the analyze_run hook."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import checkers
from checkers import reference, spark_partition
from history.parquet import history_to_parquet, read_paired_ops
from history.paired import PARQUET_SCHEMA
from chk_builder import History, small_history
from history.ops import HistoryFormatError

ENGINES = ["reference", pytest.param("spark", marks=pytest.mark.spark)]


def small() -> History:
    return small_history()


def cfg(engine: str) -> dict[str, Any]:
    return {"engine": engine}


def test_parquet_schema_and_pairing(tmp_path: Path) -> None:
    path = small().write(tmp_path / "history.jsonl")
    n = history_to_parquet(path, tmp_path / "history.parquet")
    table = pq.read_table(tmp_path / "history.parquet")
    assert table.schema.equals(PARQUET_SCHEMA) and n == table.num_rows == 5
    rows = {r["f"]: r for r in table.to_pylist()}
    send = rows["send"]
    assert (send["invoke_index"], send["index"], send["type"], send["process"], send["role"]) == (1, 2, "ok", 0, "client")
    assert send["messages"] == [{"partition": 0, "offset": 0, "value": 1}, {"partition": 1, "offset": 0, "value": 1}]
    assert rows["poll"]["partitions"] == [0, 1]
    assert rows["sample"]["invoke_index"] == rows["sample"]["index"] == 0
    assert rows["sample"]["sample"][0] == {"partition": 0, "leader": 1, "isr": [1, 2, 3], "epoch": 0}
    assert rows["start-partition"]["role"] == "nemesis" and rows["start-partition"]["process"] is None
    # the reference reads Parquet and JSONL alike
    assert [o.to_row() for o in read_paired_ops(tmp_path / "history.parquet")] == \
           [o.to_row() for o in read_paired_ops(path)]


def test_incomplete_op_becomes_info(tmp_path: Path) -> None:
    h = small()
    h.add(3, "invoke", "send", [[0, 2, None]])
    ops = read_paired_ops(h.write(tmp_path / "history.jsonl"))
    last = [o for o in ops if o.process == 3][0]
    assert (last.type, last.index, last.time) == ("info", None, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_truncated_last_line_is_tolerated(engine: str, tmp_path: Path, caplog: Any, request: Any) -> None:
    path = small().write(tmp_path / "history.jsonl")
    with open(path, "a") as fh:
        fh.write('{"index": 9, "time": 99, "process": 0, "ty')     # a crash mid-write
    kw = {"spark": request.getfixturevalue("spark")} if engine == "spark" else {}
    r = checkers.check(path, cfg(engine), **kw)
    assert r.valid is True and r.errors == []
    assert "truncated last line" in caplog.text


@pytest.mark.parametrize("engine", ["reference", "spark"])
def test_corrupt_middle_line_names_the_line(engine: str, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    lines = small().write(path).read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines))
    with pytest.raises(HistoryFormatError, match=r"history.jsonl:3"):
        checkers.check(path, cfg(engine))      # raises while reading (Spark may be starting beside it)
    with pytest.raises(HistoryFormatError, match=r":3"):
        history_to_parquet(path, tmp_path / "history.parquet")


@pytest.mark.parametrize("engine", ENGINES)
def test_empty_history_is_unknown(engine: str, tmp_path: Path, request: Any) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("")
    kw = {"spark": request.getfixturevalue("spark")} if engine == "spark" else {}
    r = checkers.check(path, cfg(engine), **kw)
    assert r.valid == "unknown"
    assert all(a["count"] == 0 for a in r.anomalies.values())
    assert set(r.anomalies) == set(checkers.ANOMALY_TYPES)


def test_reference_checker_that_raises_gives_unknown(tmp_path: Path, monkeypatch: Any) -> None:
    def boom(run: Any, settings: Any) -> Any:
        raise RuntimeError("kaput")
    monkeypatch.setitem(reference.CHECKS, "phantom", boom)
    r = checkers.check(small().write(tmp_path / "history.jsonl"), cfg("reference"))
    assert r.valid == "unknown"
    assert r.errors == ["phantom: RuntimeError: kaput"]
    assert r.anomalies["phantom-write"]["error"] == "phantom: RuntimeError: kaput"
    assert r.anomalies["lost-write"]["count"] == 0 and "error" not in r.anomalies["lost-write"]


@pytest.mark.spark
def test_spark_pass_that_raises_gives_unknown(tmp_path: Path, monkeypatch: Any, spark: Any) -> None:
    import checkers.spark as engine

    def boom(spark: Any, first: Any, ctx: Any) -> Any:
        return spark.range(1).selectExpr("no_such_column").collect()      # fails inside Spark
    monkeypatch.setattr(engine, "partition_results", boom)
    r = checkers.check(small().write(tmp_path / "history.jsonl"), cfg("spark"), spark=spark)
    assert r.valid == "unknown"
    assert len(r.errors) == 1 and r.errors[0].startswith("messages: ")
    assert "error" in r.anomalies["phantom-write"]
    assert r.stats["ops"]["send"]["ok"] == 1          # the other jobs still reported


def test_partition_check_that_raises_is_isolated(monkeypatch: Any) -> None:
    """In the per-partition pass a failing check reports an error row and the
    others still report (no Spark needed: this is the workers' code)."""
    import pyarrow as pa

    def boom(self: Any) -> None:
        raise RuntimeError("kaput")
    monkeypatch.setattr(spark_partition.PartitionLog, "phantom", boom)
    from checkers.spark_scan import MESSAGE_SCHEMA
    t = pa.Table.from_pydict({"id": [1, 3], "pos": [0, 0], "process": [0, 5],
                              "producer": [None, None], "kind": [0, 4], "rc": [True, True], "t_inv": [1, 3],
                              "t_done": [2, 4], "offset": [0, 0], "value": [1, 1]}, schema=MESSAGE_SCHEMA)
    key = (pa.scalar(0, pa.int32()), pa.scalar(0, pa.int32()))
    out = spark_partition.analyze_group(key, t, spark_partition.Context(k=5)).to_pylist()
    errors = [(r["type"], r["extra"]) for r in out if r["what"] == "error"]
    assert errors == [("phantom", "RuntimeError: kaput")]
    counts = {r["type"]: r["n"] for r in out if r["what"] == "count"}
    assert counts["lost-write"] == 0 and counts["duplicate"] == 0 and "phantom-write" not in counts


def test_anomaly_beats_unknown(tmp_path: Path, monkeypatch: Any) -> None:
    """valid is false iff a non-allowed anomaly was found, crash or not."""
    monkeypatch.setitem(reference.CHECKS, "phantom", lambda run, s: 1 / 0)
    h = small()
    h.poll(6, {0: [(0, 99)]})
    r = checkers.check(h.write(tmp_path / "history.jsonl"), cfg("reference"))
    assert r.valid is False and r.errors


def test_bad_config_is_refused(tmp_path: Path) -> None:
    path = small().write(tmp_path / "history.jsonl")
    with pytest.raises(ValueError):
        checkers.check(path, {"engine": "flink"})
    with pytest.raises(ValueError):
        checkers.check(path, {"allowed": {"no-such-anomaly": "x"}})


@pytest.mark.spark
def test_analyze_run_writes_parquet_and_results(tmp_path: Path, spark: Any) -> None:
    run = tmp_path / "run"
    run.mkdir()
    small().write(run / "history.jsonl")
    (run / "config.json").write_text(json.dumps({"seed": 1, "checker": {"max_witnesses": 3}}))
    r = checkers.analyze_run(run, spark=spark)
    assert (run / "history.parquet").exists()
    doc = json.loads((run / "results.json").read_text())
    assert doc["valid"] is True and doc == json.loads(json.dumps(r.to_json()))
    assert doc["checker"]["engine"] == "spark" and doc["checker"]["master"] == "local[2]"
    assert set(doc["stats"]) >= {"ops", "acknowledged", "read", "drain_complete", "availability", "realtime_lag"}


def test_analyze_run_config_override_and_corrupt_history(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    small().write(run / "history.jsonl")
    (run / "config.json").write_text(json.dumps({"checker": {"engine": "spark"}}))
    r = checkers.analyze_run(run, {"engine": "reference"})
    assert r.checker["engine"] == "reference" and r.valid is True
    (run / "history.jsonl").write_text('{"broken\n{"index": 1}\n')
    with pytest.raises(HistoryFormatError):
        checkers.analyze_run(run, {"engine": "reference"})
    doc = json.loads((run / "results.json").read_text())
    assert doc["valid"] == "unknown" and "history" in doc["errors"][0]


def test_write_results_roundtrip(tmp_path: Path) -> None:
    r = checkers.check(small().write(tmp_path / "history.jsonl"), cfg("reference"))
    checkers.write_results(r, tmp_path / "out" / "results.json")
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(doc) == {"valid", "checker", "errors", "anomalies", "unclean_elections", "stats", "unknown",
                        "elections", "partition_changes"}
    assert doc["stats"]["ops"]["send"] == {"ok": 1, "fail": 0, "info": 0}
    assert doc["stats"]["acknowledged"] == 2 and doc["stats"]["read"] == 2
    assert doc["stats"]["availability"][0]["second"] == 0
