"""Client-side cuts and slow/lossy links on a real 3-node cluster: they bite, and they heal.

The client cut is checked from where it bites: this host's own TCP
connections (the harness host is the clients' host) and the brokers' probes
of each other. netem is checked by timing TCP connects (lower bounds only),
from inside a node and from this host, with whichever mechanism the kernel
allows (tc netem, or iptables and the NFQUEUE delayer), and the iptables path
on its own on any kernel.
"""
from __future__ import annotations

import time

import pytest

from nemesis import netem_iptables as ipt
from nemesis.netem import NO_NETEM, NetemNemesis, qdiscs
from nemesis.partition import CHAIN, PartitionNemesis, chain_rules, client_address
from nemesis_helpers import host_connects, probe, wait_for

pytestmark = pytest.mark.cluster


def _leader(kafka, topic):
    states = kafka.partition_states(topic)
    return f"n{states[0].leader}" if states and states[0].leader is not None and len(states[0].isr) == 3 else None


def test_client_cut_leader_and_client_only_leader(ctx):
    kafka, topic = ctx.cluster, ctx.topic
    kafka.create_topic(topic, 1, 3)
    leader = wait_for(lambda: _leader(kafka, topic), 60, "a leader with a full ISR")
    others = [n for n in kafka.nodes if n.name != leader]
    lead = kafka.node(leader)
    nem = PartitionNemesis(ctx)

    done = nem.invoke({"f": "start-partition", "value": {"topology": "client-cut-leader", "partition": 0}})
    v = done["value"]
    assert "error" not in done and v["leader"] == leader and v["nodes"] == [leader]
    assert v["client_reaches"] == sorted(n.name for n in others)
    assert v["grudge"] == {leader: ["client"]}
    assert chain_rules(lead) == [f"-A {CHAIN} -s {client_address(lead)}/32 -p tcp -m multiport --dports 9092 -j DROP"]
    assert not host_connects(lead.address), f"the host still reaches the leader {leader}"
    for n in others:
        assert host_connects(n.address), f"the host lost {n.name}, which is not the leader"
        assert probe(n, lead.address) and probe(lead, n.address), "brokers must still see each other"

    done = nem.invoke({"f": "start-partition", "value": {"topology": "client-only-leader", "partition": 0}})
    assert done["value"]["client_reaches"] == [leader] and "error" not in done
    assert host_connects(lead.address)
    for n in others:
        assert not host_connects(n.address), f"the host still reaches {n.name}"
        assert probe(n, lead.address)

    stop = nem.invoke({"f": "stop-partition", "value": {}})
    assert "error" not in stop
    for n in kafka.nodes:
        assert host_connects(n.address) and chain_rules(n) is None


def _connect_ms(node, address: str, port: int = 9092) -> float:
    """One TCP connect from inside ``node``, timed there, in ms."""
    out = node.run(["sh", "-c", f"a=$(date +%s%N); nc -z -w5 {address} {port}; r=$?; b=$(date +%s%N); "
                                f"echo $r $(( (b - a) / 1000000 ))"], timeout=30).out.split()
    assert out[0] == "0", f"{node.name} could not connect to {address}:{port}"
    return float(out[1])


def _host_connect_ms(address: str, port: int = 9092) -> float:
    start = time.monotonic()
    with __import__("socket").create_connection((address, port), timeout=10):
        return (time.monotonic() - start) * 1000


def _nothing_left(kafka) -> bool:
    return all(qdiscs(n) == [] and ipt.chains(n) == {} and ipt.delayer_pids(n) == [] for n in kafka.nodes)


def test_netem_delays_the_chosen_link(ctx):
    kafka = ctx.cluster
    n1, n2 = kafka.node("n1"), kafka.node("n2")
    nem = NetemNemesis(ctx)
    nem.setup(ctx)
    done = nem.invoke({"f": "start-netem", "value": {"target": "n1", "links": ["n2"], "delay_ms": 400}})
    try:
        assert "error" not in done, done
        v = done["value"]
        assert v["to"] == {"n1": [n2.address]} and v["mechanism"]["n1"] in ("netem", "iptables")
        if v["mechanism"]["n1"] == "netem":
            assert any("netem" in q for q in qdiscs(n1))
        else:  # no sch_netem here: the delayer holds what n1 hears from n2
            assert ipt.delayer_pids(n1) == [v["delayer_pid"]["n1"]] and qdiscs(n1) == []
            assert ipt.chains(n1)["KCHAOS-DELAY"] == [
                f"-A KCHAOS-DELAY -s {n2.address}/32 -j NFQUEUE --queue-num 19267 --queue-bypass"]
        # Every connect's SYN/SYN-ACK round trip crosses the shaped link once.
        assert min(_connect_ms(n1, n2.address) for _ in range(3)) >= 400
    finally:
        stop = nem.invoke({"f": "stop-netem", "value": {}})
    assert "error" not in stop and _nothing_left(kafka)
    if v["mechanism"]["n1"] == "iptables":  # forcing netem on this kernel: one line, nothing left
        done = nem.invoke({"f": "start-netem", "value": {"target": "n1", "delay_ms": 50, "mechanism": "netem"}})
        assert NO_NETEM in done["error"] and "\n" not in done["value"]["errors"]["n1"], done
        assert _nothing_left(kafka), "a failed netem start left something"


def test_iptables_path_delays_clients_drops_a_link_and_fails_open(ctx):
    """The iptables mechanism on its own (it works on kernels with netem too)."""
    kafka = ctx.cluster
    n1, n2, n3 = kafka.node("n1"), kafka.node("n2"), kafka.node("n3")
    nem = NetemNemesis(ctx)
    nem.setup(ctx)
    try:
        done = nem.invoke({"f": "start-netem", "value": {"target": "n1", "links": "client", "delay_ms": 300,
                                                         "jitter_ms": 50, "mechanism": "iptables"}})
        assert "error" not in done and done["value"]["mechanism"] == {"n1": "iptables"}, done
        assert done["value"]["to"] == {"n1": [client_address(n1)]}
        assert min(_host_connect_ms(n1.address) for _ in range(3)) >= 250  # delay - jitter
        assert _host_connect_ms(n2.address) >= 0  # other brokers still reachable from here
        wait_for(lambda: (ipt.delayer_stats(n1) or {}).get("delayed", 0) >= 3, 10, "the delayer's counts",
                 show=lambda: ipt.delayer_stats(n1))
        # A new start replaces the shaping: total loss on n1 -> n2, no delay, no delayer.
        done = nem.invoke({"f": "start-netem", "value": {"target": "n1", "links": "n2", "loss_pct": 100,
                                                         "mechanism": "iptables"}})
        assert "error" not in done and "delayer_pid" not in done["value"], done
        assert ipt.delayer_pids(n1) == [] and "KCHAOS-DELAY" in ipt.chains(n1)
        assert not probe(n1, n2.address), "n1 still reaches n2 through 100% loss"
        assert probe(n1, n3.address) and probe(n2, n3.address)
        # The delayer killed outright: --queue-bypass lets the link's packets through.
        done = nem.invoke({"f": "start-netem", "value": {"target": "n1", "links": "all", "delay_ms": 200,
                                                         "mechanism": "iptables"}})
        assert "error" not in done, done
        assert min(_connect_ms(n1, n3.address) for _ in range(2)) >= 200
        n1.run(["kill", "-KILL", str(done["value"]["delayer_pid"]["n1"])], timeout=30)
        wait_for(lambda: ipt.delayer_pids(n1) == [], 10, "the delayer to die")
        assert probe(n1, n3.address) and host_connects(n1.address)
    finally:
        stop = nem.invoke({"f": "stop-netem", "value": {}})
    assert "error" not in stop and _nothing_left(kafka)
    assert probe(n1, n2.address)


def test_heal_removes_leftover_qdiscs_and_client_rules_and_only_ours(healed, capsys):
    """What a SIGKILLed harness leaves on nodes that outlive it: `kchaos nemesis
    heal` (and `kchaos clean --inventory`, which runs the same node script)
    removes our qdisc (handle 4b43:, whatever its kind), the iptables path's
    chains and delayer, and the client rules, and leaves a foreign qdisc alone."""
    from harness.cli import main
    kafka = healed.kafka
    n1, n2 = kafka.node("n1"), kafka.node("n2")
    # netem itself may be missing from the kernel: any qdisc under our handle stands in for it.
    n1.run(["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "4b43:", "htb"], timeout=30)
    n1.run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", "5:", "htb"], timeout=30)
    from nemesis.protocol import NemesisContext
    import random
    done = NetemNemesis(NemesisContext(kafka, "unused", random.Random(1))).invoke(
        {"f": "start-netem", "value": {"target": "n3", "links": "peers", "delay_ms": 100, "loss_pct": 10,
                                       "mechanism": "iptables"}})
    assert "error" not in done and ipt.delayer_pids(kafka.node("n3")), done
    with pytest.raises(SystemExit) as exc:
        main(["nemesis", "partition", "--topology", "client-cut-node", "--node", "n2", "--name", healed.name])
    assert exc.value.code == 0, capsys.readouterr().err
    assert not host_connects(n2.address) and qdiscs(n1)
    try:
        with pytest.raises(SystemExit) as exc:
            main(["nemesis", "heal", "--name", healed.name])
        assert exc.value.code == 0, capsys.readouterr().err
        assert all(qdiscs(n) == [] and chain_rules(n) is None for n in kafka.nodes)
        assert _nothing_left(kafka), "the iptables path's chains or delayer survived the heal"
        assert host_connects(n2.address)
        assert "htb 5:" in n1.run(["tc", "qdisc", "show", "dev", "lo"], timeout=30).out, "a foreign qdisc went"
    finally:
        n1.run(["sh", "-c", "tc qdisc del dev lo root 2>/dev/null; true"], timeout=30)
