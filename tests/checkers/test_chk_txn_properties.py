"""Properties over simulated transactional histories (chk_gen_txn): a correct
Kafka with transactions (aborts, unknown outcomes, read_committed and
read_uncommitted readers, commit markers) shows no anomaly that is not
allowed; each injected anomaly (every txn type, and the chain and offset
rules txns take part in: chk_gen_txn_scenarios.INJECTED) is found with a
witness on its partition; the Spark engine agrees with the reference exactly on every
history, injected ones included.

Budgets as in test_chk_properties.py: KCHAOS_HYPOTHESIS_EXAMPLES (default
200) histories for the Spark comparison, BATCH per Spark pass; the ``long``
test checks KCHAOS_LONG_HISTORIES (default 10,000) when ``-m`` names ``long``.
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

from checkers.common import UNKNOWN_TYPES
from chk_cases import compare_batch, ref_check
from chk_gen_txn import INJECTED, TxnParams, inject_txn, random_txn_params, simulate_txn, txn_params

HYPOTHESIS_EXAMPLES = int(os.environ.get("KCHAOS_HYPOTHESIS_EXAMPLES", "200"))
BATCH = 50
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


@settings(max_examples=max(100, HYPOTHESIS_EXAMPLES), deadline=None, suppress_health_check=QUIET)
@given(txn_params())
def test_correct_txn_history_is_valid(p: TxnParams) -> None:
    ops = simulate_txn(p)
    r = ref_check(ops)
    assert r.errors == []
    bad = {t: a["count"] for t, a in r.anomalies.items()
           if a["count"] and not a["allowed"] and t not in UNKNOWN_TYPES}
    assert bad == {}, p
    acked = any(o["type"] == "ok" and (o["f"] == "send" or any(m[0] == "send" for m in o["value"]))
                for o in ops if o["f"] in ("send", "txn"))
    # an info txn settled committed (a read of its value, or the drain's) wrote acknowledged values too
    acked = acked or any(t["outcome"] == "committed" for t in r.stats.get("settled_txns", []))
    if p.drain:
        assert r.valid == (True if acked else "unknown")
        assert r.anomalies["unseen"]["count"] == 0


@settings(max_examples=max(100, HYPOTHESIS_EXAMPLES), deadline=None, suppress_health_check=QUIET)
@given(txn_params(), st.sampled_from(INJECTED), st.integers(0, 2**16))
def test_injected_txn_anomaly_is_detected(p: TxnParams, typ: str, seed: int) -> None:
    ops, partition = inject_txn(simulate_txn(p), typ, random.Random(seed))
    r = ref_check(ops)
    a = r.anomalies[typ]
    assert a["count"] >= 1, (p, typ)
    assert any(w["partition"] == partition for w in a["witnesses"])
    if not a["allowed"]:
        assert r.valid is False


def test_every_type_has_a_mutation_somewhere() -> None:
    """Injection mutates real txn histories (not only appends scenarios) for
    the types that have a place in them."""
    from chk_gen_txn import _mutate
    import copy
    rng = random.Random(7)
    mutated = set()
    for _ in range(300):
        ops = simulate_txn(random_txn_params(rng))
        for typ in INJECTED:
            if _mutate(copy.deepcopy(ops), typ, rng) is not None:
                mutated.add(typ)
    assert {"aborted-read", "precommitted-read", "torn-transaction", "lost-txn-write", "int-poll-skip",
            "int-nonmonotonic-poll", "int-nonmonotonic-send"} <= mutated


CASE = st.tuples(txn_params(), st.sampled_from((None,) + INJECTED), st.integers(0, 2**16))


def build(case: tuple[TxnParams, str | None, int]) -> tuple[list[dict], str | None, int | None]:
    p, typ, seed = case
    ops = simulate_txn(p)
    if typ is None:
        return ops, None, None
    ops, q = inject_txn(ops, typ, random.Random(seed))
    return ops, typ, q


@pytest.mark.spark
@settings(max_examples=max(1, math.ceil(HYPOTHESIS_EXAMPLES / BATCH)), deadline=None, suppress_health_check=QUIET)
@given(cases=st.lists(CASE, min_size=BATCH, max_size=BATCH))
def test_spark_agrees_with_reference_on_txn_histories(cases: list, spark: Any, tmp_path_factory: Any) -> None:
    compare_batch(spark, [build(c) for c in cases], Path(tmp_path_factory.mktemp("txn-batch")) / "batch.parquet")


LONG_HISTORIES = int(os.environ.get("KCHAOS_LONG_HISTORIES", "10000"))
LONG_BATCH = 500


@pytest.mark.long
@pytest.mark.spark
def test_long_spark_agrees_on_txn_histories_and_detects_every_type(spark: Any, tmp_path: Path) -> None:
    """LONG_HISTORIES transactional histories (a third correct, the rest with one
    injected txn anomaly, every type in turn) through both engines."""
    rng = random.Random(int(os.environ.get("KCHAOS_LONG_SEED", "20241")))
    seen: dict[str, int] = {}
    done = 0
    while done < LONG_HISTORIES:
        n = min(LONG_BATCH, LONG_HISTORIES - done)
        cases = [(random_txn_params(rng), None if (done + j) % 3 == 0 else INJECTED[(done + j) % len(INJECTED)],
                  rng.randrange(2**16)) for j in range(n)]
        compare_batch(spark, [build(c) for c in cases], tmp_path / f"batch{done}.parquet", seen)
        done += n
    print(f"\nlong run: {done} histories; injected and detected per type: {seen}")
    assert set(seen) == set(INJECTED)       # compare_batch asserts each injected one was detected
