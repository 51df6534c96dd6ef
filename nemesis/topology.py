"""Network topologies as reachability graphs, and the firewall rules they imply.

Pure functions, no I/O. A topology is a ``networkx.DiGraph`` over node names
where an edge ``u -> v`` means *u can reach v* (v accepts traffic from u). The
complete digraph is a healthy network; a partition removes edges.

A graph becomes a **grudge**: for each node ``v``, the peers whose traffic it
drops (every ``u`` without an edge ``u -> v``). The grudge becomes **rules**:
per node, one DROP rule per peer, matched on the peer's source address:

* both directions cut (no ``u -> v`` and no ``v -> u``): drop everything
  from ``u``;
* only ``u -> v`` cut (a one-way cut: v still reaches u): drop what ``u``
  sends to ``v``'s listener ports (Kafka's 9092 and 9093). TCP needs both
  directions for any connection, so "u cannot reach v" means: u cannot open
  connections to v's services (and its packets on open ones are lost), while
  v's own connections to u keep working because u's replies come *from* u's
  listener ports;
* with explicit ``ports`` every rule is restricted to those destination ports
  (e.g. only 9092: cut replication and client traffic but keep the KRaft
  controller traffic on 9093).

The harness host, where the clients run, is the node ``CLIENT`` ("client").
A graph without it leaves the clients reaching every node, whatever the
brokers' topology; a graph with it says which brokers the clients reach.
The client holds no rules (the harness host is not ours to firewall): a
missing edge between the client and broker v, in either direction, becomes
a DROP rule on v for the host's address, on Kafka's client port (9092) only,
so the harness's own control connections (SSH) survive. Brokers never open
connections to clients, so dropping what the client sends cuts both ways.
Client edges are symmetric by construction (``with_client``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import networkx as nx

from broker.config import BROKER_PORT, CONTROLLER_PORT

SERVICE_PORTS: tuple[int, ...] = (BROKER_PORT, CONTROLLER_PORT)
CLIENT = "client"
CLIENT_PORTS: tuple[int, ...] = (BROKER_PORT,)

Grudge = dict[str, frozenset[str]]


# -- graphs ------------------------------------------------------------------
def _names(nodes: Iterable[str]) -> list[str]:
    out = list(dict.fromkeys(nodes))
    if not out:
        raise ValueError("a topology needs at least one node")
    return out


def complete(nodes: Iterable[str]) -> nx.DiGraph:
    """Everyone reaches everyone: the healthy network."""
    names = _names(nodes)
    g = nx.complete_graph(names, create_using=nx.DiGraph)
    g.add_nodes_from(names)
    return g


def split(nodes: Iterable[str], groups: Sequence[Iterable[str]]) -> nx.DiGraph:
    """Nodes reach each other only inside a group. Nodes in no group are alone."""
    names = _names(nodes)
    g = nx.DiGraph()
    g.add_nodes_from(names)
    for group in groups:
        members = [n for n in group if n in g]
        g.add_edges_from((u, v) for u in members for v in members if u != v)
    return g


def isolate(nodes: Iterable[str], targets: Iterable[str] | str) -> nx.DiGraph:
    """Cut ``targets`` off from every other node (targets still reach each other)."""
    names = _names(nodes)
    targets = [targets] if isinstance(targets, str) else list(targets)
    unknown = set(targets) - set(names)
    if unknown:
        raise ValueError(f"cannot isolate unknown nodes {sorted(unknown)}")
    return split(names, [targets, [n for n in names if n not in targets]])


def halves(nodes: Iterable[str], rng: random.Random) -> nx.DiGraph:
    """Two random halves that cannot reach each other (the smaller one first)."""
    names = _names(nodes)
    shuffled = names[:]
    rng.shuffle(shuffled)
    m = len(shuffled) // 2
    return split(names, [shuffled[:m], shuffled[m:]])


def halves_groups(graph: nx.DiGraph) -> list[list[str]]:
    """The groups of mutually reachable nodes (components of the symmetric part)."""
    sym = nx.Graph()
    sym.add_nodes_from(graph.nodes)
    sym.add_edges_from((u, v) for u, v in graph.edges if graph.has_edge(v, u))
    return sorted((sorted(c) for c in nx.connected_components(sym)), key=lambda c: (len(c), c))


def majorities_ring(nodes: Iterable[str], rng: random.Random) -> nx.DiGraph:
    """Overlapping majorities: every node reaches a majority (itself included),
    and no two nodes see the same set of nodes.

    The nodes are put in a random ring; each one reaches its neighbours within
    distance d, the smallest d whose window (2d + 1 nodes) is a majority. When
    that window is the whole ring (three nodes) the ring loses one edge and
    becomes a line, whose middle node sees both ends that cannot see each
    other. Needs at least three nodes.
    """
    names = _names(nodes)
    n = len(names)
    if n < 3:
        raise ValueError(f"a majorities ring needs at least 3 nodes, got {n}")
    ring = names[:]
    rng.shuffle(ring)
    majority = n // 2 + 1
    d = majority // 2  # smallest d with 2d + 1 >= majority
    g = nx.DiGraph()
    g.add_nodes_from(names)
    if 2 * d + 1 >= n:
        edges = [(ring[i], ring[i + 1]) for i in range(n - 1)]
    else:
        edges = [(ring[i], ring[(i + k) % n]) for i in range(n) for k in range(1, d + 1)]
    for u, v in edges:
        g.add_edge(u, v)
        g.add_edge(v, u)
    return g


def bridge(nodes: Iterable[str], rng: random.Random) -> nx.DiGraph:
    """Two halves that cannot reach each other, and one node in the middle that
    reaches (and is reached by) both. Needs at least three nodes."""
    names = _names(nodes)
    if len(names) < 3:
        raise ValueError(f"a bridge needs at least 3 nodes, got {len(names)}")
    shuffled = names[:]
    rng.shuffle(shuffled)
    m = len(shuffled) // 2
    left, middle, right = shuffled[:m], shuffled[m], shuffled[m + 1:]
    return split(names, [left + [middle], [middle] + right])


def bridge_node(graph: nx.DiGraph) -> str | None:
    """The node every other node can reach, when the graph is not complete."""
    n = graph.number_of_nodes()
    for v in graph.nodes:
        if graph.in_degree(v) == n - 1 and graph.out_degree(v) == n - 1:
            if graph.number_of_edges() < n * (n - 1):
                return v
    return None


def one_way(nodes: Iterable[str], receiver: str, senders: Iterable[str] | None = None) -> nx.DiGraph:
    """``receiver`` cannot receive from ``senders`` (default: every other node),
    while it still reaches them."""
    names = _names(nodes)
    if receiver not in names:
        raise ValueError(f"unknown receiver {receiver!r}")
    senders = [s for s in (names if senders is None else senders) if s != receiver]
    unknown = set(senders) - set(names)
    if unknown:
        raise ValueError(f"unknown senders {sorted(unknown)}")
    g = complete(names)
    g.remove_edges_from((s, receiver) for s in senders)
    return g


def with_client(graph: nx.DiGraph, reachable: Iterable[str]) -> nx.DiGraph:
    """``graph`` plus the client, which reaches (and is reached by) exactly the
    brokers in ``reachable``."""
    reachable = list(reachable)
    unknown = set(reachable) - set(graph.nodes)
    if unknown:
        raise ValueError(f"unknown nodes {sorted(unknown)}")
    g = graph.copy()
    if CLIENT in g:
        g.remove_node(CLIENT)
    g.add_node(CLIENT)
    for v in reachable:
        if v != CLIENT:
            g.add_edge(CLIENT, v)
            g.add_edge(v, CLIENT)
    return g


def _brokers_and(nodes: Iterable[str], chosen: Iterable[str] | str, what: str) -> tuple[list[str], set[str]]:
    """The broker names (the client left out) and ``chosen``, which must be among them."""
    names = [n for n in _names(nodes) if n != CLIENT]
    chosen = {chosen} if isinstance(chosen, str) else set(chosen)
    unknown = chosen - set(names)
    if unknown:
        raise ValueError(f"{what} unknown nodes {sorted(unknown)}")
    return names, chosen


def client_cut(nodes: Iterable[str], cut: Iterable[str] | str) -> nx.DiGraph:
    """Brokers see each other; the client loses ``cut`` and reaches the rest."""
    names, cut = _brokers_and(nodes, cut, "cannot cut the client from")
    return with_client(complete(names), [n for n in names if n not in cut])


def client_only(nodes: Iterable[str], keep: Iterable[str] | str) -> nx.DiGraph:
    """Brokers see each other; the client reaches ``keep`` only."""
    names, keep = _brokers_and(nodes, keep, "the client cannot keep")
    return client_cut(names, [n for n in names if n not in keep])


def client_reaches(graph: nx.DiGraph) -> list[str]:
    """The brokers the client reaches (every broker when the graph has no client)."""
    if CLIENT not in graph:
        return sort_nodes(graph.nodes)
    return sort_nodes(v for v in graph.successors(CLIENT) if graph.has_edge(v, CLIENT))


def reaches(graph: nx.DiGraph, u: str, v: str) -> bool:
    """Whether u reaches v directly (u == v always does)."""
    return u == v or graph.has_edge(u, v)


def sees(graph: nx.DiGraph, v: str) -> frozenset[str]:
    """The nodes v can exchange traffic with both ways, itself included."""
    return frozenset({v} | {u for u in graph.successors(v) if graph.has_edge(u, v)})


# -- grudges and rules ---------------------------------------------------------
def grudge(graph: nx.DiGraph) -> Grudge:
    """For each broker, the peers whose traffic it drops (the client holds none;
    a broker drops the client when either direction between them is cut)."""
    def drops(v: str, u: str) -> bool:
        if u == CLIENT:
            return not (graph.has_edge(u, v) and graph.has_edge(v, u))
        return not graph.has_edge(u, v)

    return {v: frozenset(u for u in graph.nodes if u != v and drops(v, u))
            for v in sorted(graph.nodes, key=_node_key) if v != CLIENT}


def graph_from_grudge(nodes: Iterable[str], g: Mapping[str, Iterable[str]]) -> nx.DiGraph:
    """The inverse of ``grudge``."""
    out = complete(nodes)
    out.remove_edges_from((u, v) for v, peers in g.items() for u in peers if out.has_edge(u, v))
    return out


@dataclass(frozen=True)
class DropRule:
    """On the node holding it: drop packets from ``source`` (a node name),
    only those to ``ports`` when given."""

    source: str
    ports: tuple[int, ...] | None = None

    def iptables_args(self, address: str) -> list[str]:
        """The match and target, after ``iptables -A <chain>``."""
        args = ["-s", address]
        if self.ports:
            args += ["-p", "tcp", "-m", "multiport", "--dports", ",".join(map(str, self.ports))]
        return args + ["-j", "DROP"]

    def describe(self, address: str | None = None) -> str:
        src = f"{self.source} ({address})" if address else self.source
        return f"drop from {src}" + (f" to tcp/{','.join(map(str, self.ports))}" if self.ports else "")


def rules(graph: nx.DiGraph, ports: Sequence[int] | None = None) -> dict[str, list[DropRule]]:
    """Per node, the DROP rules that realise ``graph`` (see the module docstring)."""
    explicit = tuple(sorted(set(int(p) for p in ports))) if ports else None
    out: dict[str, list[DropRule]] = {}
    for v, peers in grudge(graph).items():
        lst = []
        for u in sorted(peers, key=_node_key):
            if u == CLIENT:
                lst.append(DropRule(u, explicit or CLIENT_PORTS))
            elif explicit:
                lst.append(DropRule(u, explicit))
            elif graph.has_edge(v, u):
                lst.append(DropRule(u, SERVICE_PORTS))  # one-way: v still reaches u
            else:
                lst.append(DropRule(u))
        out[v] = lst
    return out


def _node_key(name: str) -> tuple[int, str]:
    digits = name.lstrip("n")
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def sort_nodes(names: Iterable[str]) -> list[str]:
    """n1, n2, ..., n10 in numeric order."""
    return sorted(names, key=_node_key)
