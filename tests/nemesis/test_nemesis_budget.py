"""The fault budget and budgeted plans: pure, no Kafka."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis import packages as P
from nemesis.budget import Budget, default_nodes, op_cost

ALL = ["partition", "kill", "pause", "clock", "netem"]


def test_default_budget_leaves_a_quorum_and_min_insync():
    assert default_nodes(3, 3, 2) == 1
    assert default_nodes(5, 5, 2) == 2          # quorum of 5 tolerates 2
    assert default_nodes(5, 3, 2) == 1          # a partition's 3 replicas tolerate 1
    assert default_nodes(7, 5, 2) == 3
    assert default_nodes(3, 3, 1) == 1          # the quorum, not min ISR, binds
    assert default_nodes(3, 3, 3) == 1 and default_nodes(1, 1, 1) == 1  # no room: one at a time


@pytest.mark.parametrize("op,n,cost", [
    ({"f": "kill", "value": {"fault": "kill", "target": "node", "node_index": 3}}, 3, 1),
    ({"f": "kill", "value": {"fault": "kill", "target": "leader"}}, 5, 1),
    ({"f": "pause", "value": {"fault": "pause", "target": "minority"}}, 5, 2),
    ({"f": "pause", "value": {"fault": "pause", "target": "all"}}, 3, 3),
    ({"f": "bump-clock", "value": {"fault": "clock", "target": "all"}}, 3, 0),
    ({"f": "start-netem", "value": {"fault": "netem", "target": "controller"}}, 3, 1),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "isolate-leader"}}, 3, 1),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "halves"}}, 3, 1),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "halves"}}, 4, 4),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "halves"}}, 5, 2),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "bridge"}}, 5, 2),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "majorities-ring"}}, 3, 1),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "majorities-ring"}}, 5, 5),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "client-cut-leader"}}, 3, 1),
    ({"f": "start-partition", "value": {"fault": "partition", "topology": "client-only-leader"}}, 3, 2),
])
def test_op_cost(op, n, cost):
    assert op_cost(op, n) == cost


def _walk(timeline, n):
    """(max cost on at once, starts, [(stop time, next costly start time)])."""
    active: dict[str, int] = {}
    worst = starts = 0
    last_stop = None
    gaps = []
    for t, op in timeline:
        name = {"start-partition": "partition", "stop-partition": "partition", "kill": "kill", "start": "kill",
                "pause": "pause", "resume": "pause", "bump-clock": "clock", "strobe-clock": "clock",
                "reset-clock": "clock", "start-netem": "netem", "stop-netem": "netem"}[op["f"]]
        if op["f"] in ("start-partition", "kill", "pause", "bump-clock", "strobe-clock", "start-netem"):
            assert name not in active
            active[name] = op_cost(op, n)
            starts += 1
            if active[name] and last_stop is not None:
                gaps.append((last_stop, t))
        else:
            active.pop(name)
            last_stop = t
        worst = max(worst, sum(active.values()))
    return worst, starts, gaps


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32), st.floats(20, 900), st.floats(1, 60), st.integers(3, 7),
       st.integers(0, 3), st.floats(0, 30),
       st.lists(st.sampled_from(ALL), min_size=1, max_size=5, unique=True))
def test_budgeted_plan_keeps_the_budget_and_the_recovery_windows(seed, limit, interval, n, nodes, recovery, names):
    budget = Budget(nodes=nodes, recovery_s=recovery, n=n)
    timeline = P.plan(P.build_packages([",".join(names)]), limit, interval, random.Random(seed), budget)
    assert timeline == P.plan(P.build_packages([",".join(names)]), limit, interval, random.Random(seed), budget)
    assert all(0 < t < limit for t, _ in timeline) and [t for t, _ in timeline] == sorted(t for t, _ in timeline)
    worst, _, gaps = _walk(timeline, n)
    assert worst <= nodes
    for stop, start in gaps:
        assert start - stop >= recovery - 1e-3, (stop, start)


def test_default_run_has_faults_and_never_two_impairing_ones_at_once():
    from harness.run_config import RunConfig
    from harness.schedule import fault_plan, fault_budget
    cfg = RunConfig(seed=1, time_limit=600)
    cfg.nemesis.faults, cfg.nemesis.interval = ["partition", "kill", "pause"], 10
    assert fault_budget(cfg) == Budget(nodes=1, recovery_s=10.0, n=3)
    worst, starts, _ = _walk(fault_plan(cfg), 3)
    assert worst == 1 and starts >= 10
    cfg.nemesis.budget = 3  # a scenario that asks for more gets overlapping faults again
    assert max(_walk(fault_plan(cfg), 3)[0] for cfg.seed in range(1, 6)) > 1


def test_budget_config_is_validated():
    from harness.run_config import RunConfig, validate
    from infra.errors import UsageError
    for bad in (-1, 1.5, True):
        cfg = RunConfig()
        cfg.nemesis.budget = bad
        with pytest.raises(UsageError, match="budget"):
            validate(cfg)
    cfg = RunConfig()
    cfg.nemesis.recovery_window = -2.0
    with pytest.raises(UsageError, match="recovery_window"):
        validate(cfg)


def test_a_standing_cost_is_held_beside_the_faults_on():
    from nemesis.budget import fits
    budget = Budget(nodes=2, recovery_s=0, n=3, standing=(1, 0))
    assert fits(budget, [], (1, 0)) and not fits(budget, [(1, 0)], (1, 0))
    full = Budget(nodes=1, recovery_s=0, n=3, standing=(3, 0))  # a standing cost above the room alone
    assert fits(full, [], (0, 0)) and not fits(full, [], (1, 0))
    iso = Budget(nodes=1, recovery_s=0, n=3, controllers=3, controller_nodes=1, standing=(1, 0))
    assert fits(iso, [], (0, 1)) and not fits(iso, [], (1, 1))  # a side the start spares has room


def _proxied(rule: dict, faults: list[str]):
    from harness.run_config import RunConfig
    cfg = RunConfig(seed=3, time_limit=300)
    cfg.nemesis.faults, cfg.nemesis.interval, cfg.nemesis.proxy = faults, 10, [rule]
    return cfg


def test_proxy_rules_are_counted_in_the_run_budget():
    """The proxy's rules hold what they impair for the whole plan: a rule on
    every broker fills a 3-node cluster's budget of 1, so only clock faults
    start beside it; a rule on one named request leaves none either, and a
    larger budget lets the kills back in."""
    from harness.schedule import fault_budget, fault_plan
    everywhere = _proxied({"api": "Produce", "action": "close", "probability": 0.1}, ["proxy", "kill", "clock"])
    assert fault_budget(everywhere).standing == (3, 0)
    starts = [op["f"] for _, op in fault_plan(everywhere) if op["f"] not in ("start", "reset-clock")]
    assert "proxy-arm" in starts and "kill" not in starts and {"bump-clock", "strobe-clock"} & set(starts)
    one = _proxied({"api": "EndTxn", "action": "close", "nth": 1}, ["proxy", "kill"])
    assert fault_budget(one).standing == (1, 0)
    assert "kill" not in [op["f"] for _, op in fault_plan(one)]
    one.nemesis.budget = 2
    assert [op["f"] for _, op in fault_plan(one)].count("kill") >= 5
    assert fault_budget(_proxied({"api": "Produce", "action": "close"}, ["kill"])).standing == (0, 0)  # not armed
