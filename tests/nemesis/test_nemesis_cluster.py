"""Each fault on a real 3-node KRaft cluster: it takes effect, and it heals.

Faults are checked from where they bite: TCP probes from inside the nodes
(nc), the harness host's own connections, partition leaders and ISRs from the
admin API, the KRaft quorum state, process states, and LogAppendTime
timestamps stamped by a skewed leader.
"""
from __future__ import annotations

import time

import pytest

from broker.config import broker_id
from nemesis.clock import ClockNemesis, read_offset, strobe_running
from nemesis.partition import CHAIN, PartitionNemesis, chain_rules
from nemesis.process import KillNemesis, PauseNemesis, stop_start
from nemesis_helpers import Traffic, host_connects, probe, wait_for

pytestmark = pytest.mark.cluster


def _node(kafka, name):
    return kafka.node(name)


def _full_isr(kafka, topic, n=3):
    states = kafka.partition_states(topic)
    return states if states and all(s.leader is not None and len(s.isr) == n for s in states) else None


def _moved_off(kafka, topic, bid):
    """Every partition led by someone other than broker ``bid``, which is out of every ISR."""
    def check():
        states = kafka.partition_states(topic)
        return bool(states) and all(p.leader not in (None, bid) and bid not in p.isr for p in states)
    return check


def _state(kafka, topic):
    return lambda: {"partitions": kafka.partition_states(topic), "controller": kafka.active_controller(),
                    "live": kafka.live_broker_ids(),
                    "processes": {n: b.process_state() for n, b in kafka.brokers.items()}}


def _non_controller(kafka) -> str:
    controller = kafka.active_controller()
    return next(n.name for n in kafka.nodes if broker_id(n.name) != controller)


def test_isolate_node_cuts_peers_but_not_the_host_and_heals(ctx):
    kafka, topic = ctx.cluster, ctx.topic
    kafka.create_topic(topic, 3, 3)
    wait_for(lambda: _full_isr(kafka, topic), 60, "a full ISR before the fault")
    a = _non_controller(kafka)
    aid = broker_id(a)
    others = [n for n in kafka.nodes if n.name != a]
    nem = PartitionNemesis()
    nem.setup(ctx)
    with Traffic(kafka.bootstrap(), topic) as traffic:
        done = nem.invoke({"f": "start-partition", "value": {"topology": "isolate-node", "node": a}})
        v = done["value"]
        assert done["type"] == "info" and "error" not in done
        assert v["fault"] == "partition" and v["isolated"] == [a]
        assert v["grudge"][a] == sorted(n.name for n in others)
        assert all(v["grudge"][n.name] == [a] for n in others)

        node_a = _node(kafka, a)
        for b in others:
            assert not probe(node_a, b.address), f"{a} still reaches {b.name}"
            assert not probe(b, node_a.address), f"{b.name} still reaches {a}"
        assert probe(others[0], others[1].address) and probe(others[1], others[0].address)
        for n in kafka.nodes:
            assert host_connects(n.address), f"the harness host lost {n.name}"

        # The controller fences the isolated broker; every partition ends up led
        # elsewhere, with the isolated broker out of its ISR.
        wait_for(_moved_off(kafka, topic, aid), 90, f"leaders away from {a} and {a} out of every ISR",
                 show=_state(kafka, topic))

        stop = nem.invoke({"f": "stop-partition", "value": {"fault": "partition"}})
        assert stop["value"]["nodes"] == ["n1", "n2", "n3"] and "error" not in stop
        for b in others:
            assert probe(node_a, b.address) and probe(b, node_a.address)
        wait_for(lambda: _full_isr(kafka, topic), 120, f"{a} back in every ISR", stable=3,
                 show=_state(kafka, topic))
        assert traffic.acked > 0
    for n in kafka.nodes:
        assert chain_rules(n) is None, f"{CHAIN} chain left on {n.name}"


def test_one_way_cut_blocks_exactly_one_direction(ctx):
    kafka = ctx.cluster
    a, b, c = (kafka.node(n) for n in ("n1", "n2", "n3"))
    nem = PartitionNemesis(ctx)
    done = nem.invoke({"f": "start-partition", "value": {"topology": "one-way", "node": "n1", "from": ["n2"]}})
    v = done["value"]
    assert v["receiver"] == "n1" and v["senders"] == ["n2"] and v["nodes"] == ["n1"]
    assert v["grudge"] == {"n1": ["n2"]}
    assert not probe(b, a.address), "n2 still reaches n1"
    assert probe(a, b.address), "n1 lost n2, but only n2 -> n1 was cut"
    assert probe(c, a.address) and probe(a, c.address)
    assert host_connects(a.address)
    # Restricted to the broker port: replication and clients are cut, the KRaft
    # controller port (9093) still answers.
    done = nem.invoke({"f": "start-partition", "value": {"topology": "one-way", "node": "n1", "ports": [9092]}})
    assert done["value"]["senders"] == ["n2", "n3"] and done["value"]["ports"] == [9092]
    assert not probe(b, a.address, 9092) and not probe(c, a.address, 9092)
    assert probe(b, a.address, 9093) and probe(a, b.address, 9092)
    nem.invoke({"f": "stop-partition", "value": {}})
    assert probe(b, a.address) and probe(c, a.address)


def test_kill_leader_moves_leadership_and_restart_rejoins(ctx):
    kafka, topic = ctx.cluster, ctx.topic
    kafka.create_topic(topic, 1, 3)
    wait_for(lambda: _full_isr(kafka, topic), 60, "a full ISR before the fault")
    nem = KillNemesis()
    nem.setup(ctx)
    done = nem.invoke({"f": "kill", "value": {"fault": "kill", "target": "leader", "partition": 0}})
    v = done["value"]
    leader = v["leader"]
    assert v["nodes"] == [leader] and v["partition"] == 0 and "error" not in done
    assert kafka.brokers[leader].pid() is None, "the broker JVM survived SIGKILL"
    lid = broker_id(leader)
    wait_for(_moved_off(kafka, topic, lid), 60, f"leadership to move off {leader}", show=_state(kafka, topic))
    start = nem.invoke({"f": "start", "value": {"fault": "kill"}})
    assert start["value"]["restarted"] == [leader] and start["value"]["nodes"] == [leader]
    assert kafka.brokers[leader].is_running()
    wait_for(lambda: lid in kafka.isr(topic)[0], 120, f"{leader} back in the ISR", stable=2,
             show=_state(kafka, topic))


def test_kill_controller_moves_quorum_leadership(ctx):
    kafka = ctx.cluster
    before = wait_for(kafka.active_controller, 30, "an active controller")
    nem = KillNemesis(ctx)
    done = nem.invoke({"f": "kill", "value": {"target": "controller"}})
    assert done["value"]["controller"] == f"n{before}" and done["value"]["nodes"] == [f"n{before}"]
    after = wait_for(lambda: (lambda c: c if c not in (None, before) else None)(kafka.active_controller()),
                     60, "a new active controller")
    assert after != before
    start = nem.invoke({"f": "start", "value": {}})
    assert start["value"]["restarted"] == [f"n{before}"]
    kafka.wait_ready(120)


def test_pause_leader_then_resume(ctx):
    kafka, topic = ctx.cluster, ctx.topic
    kafka.create_topic(topic, 1, 3)
    wait_for(lambda: _full_isr(kafka, topic), 60, "a full ISR before the fault")
    nem = PauseNemesis(ctx)
    done = nem.invoke({"f": "pause", "value": {"target": "leader", "partition": 0}})
    leader = done["value"]["leader"]
    lid = broker_id(leader)
    assert done["value"]["nodes"] == [leader]
    assert kafka.brokers[leader].process_state() == "T"
    # The controller stops hearing its heartbeats, fences it and moves leadership.
    wait_for(_moved_off(kafka, topic, lid), 60, f"the cluster to notice {leader} is paused",
             show=_state(kafka, topic))
    resumed = nem.invoke({"f": "resume", "value": {}})
    assert resumed["value"]["resumed"] == [leader]
    assert kafka.brokers[leader].process_state() not in ("T", None)
    wait_for(lambda: lid in kafka.isr(topic)[0], 120, f"{leader} back in the ISR", stable=2,
             show=_state(kafka, topic))


def test_composed_nemesis_runs_final_heal_ops(ctx):
    from nemesis.packages import build_nemesis, build_packages, final_ops
    nem = build_nemesis(build_packages(["all"]), ctx)
    done = nem.invoke({"f": "bump-clock", "value": {"fault": "clock", "target": "node", "node_index": 4,
                                                    "offset_s": 2}})
    assert done["value"]["nodes"] == ["n2"] and read_offset(ctx.cluster.node("n2")) == "+2s"
    for op in final_ops(build_packages(["all"])):
        out = nem.invoke(op)
        assert out["type"] == "info" and "error" not in out, out
        assert out["value"]["fault"] == op["value"]["fault"]
    assert read_offset(ctx.cluster.node("n2")) == "+0s"
    nem.teardown()


def test_cli_faults_then_heal_leaves_nothing_behind(healed, capsys):
    from harness.cli import main

    def kchaos(*argv):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--name", healed.name])
        out = capsys.readouterr()
        assert exc.value.code == 0, out.err
        return out.out

    kafka = healed.kafka
    out = kchaos("nemesis", "partition", "--topology", "isolate-node", "--node", "n1")
    assert "isolated=n1" in out and "n2: drop from n1" in out
    assert chain_rules(kafka.node("n2")) == [f"-A {CHAIN} -s {kafka.node('n1').address}/32 -j DROP"]
    # Small offsets: a clock set back stalls the broker's timers for as long.
    out = kchaos("nemesis", "clock", "--bump", "2", "--node", "n2")
    assert "nodes n2" in out and read_offset(kafka.node("n2")) == "+2s"
    kchaos("nemesis", "clock", "--strobe", "0,2", "--node", "n2", "--duration", "120")
    assert strobe_running(kafka.node("n2"))
    out = kchaos("nemesis", "pause", "--target", "n3")
    assert "pause (pause): nodes n3" in out and kafka.brokers["n3"].process_state() == "T"

    out = kchaos("nemesis", "heal", "--restart-skewed")
    assert out.splitlines() == ["n1: ok", "n2: restarted (clock was skewed)", "n3: ok"]
    for n in kafka.nodes:
        rules = n.run(["iptables", "-w", "-S"], timeout=30).out
        assert CHAIN not in rules, f"{n.name}: {rules}"
        assert read_offset(n) == "+0s"
        assert not strobe_running(n)
        assert kafka.brokers[n.name].process_state() not in ("T", None)


def _append_skew(producer, topic) -> float:
    """Produce one message; its LogAppendTime minus the host's time, in seconds."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    out = []
    before = time.time()
    producer.produce(topic, b"tick", partition=0, on_delivery=lambda err, msg: out.append((err, msg)))
    producer.flush(15)
    after = time.time()
    assert out and out[0][0] is None, f"produce failed: {out}"
    kind, ts = out[0][1].timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    return ts / 1000 - (before + after) / 2


# Last in this file on purpose: a clock set back stalls the broker's wall-clock
# timers (see nemesis.packages.heal_all), so the test restarts the skewed broker.
def test_clock_bump_strobe_and_reset_shift_log_append_time(ctx):
    kafka, topic = ctx.cluster, ctx.topic
    kafka.create_topic(topic, 1, 3, {"message.timestamp.type": "LogAppendTime"})
    leader = f"n{kafka.leaders(topic)[0]}"
    try:
        _clock_faults(ctx, leader)
    finally:
        stop_start(kafka, leader)


def _clock_faults(ctx, expected_leader):
    from confluent_kafka import Producer
    kafka, topic = ctx.cluster, ctx.topic
    producer = Producer({"bootstrap.servers": kafka.bootstrap(), "acks": "all", "log_level": 0})
    assert abs(_append_skew(producer, topic)) < 5
    nem = ClockNemesis()
    nem.setup(ctx)
    tolerance = 10
    done = nem.invoke({"f": "bump-clock", "value": {"target": "leader", "partition": 0, "offset_s": 3600}})
    leader = done["value"]["leader"]
    assert leader == expected_leader, "leadership moved before the test could skew the leader"
    assert done["value"]["nodes"] == [leader] and done["value"]["offset_s"] == 3600
    assert read_offset(kafka.node(leader)) == "+3600s"
    # The JVM keeps serving while skewed, and stamps the skewed time.
    wait_for(lambda: abs(_append_skew(producer, topic) - 3600) < tolerance, 20, "a +3600s LogAppendTime",
             interval=0.5, stable=3)

    nem.invoke({"f": "strobe-clock", "value": {"target": "node", "node": leader, "offsets_s": [0, 600],
                                               "period_s": 2.5, "duration_s": 60}})
    assert strobe_running(kafka.node(leader))
    seen = set()

    def both_offsets():
        skew = _append_skew(producer, topic)
        seen.update(o for o in (0, 600) if abs(skew - o) < tolerance)
        return seen == {0, 600}
    wait_for(both_offsets, 30, "LogAppendTime flipping between +0s and +600s", interval=0.3)

    reset = nem.invoke({"f": "reset-clock", "value": {}})
    assert reset["value"]["nodes"] == ["n1", "n2", "n3"] and reset["value"]["offset_s"] == 0
    assert not strobe_running(kafka.node(leader))
    assert all(read_offset(n) == "+0s" for n in kafka.nodes)
    wait_for(lambda: abs(_append_skew(producer, topic)) < 5, 20, "LogAppendTime back to true time",
             interval=0.5, stable=4)
