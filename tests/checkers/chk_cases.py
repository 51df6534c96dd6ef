"""Hand-written histories with known anomalies, checked by both engines: the
one harness the case tables (test_chk_anomalies, test_chk_txn,
test_chk_groups) share."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import checkers
from checkers import reference
from checkers.common import Settings, assemble
from history.parquet import write_parquet
from history.paired import pair_ops
from checkers.result import ANOMALY_TYPES
from chk_builder import History


@dataclass
class Case:
    build: Callable[[], History]
    expect: dict[str, int]           # anomaly type -> count; every other type 0
    valid: Any
    verify: Callable[[Any], None] | None = None
    tags: list[str] = field(default_factory=list)


def spark_results(cases: dict[str, Case], spark: Any, folder: Path) -> dict[str, Any]:
    """Every case checked by Spark in one pass: run i is case i."""
    names = list(cases)
    path = folder / "cases.parquet"
    write_parquet([(i, pair_ops(cases[n].build().ops)) for i, n in enumerate(names)], path)
    results = checkers.check_runs(path, {"engine": "spark"}, spark=spark)
    return {n: results[i] for i, n in enumerate(names)}


def reference_result(case: Case, tmp_path: Path) -> Any:
    return checkers.check(case.build().write(tmp_path / "history.jsonl"), {"engine": "reference"})


def assert_case(case: Case, r: Any) -> None:
    """The result has exactly the expected counts, witnesses and verdict."""
    assert r.errors == []
    assert {t: c for t, c, _ in checkers.summary(r) if c} == case.expect
    assert r.valid == case.valid
    assert set(r.anomalies) == set(ANOMALY_TYPES)
    for typ, n in case.expect.items():
        assert len(r.anomalies[typ]["witnesses"]) == n
    if case.verify:
        case.verify(r)


def assert_engines_agree(reference: Any, spark: Any) -> None:
    a, b = reference.to_json(), spark.to_json()
    a.pop("checker"), b.pop("checker")
    assert a == b


def case_tests(cases: dict[str, Case], folder: str) -> tuple[Any, Any, Any]:
    """(spark_results fixture, test_case, test_engines_agree_exactly) for a
    module's case table; the module binds them to those names so pytest finds them."""
    import pytest

    @pytest.fixture(scope="module")
    def spark_results_fixture(spark: Any, tmp_path_factory: Any) -> dict[str, Any]:
        return spark_results(cases, spark, tmp_path_factory.mktemp(folder))

    @pytest.mark.parametrize("engine", ["reference", pytest.param("spark", marks=pytest.mark.spark)])
    @pytest.mark.parametrize("name", list(cases))
    def test_case(name: str, engine: str, tmp_path: Path, request: Any) -> None:
        r = request.getfixturevalue("spark_results")[name] if engine == "spark" \
            else reference_result(cases[name], tmp_path)
        assert_case(cases[name], r)

    @pytest.mark.spark
    @pytest.mark.parametrize("name", list(cases))
    def test_engines_agree_exactly(name: str, spark_results: dict[str, Any], tmp_path: Path) -> None:
        assert_engines_agree(reference_result(cases[name], tmp_path), spark_results[name])

    return spark_results_fixture, test_case, test_engines_agree_exactly


REFERENCE = Settings(engine="reference")


def ref_check(ops: list[dict]) -> Any:
    """The reference engine's result for a history's ops."""
    return assemble(reference.analyze(list(pair_ops(ops)), REFERENCE), REFERENCE, {})


def injected_found(spark: Any, ops: list[dict], typ: str, partition: int | None, found: dict[str, Any],
                   path: Path) -> bool:
    """Whether Spark found the injected anomaly: a witness of ``typ`` on its
    partition. When the first ``max_witnesses`` (partition order) are all of
    anomalies the history had anyway, the history alone is checked again with
    every witness asked for."""
    if found["count"] < 1:
        return False
    if any(w["partition"] == partition for w in found["witnesses"]):
        return True
    if len(found["witnesses"]) >= found["count"]:
        return False
    one = path.with_name(path.stem + "-one.parquet")
    write_parquet([(0, pair_ops(ops))], one)
    every = checkers.check_runs(one, {"engine": "spark", "max_witnesses": found["count"]}, spark=spark)[0]
    return any(w["partition"] == partition for w in every.anomalies[typ]["witnesses"])


def compare_batch(spark: Any, built: list[tuple[list[dict], str | None, int | None]], path: Path,
                  seen: dict[str, int] | None = None) -> None:
    """Generated histories (ops, injected type or None, its partition) in one
    multi-run Spark pass: Spark finds each injected anomaly on its partition
    (counted per type in ``seen``), and both engines' results are equal."""
    write_parquet([(i, pair_ops(ops)) for i, (ops, _, _) in enumerate(built)], path)
    results = checkers.check_runs(path, {"engine": "spark"}, spark=spark)
    for i, (ops, typ, partition) in enumerate(built):
        ref = ref_check(ops).to_json()
        ref.pop("checker")
        if i not in results:
            assert ops == [] and ref["valid"] == "unknown"
            continue
        got = results[i].to_json()
        got.pop("checker")
        assert got["errors"] == [], f"history {i}: {got['errors']}"
        if typ is not None:
            assert injected_found(spark, ops, typ, partition, got["anomalies"][typ], path), \
                f"history {i}: {typ} not detected"
            if seen is not None:
                seen[typ] = seen.get(typ, 0) + 1
        assert {t: a["count"] for t, a in got["anomalies"].items()} == \
               {t: a["count"] for t, a in ref["anomalies"].items()}, f"history {i}"
        assert got == ref, f"history {i}"
