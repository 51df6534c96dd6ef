"""Properties over simulated histories (chk_gen): a correct Kafka is valid,
each injected anomaly is found with a witness on the right partition, and the
Spark engine agrees with the reference exactly (counts, verdict, witnesses,
contexts, statistics) on every history, injected ones included.

Budgets: the reference-only properties are cheap and run more examples; the
Spark comparison checks KCHAOS_HYPOTHESIS_EXAMPLES histories (default 200),
BATCH at a time in one multi-run Spark pass each.
"""
from __future__ import annotations

import math
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import checkers
from checkers import reference
from checkers.common import UNKNOWN_TYPES, Settings, assemble
from checkers.load import write_parquet
from checkers.model import pair_ops
from checkers.result import ANOMALY_TYPES
from chk_gen import Params, inject, params, simulate

# Spark-vs-reference histories per test run (conftest.py documents it too).
HYPOTHESIS_EXAMPLES = int(os.environ.get("KCHAOS_HYPOTHESIS_EXAMPLES", "200"))

BATCH = 50
REFERENCE = Settings(engine="reference")
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


def ref_check(ops: list[dict]) -> Any:
    return assemble(reference.analyze(list(pair_ops(ops)), REFERENCE), REFERENCE, {})


# The election record (metadata log) is not simulated here: elr-election cannot be injected.
INJECTABLE = tuple(t for t in ANOMALY_TYPES if t != "elr-election")


def expected_verdict(ops: list[dict]) -> Any:
    """Valid when something was acknowledged and every acknowledged value was read."""
    sends = [o for o in ops if o["f"] == "send" and isinstance(o["process"], int) and o["type"] != "invoke"]
    acked = {(m[0], m[1]) for o in sends for m in o["value"] if o["type"] == "ok" or m[2] is not None}
    read = {(int(p), r[1]) for o in ops if o["f"] == "poll" and o["type"] == "ok" and isinstance(o["process"], int)
            for p, rs in (o["value"] or {}).items() for r in rs}
    ok_send = any(o["type"] == "ok" for o in sends)
    return True if ok_send and acked <= read else "unknown"


@settings(max_examples=max(100, HYPOTHESIS_EXAMPLES), deadline=None, suppress_health_check=QUIET)
@given(params())
def test_correct_history_is_valid(p: Params) -> None:
    ops = simulate(p)
    r = ref_check(ops)
    assert r.errors == []
    bad = {t: a["count"] for t, a in r.anomalies.items()
           if a["count"] and not a["allowed"] and t not in UNKNOWN_TYPES}
    assert bad == {}
    assert r.valid == expected_verdict(ops)
    if p.mode == "assign":
        assert r.anomalies["poll-skip"]["count"] == r.anomalies["nonmonotonic-poll"]["count"] == 0
    if p.drain:
        assert r.anomalies["unseen"]["count"] == 0 and r.stats["drain_complete"]


@settings(max_examples=max(100, HYPOTHESIS_EXAMPLES), deadline=None, suppress_health_check=QUIET)
@given(params(), st.sampled_from(INJECTABLE), st.integers(0, 2**16))
def test_injected_anomaly_is_detected(p: Params, typ: str, seed: int) -> None:
    injected = inject(simulate(p), typ, random.Random(seed))
    if injected is None:
        return                      # no place for this anomaly in this history
    ops, partition = injected
    r = ref_check(ops)
    a = r.anomalies[typ]
    assert a["count"] >= 1
    assert any(w["partition"] == partition for w in a["witnesses"])
    w = a["witnesses"][0]
    assert w["ops"] and all({"index", "time", "process", "type", "f", "value"} <= set(o) for o in w["ops"])
    assert set(w["context"]) == {"faults", "recent_nemesis", "sample"}
    if not a["allowed"]:
        assert r.valid is False if typ not in UNKNOWN_TYPES else r.valid in (False, "unknown")


CASE = st.tuples(params(), st.sampled_from((None,) + INJECTABLE), st.integers(0, 2**16))


def build(case: tuple[Params, str | None, int]) -> tuple[list[dict], str | None, int | None]:
    """The history, and the anomaly type and partition injected into it (if any)."""
    p, typ, seed = case
    ops = simulate(p)
    if typ is not None:
        injected = inject(ops, typ, random.Random(seed))
        if injected:
            return injected[0], typ, injected[1]
    return ops, None, None


@pytest.mark.spark
@settings(max_examples=max(1, math.ceil(HYPOTHESIS_EXAMPLES / BATCH)), deadline=None,
          suppress_health_check=QUIET)
@given(cases=st.lists(CASE, min_size=BATCH, max_size=BATCH))
def test_spark_agrees_with_reference(cases: list, spark: Any, tmp_path_factory: Any) -> None:
    built = [build(c) for c in cases]
    histories = [ops for ops, _, _ in built]
    path = Path(tmp_path_factory.mktemp("batch")) / "batch.parquet"
    write_parquet([(i, pair_ops(ops)) for i, ops in enumerate(histories)], path)
    results = checkers.check_runs(path, {"engine": "spark"}, spark=spark)
    for i, (ops, typ, partition) in enumerate(built):
        ref = ref_check(ops).to_json()
        ref.pop("checker")
        if i not in results:        # a run with no ops has no rows in the file
            assert ops == [] and ref["valid"] == "unknown"
            continue
        got = results[i].to_json()
        got.pop("checker")
        assert got["errors"] == []
        if typ is not None:           # the injected anomaly, found by Spark itself
            assert got["anomalies"][typ]["count"] >= 1
            assert any(w["partition"] == partition for w in got["anomalies"][typ]["witnesses"])
        assert {t: a["count"] for t, a in got["anomalies"].items()} == \
               {t: a["count"] for t, a in ref["anomalies"].items()}, f"history {i}: {cases[i]}"
        assert got["valid"] == ref["valid"]
        assert got == ref, f"history {i}: {cases[i]}"
