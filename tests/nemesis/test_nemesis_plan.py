"""Fault packages, plans, composition and CLI input checks: no Kafka."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.errors import UsageError
from nemesis import packages as P
from nemesis.protocol import ComposedNemesis, NemesisContext, UnknownNemesisOp, completed, compose

STARTS = {"start-partition": "partition", "kill": "kill", "pause": "pause",
          "bump-clock": "clock", "strobe-clock": "clock", "start-netem": "netem"}
STOPS = {"stop-partition": "partition", "start": "kill", "resume": "pause", "reset-clock": "clock",
         "stop-netem": "netem"}
MIX = ["partition", "kill", "pause", "clock", "netem"]


def test_build_packages_parses_names():
    assert [p.name for p in P.build_packages(["partition,kill"])] == ["partition", "kill"]
    assert [p.name for p in P.build_packages(["all"])][:5] == MIX
    assert [p.name for p in P.build_packages(["clock", "all", " kill "])][:5] == [
        "clock", "partition", "kill", "pause", "netem"]
    assert [p.name for p in P.build_packages(["client-cut-leader"])] == ["client-cut-leader"]
    assert "client-cut-leader" not in [p.name for p in P.build_packages(["all"])]
    assert P.build_packages(["none"]) == [] and P.build_packages([]) == []
    with pytest.raises(UsageError) as exc:
        P.build_packages(["partition,bogus"])
    assert "bogus" in str(exc.value) and "partition, kill, pause, clock, netem" in str(exc.value)
    assert "client-cut-leader" in str(exc.value)


def test_packages_have_plot_names_and_colours():
    for p in [pk for pk in P.build_packages(["all"]) if pk.name in MIX]:
        assert p.color.startswith("#") and len(p.color) == 7
        assert p.stop_f in STOPS and STOPS[p.stop_f] == p.name
        assert all(STARTS[f] == p.name for f in p.start_fs)


def _plan(seed, names=("all",), limit=300.0, interval=10.0):
    return P.plan(P.build_packages(list(names)), limit, interval, random.Random(seed))


def test_same_seed_same_plan_different_seed_differs():
    assert _plan(7) == _plan(7)
    assert _plan(7) != _plan(8)
    assert len(_plan(7)) > 10


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32), st.floats(1, 600), st.floats(0.5, 60),
       st.lists(st.sampled_from(MIX), min_size=1, max_size=5))
def test_every_start_is_stopped_before_the_end(seed, limit, interval, names):
    timeline = _plan(seed, [",".join(names)], limit, interval)
    times = [t for t, _ in timeline]
    assert times == sorted(times)
    active: dict[str, str] = {}
    for t, op in timeline:
        assert 0 < t < limit
        assert set(op) == {"f", "value"}
        fault = op["value"]["fault"]
        if op["f"] in STARTS:
            assert STARTS[op["f"]] == fault
            assert fault not in active, "one fault per package at a time"
            active[fault] = op["f"]
        else:
            assert STOPS[op["f"]] == fault
            assert active.pop(fault, None) is not None, "a stop without a start"
    assert not active, f"faults left on at the end: {active}"


def test_plan_targets_are_abstract_and_complete():
    from nemesis.netem import shape_of, links_of
    from nemesis.partition import TOPOLOGIES
    seen = set()
    for _, op in _plan(3, [",".join(MIX)], limit=6000):
        v = op["value"]
        if op["f"] == "start-partition":
            assert v["topology"] in TOPOLOGIES
            seen.add(v["topology"])
            need = {"isolate-node": "node_index", "one-way": "node_index", "isolate-leader": "partition_index",
                    "halves": "seed", "majorities-ring": "seed", "bridge": "seed", "client-cut-node": "node_index",
                    "client-cut-leader": "partition_index", "client-only-leader": "partition_index"
                    }.get(v["topology"])
            assert need is None or need in v
        elif op["f"] == "start-netem":
            shape_of(v)  # every drawn shape is valid
            assert links_of(v) in ("all", "peers", "client")
            assert v["target"] in ("node", "leader", "controller", "minority", "all")
        elif op["f"] in ("kill", "pause", "bump-clock", "strobe-clock"):
            assert v["target"] in ("node", "leader", "controller", "minority", "all")
        if op["f"] == "strobe-clock":
            assert len(v["offsets_s"]) == 2 and v["period_s"] >= 2 and v["duration_s"] > 0
    assert {"client-cut-node", "client-cut-leader", "client-only-leader"} <= seen


def test_plan_edge_cases():
    assert P.plan([], 100, 5, random.Random(1)) == []
    assert P.plan(P.build_packages(["kill"]), 0, 5, random.Random(1)) == []
    with pytest.raises(UsageError):
        P.plan(P.build_packages(["kill"]), 100, 0, random.Random(1))


def test_final_ops_in_heal_order():
    ops = P.final_ops(P.build_packages(["kill,clock,partition,netem,pause"]))
    assert [op["f"] for op in ops] == ["stop-partition", "stop-netem", "resume", "reset-clock", "start"]
    assert all("fault" in op["value"] for op in ops)
    assert ops[-1]["value"]["target"] == "all"


class Fake:
    def __init__(self, fs):
        self.fs = frozenset(fs)
        self.calls = []

    def setup(self, ctx):
        self.calls.append("setup")

    def invoke(self, op):
        self.calls.append(op["f"])
        return completed(op, {"nodes": [], "fault": "fake"}, action=None)

    def teardown(self):
        self.calls.append("teardown")


def test_compose_dispatches_by_f():
    a, b = Fake({"x", "stop-x"}), Fake({"y"})
    nem = compose([a, b])
    assert nem.fs == {"x", "stop-x", "y"}
    nem.setup(NemesisContext(None, "t", random.Random(0)))
    done = nem.invoke({"f": "y", "value": {}, "process": "nemesis", "type": "invoke"})
    assert done["type"] == "info" and done["f"] == "y" and done["process"] == "nemesis"
    nem.invoke({"f": "stop-x", "value": {}})
    nem.teardown()
    assert a.calls == ["setup", "stop-x", "teardown"] and b.calls == ["setup", "y", "teardown"]
    with pytest.raises(UnknownNemesisOp):
        nem.invoke({"f": "z"})
    with pytest.raises(ValueError):
        ComposedNemesis([Fake({"x"}), Fake({"x"})])


def test_completed_reports_partial_errors():
    op = completed({"f": "kill", "value": {"target": "all"}, "index": 3}, {"nodes": ["n1"]}, {"n2": "gone"},
                   action="start")
    assert op["type"] == "info" and "index" not in op and op["value"]["action"] == "start"
    assert op["value"]["errors"] == {"n2": "gone"} and "n2" in op["error"]


def test_build_nemesis_handles_every_package_op():
    pkgs = [p for p in P.build_packages(["all"]) if p.name in MIX]
    nem = compose([p.make_nemesis() for p in pkgs])
    for _, op in P.plan(pkgs, 600, 5, random.Random(2)):
        assert op["f"] in nem.fs
    for op in P.final_ops(pkgs):
        assert op["f"] in nem.fs


@pytest.mark.parametrize("argv", [
    ["nemesis", "partition", "--topology", "nonsense"],
    ["nemesis", "partition", "--topology", "isolate-leader"],
    ["nemesis", "partition", "--topology", "halves", "--node", "n1"],
    ["nemesis", "partition", "--topology", "isolate-node", "--ports", "x"],
    ["nemesis", "kill", "--target", "somewhere"],
    ["nemesis", "pause", "--target", "leader"],
    ["nemesis", "clock"],
    ["nemesis", "clock", "--bump", "10", "--reset"],
    ["nemesis", "clock", "--strobe", "1"],
    ["nemesis", "clock", "--strobe", "0,60", "--period", "0.5"],
    ["nemesis", "partition", "--topology", "client-cut-leader"],
    ["nemesis", "partition", "--topology", "client-only-leader", "--node", "n1", "--topic", "t"],
    ["nemesis", "netem", "--delay", "-5"],
    ["nemesis", "netem", "--loss", "101"],
    ["nemesis", "netem", "--delay", "10", "--jitter", "20"],
    ["nemesis", "netem", "--reorder", "10", "--loss", "1"],
    ["nemesis", "netem", "--delay", "nan"],
    ["nemesis", "netem"],
    ["nemesis", "netem", "--delay", "10", "--target", "nowhere"],
    ["nemesis", "netem", "--delay", "10", "--links", "n2,elsewhere"],
])
def test_cli_bad_input_exits_64(argv, capsys):
    from harness.cli import main
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--name", "no-such-cluster-for-tests"])
    assert exc.value.code == 64
    err = capsys.readouterr().err.strip()
    assert err.startswith("kchaos:") and len(err.splitlines()) == 1, err
    assert "no kchaos cluster" not in err, "input must be checked before the cluster is looked up"


def test_a_scenario_mixed_with_the_packages_it_reuses_shares_their_nemeses():
    """unclean-election reuses the partition and kill nemeses: mixed with those
    packages, each kind is built once and every op of the mix has its handler."""
    from nemesis.packages import build_packages, nemeses_of
    from nemesis.protocol import compose
    packages = build_packages(["unclean-election,partition,kill,pause"])
    nems = nemeses_of(packages)
    kinds = [type(n).__name__ for n in nems]
    assert sorted(kinds) == sorted(set(kinds)) and "PartitionNemesis" in kinds and "KillNemesis" in kinds
    handled = compose(nems).fs
    assert {"start-partition", "stop-partition", "kill", "start", "pause", "resume",
            "await-isr-shrink", "await-new-leader"} <= handled
