"""Properties over simulated consumer-group histories (chk_gen_groups): a
correct group is valid with no group anomaly and no poll-chain anomaly (the
chains follow the rebalances; no subscribe allowance applies), each injected
group anomaly is found on its partition, and Spark agrees with the reference
exactly on every history.

Budgets as in test_chk_properties: KCHAOS_HYPOTHESIS_EXAMPLES (default 200)
reference examples, that many histories through Spark in batches of BATCH;
the ``long`` test checks KCHAOS_LONG_HISTORIES (default 2,000).
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

from chk_cases import compare_batch, ref_check
from chk_gen_groups import GROUP_TYPES, GParams, gparams, inject, simulate

HYPOTHESIS_EXAMPLES = int(os.environ.get("KCHAOS_HYPOTHESIS_EXAMPLES", "200"))
BATCH = 50
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


@settings(max_examples=max(50, HYPOTHESIS_EXAMPLES // 2), deadline=None, suppress_health_check=QUIET)
@given(gparams())
def test_correct_group_is_valid(p: GParams) -> None:
    ops, _ = simulate(p)
    r = ref_check(ops)
    assert r.errors == []
    assert {t: a["count"] for t, a in r.anomalies.items() if a["count"] and not a["allowed"]} == {}
    if any(o["f"] == "rebalance" for o in ops):
        assert r.stats["mode"] == "group"
    assert r.valid == (True if any(o["f"] == "send" and o["type"] == "ok" for o in ops) else "unknown")


@settings(max_examples=max(50, HYPOTHESIS_EXAMPLES // 2), deadline=None, suppress_health_check=QUIET)
@given(gparams(), st.sampled_from(GROUP_TYPES), st.integers(0, 2**16))
def test_injected_group_anomaly_is_detected(p: GParams, typ: str, seed: int) -> None:
    ops, sim = simulate(p)
    got = inject(ops, sim, typ, random.Random(seed))
    if got is None:
        return
    ops, partition = got
    r = ref_check(ops)
    a = r.anomalies[typ]
    assert a["count"] >= 1 and any(w["partition"] == partition for w in a["witnesses"])
    assert not a["allowed"] and r.valid is False


def build(case: tuple[GParams, str | None, int]) -> tuple[list[dict], str | None, int | None]:
    p, typ, seed = case
    ops, sim = simulate(p)
    if typ is not None:
        got = inject(ops, sim, typ, random.Random(seed))
        if got is not None:
            return got[0], typ, got[1]
    return ops, None, None


CASE = st.tuples(gparams(), st.sampled_from((None,) + GROUP_TYPES), st.integers(0, 2**16))


@pytest.mark.spark
@settings(max_examples=max(1, math.ceil(HYPOTHESIS_EXAMPLES / BATCH)), deadline=None,
          suppress_health_check=QUIET)
@given(cases=st.lists(CASE, min_size=BATCH, max_size=BATCH))
def test_spark_agrees_with_reference_on_groups(cases: list, spark: Any, tmp_path_factory: Any) -> None:
    compare_batch(spark, [build(c) for c in cases], Path(tmp_path_factory.mktemp("gbatch")) / "batch.parquet")


LONG_HISTORIES = int(os.environ.get("KCHAOS_LONG_HISTORIES", "2000"))
LONG_BATCH = 500


@pytest.mark.long
@pytest.mark.spark
def test_long_groups_agree_and_detect_every_kind(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("KCHAOS_LONG_SEED", "20241")))
    seen: dict[str, int] = {}
    done = 0
    while done < LONG_HISTORIES:
        n = min(LONG_BATCH, LONG_HISTORIES - done)
        cases = [(GParams(seed=rng.randrange(2**32), partitions=rng.randint(1, 3), members=rng.randint(1, 3),
                          steps=rng.randint(5, 80), cooperative=rng.random() < 0.5,
                          p_info_commit=rng.choice([0.0, 0.2])),
                  None if (done + j) % 5 == 0 else GROUP_TYPES[(done + j) % len(GROUP_TYPES)], rng.randrange(2**16))
                 for j in range(n)]
        compare_batch(spark, [build(c) for c in cases], tmp_path / f"batch{done}.parquet", seen)
        done += n
    print(f"\nlong group run: {done} histories; injected and detected per type: {seen}")
    assert set(seen) == set(GROUP_TYPES)
