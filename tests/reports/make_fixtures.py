"""Generate the report fixtures under tests/reports/fixtures/ (run once; the
output is committed). Deterministic: ``python tests/reports/make_fixtures.py``.

Three run folders, each with config.json, history.jsonl, results.json and
nodes/<node>/ logs, small enough to keep in the repo:

* ``valid``: faults of every kind (partition, kill/restart, pause/resume,
  clock), clean elections only, every acknowledged write read back; two
  allowed poll-skips (consumers subscribe).
* ``invalid``: the classic acknowledged-write loss: the followers of p0's
  leader n1 are cut from it, the ISR shrinks to n1, n1 acknowledges alone,
  n1 is killed and n3 wins an unclean election; lost writes and inconsistent
  offsets follow. A failed send's error text is ``<script>alert(1)</script>``.
* ``unknown``: a short run whose checkers crashed (verdict unknown).

results.json here is written by this script from what it injected, not by
the real checkers: it only has to have the shape of checkers/result.py.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures"
S = 1_000_000_000
XSS = "<script>alert(1)</script>"
SENTINEL_XSS = '<script>window.__kchaos_xss=1</script><img src=x onerror="window.__kchaos_xss=2">'

DESCRIPTIONS = {
    "inconsistent-offset": "One offset of a partition was associated with two or more different values.",
    "duplicate": "One value was found at two or more offsets of a partition.",
    "nonlinearizable-offset": "A send acknowledged before another send to the same partition was invoked got a "
                              "higher or equal offset.",
    "nonmonotonic-send": "Within one process, successive sends to a partition got offsets that do not increase.",
    "nonmonotonic-poll": "Within one process and assignment, successive polls returned non-increasing offsets.",
    "poll-skip": "A consumer jumped over offsets that hold values known from other observations.",
    "lost-write": "An acknowledged send was never read although reads went past its offset or the drain completed.",
    "unseen": "An acknowledged send was never read and no read reached its offset (informational).",
    "phantom-write": "A send that completed as failed had its value read.",
    "unclean-election": "Leadership moved to a replica that was not in the last observed ISR.",
}
TYPES = list(DESCRIPTIONS)


class Sim:
    """A toy three-broker, three-partition cluster driven by a fault script."""

    def __init__(self, seed: int, duration: float, leader_changes, kill_windows, blind_reads=(), truncate=None,
                 xss_fail_window=None):
        self.rng = random.Random(seed)
        self.duration = duration
        self.leader_changes = sorted(leader_changes)  # (t, p, leader, isr, epoch)
        self.kill_windows = kill_windows              # [(t0, t1, partition)] sends time out
        self.blind_reads = blind_reads                # [(t0, t1, partition)] polls see nothing
        self.truncate = truncate                      # (t, partition, t_len): log cut to its length at t_len
        self.xss_fail_window = xss_fail_window
        self.events: list[tuple[int, int, dict]] = []

    def add(self, t: float, op: dict) -> None:
        self.events.append((int(t * S), len(self.events), op))

    def state_at(self, t: float) -> dict:
        st = {0: (1, [1, 2, 3], 0), 1: (2, [2, 3, 1], 0), 2: (3, [3, 1, 2], 0)}
        for (tc, p, leader, isr, epoch) in self.leader_changes:
            if tc <= t:
                st[p] = (leader, isr, epoch)
        return st

    def run(self, nemesis: list[tuple[float, str, dict]], poll_mode: str = "assign") -> list[dict]:
        rng = self.rng
        actions = []  # (time, seq, kind, data)
        # senders
        counters = {0: 0, 1: 0, 2: 0}
        for proc in (0, 1):
            t = 0.2 + proc * 0.11
            while t < self.duration:
                p = rng.randrange(3)
                counters[p] += 1
                value = counters[p]
                lat = rng.uniform(0.002, 0.03)
                timeout = any(t0 <= t < t1 and p == pp for t0, t1, pp in self.kill_windows)
                if timeout:
                    lat = 1.5
                actions.append((t, len(actions), "send-invoke", (proc, p, value)))
                actions.append((t + lat, len(actions), "send-done", (proc, p, value, timeout)))
                t += lat + rng.uniform(0.25, 0.45)
        # pollers
        for proc in (2, 3):
            t = 0.5 + proc * 0.07
            actions.append((t - 0.05, len(actions), "subscribe" if poll_mode == "subscribe" else "assign", proc))
            while t < self.duration:
                lat = rng.uniform(0.003, 0.05)
                actions.append((t, len(actions), "poll-invoke", proc))
                actions.append((t + lat, len(actions), "poll-done", proc))
                t += lat + rng.uniform(0.6, 1.0)
        # sampler
        t = 0.5
        while t < self.duration:
            actions.append((t, len(actions), "sample", None))
            t += 1.0
        for (t, f, value) in nemesis:
            actions.append((t, len(actions), "nemesis", (f, value)))
        if self.truncate:
            actions.append((self.truncate[0], len(actions), "truncate", None))
        actions.sort(key=lambda a: (a[0], a[1]))

        logs = {0: [], 1: [], 2: []}
        log_len_at = {}
        pos = {2: {0: 0, 1: 0, 2: 0}, 3: {0: 0, 1: 0, 2: 0}}
        xss_done = False
        for (t, _, kind, data) in actions:
            if self.truncate and t >= self.truncate[2] and "cut" not in log_len_at:
                log_len_at["cut"] = len(logs[self.truncate[1]])
            st = self.state_at(t)
            if kind == "send-invoke":
                proc, p, value = data
                self.add(t, {"process": proc, "type": "invoke", "f": "send", "value": [[p, value, None]],
                             "node": f"n{st[p][0] or 1}"})
            elif kind == "send-done":
                proc, p, value, timeout = data
                node = f"n{st[p][0] or 1}"
                if timeout:
                    if (self.xss_fail_window and not xss_done and p == self.xss_fail_window[2]
                            and self.xss_fail_window[0] <= t < self.xss_fail_window[1]):
                        xss_done = True
                        self.add(t, {"process": proc, "type": "fail", "f": "send", "value": [[p, value, None]],
                                     "error": XSS, "node": node})
                    else:
                        self.add(t, {"process": proc, "type": "info", "f": "send", "value": [[p, value, None]],
                                     "error": 'KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}',
                                     "node": node})
                else:
                    off = len(logs[p])
                    logs[p].append(value)
                    self.add(t, {"process": proc, "type": "ok", "f": "send", "value": [[p, value, off]], "node": node})
            elif kind in ("assign", "subscribe"):
                v = [0, 1, 2] if kind == "assign" else "kchaos"
                self.add(t, {"process": data, "type": "invoke", "f": kind, "value": v})
                self.add(t + 0.01, {"process": data, "type": "ok", "f": kind, "value": v})
            elif kind == "poll-invoke":
                self.add(t, {"process": data, "type": "invoke", "f": "poll", "value": None})
            elif kind == "poll-done":
                proc = data
                out = {}
                for p in (0, 1, 2):
                    if any(t0 <= t < t1 and p == pp for t0, t1, pp in self.blind_reads):
                        continue
                    start = pos[proc][p]
                    recs = [[o, logs[p][o]] for o in range(start, min(len(logs[p]), start + 50))]
                    if recs:
                        out[str(p)] = recs
                        pos[proc][p] = recs[-1][0] + 1
                self.add(t, {"process": proc, "type": "ok", "f": "poll", "value": out, "node": "n2"})
            elif kind == "sample":
                parts = {str(p): {"leader": l, "isr": isr, "epoch": e} for p, (l, isr, e) in st.items()}
                self.add(t, {"process": "sampler", "type": "ok", "f": "sample",
                             "value": {"controller": 2, "partitions": parts}})
            elif kind == "nemesis":
                f, value = data
                self.add(t, {"process": "nemesis", "type": "invoke", "f": f, "value": value})
                self.add(t + 0.12, {"process": "nemesis", "type": "info", "f": f, "value": value})
            elif kind == "truncate":
                p = self.truncate[1]
                del logs[p][log_len_at["cut"]:]
        # final phase: heal, then drain every partition from its start
        t = self.duration + 0.5
        self.add(t, {"process": "nemesis", "type": "invoke", "f": "heal", "value": {"nodes": []}})
        self.add(t + 0.05, {"process": "nemesis", "type": "info", "f": "heal", "value": {"nodes": []}})
        for p in (0, 1, 2):
            t += 0.3
            self.add(t, {"process": 4, "type": "invoke", "f": "poll", "value": None, "drain": True})
            self.add(t + 0.02, {"process": 4, "type": "ok", "f": "poll", "drain": True, "node": "n2",
                                "value": {str(p): [[o, v] for o, v in enumerate(logs[p])]}})
        self.events.sort(key=lambda e: (e[0], e[1]))
        ops = []
        for i, (tn, _, op) in enumerate(self.events):
            ops.append({"index": i, "time": tn, **op})
        return ops


# ---- analysis (just enough to write results.json for the fixtures) ---------

def merge_invokes(ops: list[dict]) -> list[dict]:
    """Witness ops as the checkers give them: each completion carries its
    invoke's index and time (``invoke_index``, ``invoke_time``)."""
    pending: dict = {}
    out = []
    for op in ops:
        if op["type"] == "invoke":
            pending[op["process"]] = op
            out.append(op)
            continue
        inv = pending.pop(op["process"], None)
        if inv is not None and op["process"] != "sampler":
            op = {**op, "invoke_index": inv["index"], "invoke_time": inv["time"]}
        out.append(op)
    return out


def analyse(ops: list[dict]) -> dict:
    acks, reads, nemesis, samples = [], {}, [], []
    ops = merge_invokes(ops)
    for op in ops:
        if op["f"] == "send" and op["type"] == "ok":
            for p, v, off in op["value"]:
                acks.append((p, v, off, op))
        elif op["f"] == "poll" and op["type"] == "ok":
            for p, recs in op["value"].items():
                for off, v in recs:
                    reads.setdefault((int(p), off), []).append((v, op))
        elif op["process"] == "nemesis":
            nemesis.append(op)
        elif op["f"] == "sample":
            samples.append(op)
    read_values = {(p, v) for (p, _), lst in reads.items() for v, _ in lst}
    return {"acks": acks, "reads": reads, "read_values": read_values, "nemesis": nemesis, "samples": samples}


def context_at(a: dict, t: int, p: int) -> dict:
    active, recent = {}, []
    stops = {"stop-partition": "start-partition", "start": "kill", "resume": "pause", "reset-clock": "bump-clock"}
    for op in a["nemesis"]:
        if op["time"] > t or op["type"] != "invoke":
            continue
        f = op["f"]
        if f in ("start-partition", "kill", "pause", "bump-clock", "strobe-clock"):
            active[f] = op
        else:
            active.pop(stops.get(f), None)
            recent.append(op)
    healed = {}
    for op in a["nemesis"]:
        if op["type"] == "invoke" and op["f"] in stops:
            healed.setdefault(stops[op["f"]], []).append(op["time"])
    last = None
    for s in a["samples"]:
        if s["time"] <= t:
            last = s
    ctx = {"faults": [{"f": op["f"], "value": op["value"], "index": op["index"], "time": op["time"],
                       "healed_time": next((h for h in healed.get(op["f"], []) if h > op["time"]), None)}
                      for op in active.values()],
           "recent_nemesis": [{"f": op["f"], "value": op["value"], "index": op["index"], "time": op["time"]}
                              for op in recent[-3:]],
           "sample": None}
    if last:
        st = last["value"]["partitions"][str(p)]
        ctx["sample"] = {"index": last["index"], "time": last["time"], "controller": last["value"]["controller"],
                         **st}
    return ctx


def stats(ops: list[dict], a: dict) -> dict:
    counts: dict = {}
    for op in ops:
        if op["type"] != "invoke" and op["process"] not in ("nemesis", "sampler"):
            counts.setdefault(op["f"], {"ok": 0, "fail": 0, "info": 0})[op["type"]] += 1
    end = int(ops[-1]["time"] // S) + 1
    avail = [{"second": s, "ok": 0, "fail": 0, "info": 0} for s in range(end)]
    for op in ops:
        if op["type"] != "invoke" and op["process"] not in ("nemesis", "sampler"):
            avail[int(op["time"] // S)][op["type"]] += 1
    return {"ops": counts, "acknowledged": len(a["acks"]),
            "read": len(a["read_values"]), "drain_complete": True, "availability": avail,
            "realtime_lag": {"p50_ms": 412.0, "p99_ms": 1650.5, "max_ms": 9120.0}}


def empty_anomalies(allowed: dict | None = None) -> dict:
    allowed = allowed or {}
    return {t: {"count": 0, "allowed": t in allowed, "reason": allowed.get(t),
                "description": DESCRIPTIONS[t], "witnesses": []} for t in TYPES}


def write_run(name: str, config: dict, ops: list[dict], results: dict | None, logs: dict[str, dict[str, str]]):
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    (d / "nodes").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with open(d / "history.jsonl", "w") as fh:
        for op in ops:
            fh.write(json.dumps(op, separators=(",", ":")) + "\n")
    if results is not None:
        (d / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    for node, files in logs.items():
        (d / "nodes" / node).mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            (d / "nodes" / node / fname).write_text(text)


def broker_log(node: str, extra: list[str]) -> str:
    base = [
        f"[2025-01-01 10:00:00,100] INFO [KafkaRaftServer nodeId={node[1:]}] Kafka Server started (kafka.server.KafkaRaftServer)",
        f"[2025-01-01 10:00:01,200] INFO [Partition kchaos-0 broker={node[1:]}] Log loaded for partition kchaos-0 with initial high watermark 0 (kafka.cluster.Partition)",
    ]
    return "\n".join(base + extra) + "\n"


def config(name: str, seed: int, nemesis: list[str], **extra) -> dict:
    return {"name": name, "seed": seed, "kafka_version": "4.1.1", "nodes": ["n1", "n2", "n3"],
            "nemesis": nemesis, "topic": "kchaos", "partitions": 3, "replication_factor": 3,
            "time_limit_s": 30, "workload": {"kind": "queue", "producers": 2, "consumers": 2, "acks": "all"},
            "broker": {"unclean.leader.election.enable": True, "min.insync.replicas": 1}, **extra}


def make_valid() -> None:
    sim = Sim(seed=11, duration=30.0,
              leader_changes=[(6.0, 2, 1, [1, 2], 1), (6.0, 0, 1, [1, 2], 0), (6.0, 1, 2, [2, 1], 0),
                              (12.0, 0, 1, [1, 2, 3], 0), (12.0, 1, 2, [2, 3, 1], 0), (12.0, 2, 1, [1, 2, 3], 1),
                              (15.0, 1, 1, [1, 3], 1), (15.0, 0, 1, [1, 3], 0), (15.0, 2, 1, [1, 3], 1),
                              (19.0, 1, 1, [1, 3, 2], 1), (19.0, 0, 1, [1, 3, 2], 0), (19.0, 2, 1, [1, 3, 2], 1)],
              kill_windows=[(14.0, 15.0, 1), (5.0, 6.0, 2)])
    nemesis = [(5.0, "start-partition", {"nodes": ["n3"], "fault": "partition", "topology": "isolate-node"}),
               (10.0, "stop-partition", {"nodes": ["n3"], "fault": "partition"}),
               (14.0, "kill", {"nodes": ["n2"], "target": "leader of p1"}),
               (17.0, "start", {"nodes": ["n2"]}),
               (21.0, "pause", {"nodes": ["n3"]}),
               (23.0, "resume", {"nodes": ["n3"]}),
               (25.0, "bump-clock", {"nodes": ["n1"], "delta_ms": 60000, "color": "#0b7285"}),
               (28.0, "reset-clock", {"nodes": ["n1"]})]
    ops = sim.run(nemesis, poll_mode="subscribe")
    a = analyse(ops)
    anomalies = empty_anomalies({"poll-skip": "consumers subscribe: a rebalance may skip offsets",
                                 "unseen": "informational"})
    polls = [op for op in merge_invokes(ops) if op["f"] == "poll" and op["type"] == "ok" and op["value"] and not op.get("drain")]
    w_poll = polls[len(polls) // 2]
    p = int(next(iter(w_poll["value"])))
    anomalies["poll-skip"]["count"] = 2
    anomalies["poll-skip"]["witnesses"] = [{
        "partition": p, "offsets": [w_poll["value"][str(p)][0][0]], "values": [w_poll["value"][str(p)][0][1]],
        "ops": [w_poll], "context": context_at(a, w_poll["time"], p)}]
    results = {"valid": True, "checker": {"engine": "reference", "master": None, "seconds": 0.42},
               "errors": [], "anomalies": anomalies, "unclean_elections": [], "stats": stats(ops, a)}
    logs = {n: {"server.log": broker_log(n, [])} for n in ("n1", "n2", "n3")}
    logs["n2"]["server.log"] = broker_log("n2", [
        "[2025-01-01 10:00:15,001] INFO [Partition kchaos-1 broker=1] Shrinking ISR from 2,3,1 to 1,3 (kafka.cluster.Partition)"])
    write_run("valid", config("faults-all-valid", 11, ["partition", "kill", "pause", "clock"]), ops, results, logs)


def make_invalid() -> None:
    sim = Sim(seed=7, duration=30.0,
              leader_changes=[(8.0, 0, 1, [1], 0),
                              (16.0, 0, None, [1], 0), (16.0, 1, 2, [2, 3], 0), (16.0, 2, 3, [3, 2], 0),
                              (17.0, 0, 3, [3], 1), (18.0, 0, 3, [3, 2], 1),
                              (22.0, 0, 3, [3, 2, 1], 1), (22.0, 1, 2, [2, 3, 1], 0), (22.0, 2, 3, [3, 2, 1], 0)],
              kill_windows=[(15.0, 17.0, 0)],
              blind_reads=[(8.0, 17.0, 0)],
              truncate=(17.0, 0, 8.0),
              xss_fail_window=(15.0, 19.0, 0))
    nemesis = [(5.0, "start-partition", {"nodes": ["n1"], "fault": "partition", "topology": "cut-replication",
                                         "cut": {"n2": ["n1"], "n3": ["n1"]}, "ports": [9092]}),
               (15.0, "kill", {"nodes": ["n1"], "target": "leader of p0"}),
               (19.0, "stop-partition", {"nodes": ["n1"], "fault": "partition"}),
               (20.0, "start", {"nodes": ["n1"]}),
               (24.0, "pause", {"nodes": ["n2"]}),
               (26.0, "resume", {"nodes": ["n2"]}),
               (27.0, "strobe-clock", {"nodes": ["n3"], "delta_ms": 200, "period_ms": 10}),
               (29.0, "reset-clock", {"nodes": ["n3"]})]
    ops = sim.run(nemesis, poll_mode="assign")
    a = analyse(ops)
    mops = merge_invokes(ops)
    xss_op = next(op for op in mops if op.get("error") == XSS)
    drain0 = next(op for op in mops if op.get("drain") and op["type"] == "ok" and "0" in op["value"])
    lost = [(p, v, off, op) for (p, v, off, op) in a["acks"] if (p, v) not in a["read_values"]]
    assert lost, "the fixture must lose writes"
    # inconsistent offsets: an offset acknowledged or read with two values
    by_off: dict = {}
    for p, v, off, op in a["acks"]:
        by_off.setdefault((p, off), {}).setdefault(v, []).append(op)
    for (p, off), lst in a["reads"].items():
        for v, op in lst:
            by_off.setdefault((p, off), {}).setdefault(v, []).append(op)
    incons = sorted((k, vs) for k, vs in by_off.items() if len(vs) > 1)
    assert incons, "the fixture must have inconsistent offsets"
    anomalies = empty_anomalies({"unseen": "informational"})
    lw = anomalies["lost-write"]
    lw["count"] = len(lost)
    for i, (p, v, off, op) in enumerate(lost[:5]):
        w_ops = sorted([op, drain0] + ([xss_op] if i == 0 else []), key=lambda o: o["index"])
        lw["witnesses"].append({"partition": p, "offsets": [off], "values": [v], "ops": w_ops,
                                "context": context_at(a, op["time"], p)})
    io = anomalies["inconsistent-offset"]
    io["count"] = len(incons)
    for (p, off), vs in incons[:3]:
        w_ops = []
        for v, lst in vs.items():
            for op in lst:
                if op not in w_ops:
                    w_ops.append(op)
        w_ops.sort(key=lambda o: o["index"])
        io["witnesses"].append({"partition": p, "offsets": [off], "values": list(vs), "ops": w_ops[:4],
                                "context": context_at(a, w_ops[0]["time"], p)})
    before = next(s for s in reversed(a["samples"]) if s["value"]["partitions"]["0"]["leader"] == 1)
    after = next(s for s in a["samples"] if s["value"]["partitions"]["0"]["leader"] == 3)
    ue = anomalies["unclean-election"]
    ue["count"] = 1
    ue["witnesses"] = [{"partition": 0, "offsets": [], "values": [], "ops": [before, after],
                        "context": context_at(a, before["time"], 0)}]
    inconsistent_p0 = sum(1 for (p, _), _ in incons if p == 0)
    results = {
        "valid": False, "checker": {"engine": "reference", "master": None, "seconds": 0.61}, "errors": [],
        "anomalies": anomalies,
        "unclean_elections": [{"partition": 0, "time": after["time"], "index": after["index"], "from_leader": 1,
                               "to_leader": 3, "epoch": 1, "last_isr": [1], "lost_writes": len(lost),
                               "inconsistent_offsets": inconsistent_p0}],
        "stats": stats(ops, a),
    }
    logs = {
        "n1": {"server.log": broker_log("n1", [
            "[2025-01-01 10:00:08,010] INFO [Partition kchaos-0 broker=1] Shrinking ISR from 1,2,3 to 1. Leader: (highWatermark: 41, endOffset: 42). Out of sync replicas: (brokerId: 2), (brokerId: 3). (kafka.cluster.Partition)",
            f"[2025-01-01 10:00:09,000] WARN [SocketServer listenerType=BROKER, nodeId=1] Unexpected client id {SENTINEL_XSS} (kafka.network.Processor)",
            "[2025-01-01 10:00:14,900] ERROR [ReplicaManager broker=1] Error processing append operation on partition kchaos-0 (kafka.server.ReplicaManager)"]),
            "server.properties": "node.id=1\nprocess.roles=broker,controller\nunclean.leader.election.enable=true\n"},
        "n2": {"server.log": broker_log("n2", [
            "[2025-01-01 10:00:06,000] WARN [ReplicaFetcher replicaId=2, leaderId=1, fetcherId=0] Error in response for fetch request (org.apache.kafka.server.ReplicaFetcherThread)"])},
        "n3": {"server.log": broker_log("n3", [
            "[2025-01-01 10:00:17,020] INFO [Partition kchaos-0 broker=3] Unclean leader election for partition kchaos-0; this may lose data (kafka.cluster.Partition)",
            "[2025-01-01 10:00:17,021] INFO [Partition kchaos-0 broker=3] Truncating log to offset 22 (kafka.log.UnifiedLog)"])},
    }
    write_run("invalid", config("leader-isolation-unclean", 7, ["partition", "kill", "pause", "clock"],
                                notes=SENTINEL_XSS), ops, results, logs)


def make_unknown() -> None:
    sim = Sim(seed=3, duration=6.0, leader_changes=[], kill_windows=[])
    ops = sim.run([(2.0, "pause", {"nodes": ["n2"]}), (4.0, "resume", {"nodes": ["n2"]})])
    a = analyse(ops)
    anomalies = {t: {"count": 0, "allowed": False, "reason": None, "description": DESCRIPTIONS[t], "witnesses": []}
                 for t in ("duplicate", "nonmonotonic-send")}
    results = {
        "valid": "unknown", "checker": {"engine": "spark", "master": "local[2]", "seconds": 31.7},
        "errors": ["lost-write: Py4JJavaError: An error occurred while calling o142.collectToPython.\n"
                   ": java.lang.OutOfMemoryError: Java heap space",
                   f"inconsistent-offset: ValueError: cannot parse value {XSS}"],
        "anomalies": anomalies, "unclean_elections": [], "stats": stats(ops, a),
    }
    write_run("unknown", config("short-pause", 3, ["pause"], time_limit_s=6, future_option={"x": [1, 2]}),
              ops, results, {"n1": {"server.log": broker_log("n1", [])}})


if __name__ == "__main__":
    make_valid()
    make_invalid()
    make_unknown()
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"fixtures written to {OUT} ({total / 1024:.0f} KiB)")
