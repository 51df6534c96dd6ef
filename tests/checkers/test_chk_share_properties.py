"""Properties over simulated share-group histories (chk_gen_share): a correct
share group is valid with no anomaly, each injected share anomaly is found on
its partition, and Spark agrees with the reference exactly on every history.

Budgets as in test_chk_groups_properties: KCHAOS_HYPOTHESIS_EXAMPLES (default
200) reference examples; Spark checks one batch of BATCH histories in the
default suite, and the ``long`` test KCHAOS_LONG_HISTORIES (default 1,000).
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chk_cases import compare_batch, ref_check
from chk_gen_share import SHARE_TYPES, SParams, inject, simulate, sparams

HYPOTHESIS_EXAMPLES = int(os.environ.get("KCHAOS_HYPOTHESIS_EXAMPLES", "200"))
BATCH = 40
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


@settings(max_examples=max(50, HYPOTHESIS_EXAMPLES // 2), deadline=None, suppress_health_check=QUIET)
@given(sparams())
def test_correct_share_group_is_valid(p: SParams) -> None:
    r = ref_check(simulate(p))
    assert r.errors == []
    assert {t: a["count"] for t, a in r.anomalies.items() if a["count"] and not a["allowed"]} == {}
    assert r.valid == (True if any(o["f"] == "send" for o in simulate(p)) else "unknown")


@settings(max_examples=max(50, HYPOTHESIS_EXAMPLES // 2), deadline=None, suppress_health_check=QUIET)
@given(sparams(), st.sampled_from(SHARE_TYPES), st.integers(0, 2**16))
def test_injected_share_anomaly_is_detected(p: SParams, typ: str, seed: int) -> None:
    got = inject(simulate(p), typ, random.Random(seed), p.limit)
    if got is None:
        return
    ops, partition = got
    r = ref_check(ops)
    a = r.anomalies[typ]
    assert a["count"] >= 1 and any(w["partition"] == partition for w in a["witnesses"]), typ
    assert not a["allowed"] and r.valid is False


def build(case: tuple[SParams, str | None, int]) -> tuple[list[dict], str | None, int | None]:
    p, typ, seed = case
    ops = simulate(p)
    if typ is not None:
        got = inject(ops, typ, random.Random(seed), p.limit)
        if got is not None:
            return got[0], typ, got[1]
    return ops, None, None


def cases(n: int, seed: int) -> list[tuple[SParams, str | None, int]]:
    """``n`` generated cases, drawn from one seed (a batch for one Spark pass)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = SParams(rng.randrange(2**31), rng.randint(1, 3), rng.randint(1, 3), rng.randint(5, 40),
                    rng.randint(2, 4), rng.choice([0.0, 0.2]), rng.choice([0.0, 0.15]), rng.choice([0.0, 0.2]))
        out.append((p, rng.choice((None,) + SHARE_TYPES), rng.randrange(2**16)))
    return out


@pytest.mark.spark
def test_spark_agrees_with_reference_on_share_groups(spark: Any, tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    compare_batch(spark, [build(c) for c in cases(BATCH, 932)], tmp_path / "batch.parquet", seen)
    assert set(seen) == set(SHARE_TYPES)


LONG_HISTORIES = int(os.environ.get("KCHAOS_LONG_HISTORIES", "1000"))
LONG_BATCH = 250


@pytest.mark.long
@pytest.mark.spark
def test_spark_agrees_with_reference_on_many_share_groups(spark: Any, tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    for b in range(max(1, LONG_HISTORIES // LONG_BATCH)):
        compare_batch(spark, [build(c) for c in cases(LONG_BATCH, 9320 + b)], tmp_path / f"b{b}.parquet", seen)
    assert set(seen) == set(SHARE_TYPES)
