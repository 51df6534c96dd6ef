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


# -- the client (the harness host) as a node ------------------------------------------
def test_graphs_without_the_client_leave_it_everyone():
    g = T.isolate(N3, "n1")
    assert T.client_reaches(g) == N3
    assert all(r.source != T.CLIENT for rules in T.rules(g).values() for r in rules)


def test_client_cut_drops_the_host_on_the_client_port_of_the_cut_node_only():
    g = T.client_cut(N3, "n2")
    assert T.client_reaches(g) == ["n1", "n3"]
    assert all(T.reaches(g, u, v) for u in N3 for v in N3), "brokers still see each other"
    assert T.grudge(g) == {"n1": set(), "n2": {T.CLIENT}, "n3": set()}
    assert T.rules(g) == {"n1": [], "n2": [T.DropRule(T.CLIENT, (9092,))], "n3": []}
    assert T.rules(g, ports=[9093])["n2"] == [T.DropRule(T.CLIENT, (9093,))]
    assert T.CLIENT not in T.grudge(g), "the client holds no rules"


def test_client_only_keeps_one_node():
    g = T.client_only(N3, "n3")
    assert T.client_reaches(g) == ["n3"]
    assert {v for v, peers in T.grudge(g).items() if T.CLIENT in peers} == {"n1", "n2"}
    with pytest.raises(ValueError):
        T.client_only(N3, "n9")
    with pytest.raises(ValueError):
        T.client_cut(N3, ["n9"])


def test_a_one_sided_client_edge_still_cuts_the_client():
    g = T.with_client(T.complete(N3), N3)
    g.remove_edge("n1", T.CLIENT)  # n1 cannot answer the client: the connection cannot work
    assert T.grudge(g)["n1"] == {T.CLIENT}


@settings(max_examples=40, deadline=None)
@given(sizes, seeds)
def test_client_can_join_any_topology(n, seed):
    rng = random.Random(seed)
    base = T.halves(names(n), rng)
    reach = sorted(rng.sample(names(n), rng.randint(0, n)))
    g = T.with_client(base, reach)
    assert T.client_reaches(g) == T.sort_nodes(reach)
    cut = {v for v, peers in T.grudge(g).items() if T.CLIENT in peers}
    assert cut == set(names(n)) - set(reach)
    # the brokers' own rules are those of the topology without the client
    no_client = {v: [r for r in lst if r.source != T.CLIENT] for v, lst in T.rules(g).items()}
    assert no_client == T.rules(base)
