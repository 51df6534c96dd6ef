"""Topologies, grudges and DROP rules: pure functions, no Kafka."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis import topology as T

N3 = ["n1", "n2", "n3"]
sizes = st.integers(min_value=3, max_value=7)
seeds = st.integers(min_value=0, max_value=2**32)


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def symmetric(g) -> bool:
    return all(g.has_edge(v, u) for u, v in g.edges)


def test_complete_has_no_grudge():
    g = T.complete(N3)
    assert all(not peers for peers in T.grudge(g).values())
    assert all(not r for r in T.rules(g).values())


def test_isolate_one_node():
    g = T.isolate(N3, "n2")
    assert T.grudge(g) == {"n1": {"n2"}, "n2": {"n1", "n3"}, "n3": {"n2"}}
    assert T.reaches(g, "n1", "n3") and T.reaches(g, "n3", "n1")
    assert not T.reaches(g, "n1", "n2") and not T.reaches(g, "n2", "n3")
    r = T.rules(g)
    assert r["n2"] == [T.DropRule("n1"), T.DropRule("n3")]
    assert r["n1"] == [T.DropRule("n2")]
    with pytest.raises(ValueError):
        T.isolate(N3, "n9")


def test_rules_render_iptables_args():
    assert T.DropRule("n2").iptables_args("10.0.0.12") == ["-s", "10.0.0.12", "-j", "DROP"]
    assert T.DropRule("n2", (9092,)).iptables_args("10.0.0.12") == [
        "-s", "10.0.0.12", "-p", "tcp", "-m", "multiport", "--dports", "9092", "-j", "DROP"]


def test_explicit_ports_restrict_every_rule():
    r = T.rules(T.isolate(N3, "n1"), ports=[9092])
    assert r["n1"] == [T.DropRule("n2", (9092,)), T.DropRule("n3", (9092,))]
    assert r["n2"] == [T.DropRule("n1", (9092,))]


def test_one_way_cut_is_one_direction():
    g = T.one_way(N3, "n1", ["n2"])
    assert not T.reaches(g, "n2", "n1") and T.reaches(g, "n1", "n2")
    assert T.reaches(g, "n3", "n1") and T.reaches(g, "n1", "n3")
    assert T.grudge(g) == {"n1": {"n2"}, "n2": set(), "n3": set()}
    # n1 keeps reaching n2: only what n2 sends to n1's listeners is dropped.
    assert T.rules(g)["n1"] == [T.DropRule("n2", T.SERVICE_PORTS)]
    all_senders = T.one_way(N3, "n3")
    assert T.grudge(all_senders)["n3"] == {"n1", "n2"}


@settings(max_examples=60, deadline=None)
@given(sizes, seeds)
def test_halves_are_two_disjoint_cliques(n, seed):
    g = T.halves(names(n), random.Random(seed))
    groups = T.halves_groups(g)
    assert len(groups) == 2 and sorted(sum(groups, [])) == sorted(names(n))
    assert [len(x) for x in groups] == [n // 2, n - n // 2]
    assert symmetric(g)
    for a in groups[0]:
        for b in groups[1]:
            assert not T.reaches(g, a, b) and not T.reaches(g, b, a)


@settings(max_examples=60, deadline=None)
@given(sizes, seeds)
def test_majorities_ring_overlapping_distinct_majorities(n, seed):
    g = T.majorities_ring(names(n), random.Random(seed))
    views = [T.sees(g, v) for v in names(n)]
    assert symmetric(g)
    assert all(len(v) >= n // 2 + 1 for v in views), views
    assert len(set(views)) == n, "no two nodes see the same majority"
    assert any(len(v) < n for v in views), "the ring must cut something"


def test_majorities_ring_needs_three_nodes():
    with pytest.raises(ValueError):
        T.majorities_ring(["n1", "n2"], random.Random(1))


@settings(max_examples=60, deadline=None)
@given(sizes, seeds)
def test_bridge(n, seed):
    g = T.bridge(names(n), random.Random(seed))
    b = T.bridge_node(g)
    assert b is not None
    assert T.sees(g, b) == set(names(n))
    left, right = _sides(g, b)
    for u in left:
        for v in right:
            assert not T.reaches(g, u, v) and not T.reaches(g, v, u)
    assert len(left) + len(right) == n - 1 and left and right


def _sides(g, b):
    rest = [v for v in g.nodes if v != b]
    first = rest[0]
    left = sorted(v for v in rest if v == first or T.reaches(g, first, v))
    right = sorted(v for v in rest if v not in left)
    return left, right


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=7), seeds)
def test_grudge_round_trip(n, seed):
    rng = random.Random(seed)
    g = T.complete(names(n))
    edges = list(g.edges)
    g.remove_edges_from(rng.sample(edges, rng.randint(0, len(edges))))
    back = T.graph_from_grudge(names(n), T.grudge(g))
    assert set(back.edges) == set(g.edges)


def test_sort_nodes_is_numeric():
    assert T.sort_nodes(["n10", "n2", "n1"]) == ["n1", "n2", "n10"]
