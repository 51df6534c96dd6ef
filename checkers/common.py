"""What both engines share: settings, findings, verdict, witness assembly.

An engine (reference or Spark) turns a run into ``RunFindings``: per anomaly
type a count and the first ``max_witnesses`` witnesses in a canonical order
(so both engines pick the same ones), statistics, unclean elections, and the
rows of the ops the witnesses name plus the nemesis and sampler ops. Everything
after that (allowed anomalies, verdict, context of faults and leaders) is
decided here once, so the engines cannot drift apart on it.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from history.ops import ACTION_START, SAMPLER
from history.fault_intervals import FaultTracker, NemesisOp
from history.paired import witness_op
from .hanging import judge as judge_hanging
from .result import ANOMALY_TYPES, DESCRIPTIONS, CheckResult

if TYPE_CHECKING:
    from .kafka_record import RunRecords

DEFAULT_ALLOWED = {"elr-election": "informational: an election from the eligible leader replicas is clean by "
                                   "design (KIP-966)",
                   # transactions (checkers/txn.py; docs/design.md says why)
                   "int-send-skip": "Kafka transactions do not isolate writes: other producers' records land "
                                    "between one transaction's sends to a partition",
                   "G0": "a partition's log order is append order, not commit order: concurrent transactions' "
                         "writes interleave (Jepsen allows G0 for Kafka)",
                   "G0-process": "write cycles follow Kafka's append order, not commit order (see G0)",
                   "G0-realtime": "write cycles follow Kafka's append order, not commit order (see G0): a long "
                                  "transaction writes before and after shorter ones complete"}
# Counted, never a violation, but the verdict cannot be valid while any is
# present (unless the config allows it by name): nobody read these writes.
UNKNOWN_TYPES = ("unseen",)
# Only for histories in mode "subscribe": consumers subscribed but no rebalance was
# recorded. With rebalance events (mode "group") the chains follow them and these
# are real checks (checkers/groups.py).
SUBSCRIBE_ALLOWED = {
    "poll-skip": "consumers subscribe: a rebalance moves partitions between consumers, "
                 "so one consumer's reads of a partition may jump ahead",
    "nonmonotonic-poll": "consumers subscribe: a rebalance can rewind a consumer to the "
                         "group's last committed offset",
}

ENGINES = ("auto", "spark", "reference")

SKIPPED_LIMIT = 10      # known offsets listed in a poll-skip witness
RECENT_NEMESIS = 3      # unpaired nemesis ops shown in a witness context


@dataclass
class Settings:
    engine: str = "auto"            # "auto": by history size (checkers.choose_engine)
    spark_master: str = "local[2]"
    max_witnesses: int = 20
    allowed: dict[str, Any] = field(default_factory=dict)
    spark_conf: dict[str, Any] = field(default_factory=dict)   # extra Spark settings
    client_settings: dict[str, Any] | None = None               # the run's effective producer/consumer settings
    broker_settings: dict[str, Any] | None = None               # the run's [broker] overrides (config.json "broker")
    # too little progress on partitions a fault did not impair is an anomaly (progress_check.py); None: not judged
    min_progress: float | None = None
    min_insync: int = 1             # the run topic's min.insync.replicas (an ISR below it impairs a partition)

    @classmethod
    def from_config(cls, config: dict[str, Any] | None) -> "Settings":
        config = dict(config or {})
        s = cls(engine=config.get("engine") or "auto",
                spark_master=config.get("spark_master", "local[2]"),
                max_witnesses=int(config.get("max_witnesses", 20)),
                allowed=dict(config.get("allowed") or {}),
                spark_conf=dict(config.get("spark_conf") or {}),
                client_settings=config.get("client_settings"),
                broker_settings=config.get("broker_settings"),
                min_progress=None if config.get("min_progress") is None else float(config["min_progress"]),
                min_insync=int(config.get("min_insync_replicas") or 1))
        if s.min_progress is not None and not 0 <= s.min_progress <= 1:
            raise ValueError(f"min_progress must be between 0 and 1, got {s.min_progress}")
        if s.engine not in ENGINES:
            raise ValueError(f"unknown checker engine {s.engine!r} ({', '.join(ENGINES)})")
        unknown = set(s.allowed) - set(ANOMALY_TYPES)
        if unknown:
            raise ValueError(f"allowed names unknown anomaly types: {sorted(unknown)}")
        return s

    def allowed_for(self, mode: str) -> dict[str, str]:
        """Defaults, then subscribe-mode allowances, then config; a falsy config
        value takes a default allowance away."""
        out = dict(DEFAULT_ALLOWED)
        if mode == "subscribe":
            out.update(SUBSCRIBE_ALLOWED)
        out.update(client_allowances((self.client_settings or {}).get("producer")))
        if self.min_progress is None:
            out["too-little-progress"] = "not judged: [checker] min_progress is not set"
        for k, reason in self.allowed.items():
            if reason:
                out[k] = str(reason)
            else:
                out.pop(k, None)
        return out


def _truthy(v: Any) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes")


def _setting(conf: dict[str, Any], names: tuple[str, ...], default: Any) -> Any:
    return next((conf[n] for n in names if n in conf), default)


def client_allowances(producer: dict[str, Any] | None) -> dict[str, str]:
    """Anomalies a producer setting makes Kafka's documented behaviour, with
    why (librdkafka's defaults where a setting is absent: no idempotence,
    retries 2147483647, 1000000 requests in flight). A producer with
    idempotence on promises more, and gets none."""
    if producer is None or _truthy(_setting(producer, ("enable.idempotence",), False)):
        return {}
    retries = int(_setting(producer, ("retries", "message.send.max.retries"), 2147483647))
    in_flight = int(_setting(producer, ("max.in.flight.requests.per.connection", "max.in.flight"), 1000000))
    out = {}
    if retries > 0:
        out["duplicate"] = (f"producer settings: enable.idempotence=false with retries={retries} is "
                            "at-least-once delivery: a retried batch may be written twice")
        if in_flight > 1:
            out["nonmonotonic-send"] = (f"producer settings: enable.idempotence=false with "
                                        f"max.in.flight={in_flight} and retries: a retried batch may land "
                                        "after a later one")
    return out


@dataclass
class Witness:
    partition: int | None
    offsets: list[int]
    values: list[int]
    op_ids: list[int]                 # invoke_index of each op; the first sets the context
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    count: int = 0
    witnesses: list[Witness] = field(default_factory=list)
    error: str | None = None


@dataclass
class RunFindings:
    anomalies: dict[str, Finding]
    stats: dict[str, Any]
    elections: list[dict[str, Any]]
    mode: str
    has_ok_send: bool
    errors: list[str]
    op_rows: dict[int, dict[str, Any]]      # witness ops, by invoke_index, in to_row() form
    control_rows: list[dict[str, Any]]      # nemesis and sampler ops, in to_row() form
    # every lost write (partition, offset | None, value, ack time) and inconsistent offset
    # (partition, offset, earliest ack time | None): the election step attributes them
    losses: list[tuple[int, int | None, int, int | None]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, int | None]] = field(default_factory=list)
    partition_changes: list[dict[str, Any]] = field(default_factory=list)
    election_source: dict[str, Any] = field(default_factory=dict)
    # hanging transactions (hanging.py): (partition, value) -> the op that wrote it, for the values
    # the engine was asked about, and the final drain's view (a hanging.DrainView)
    writers: dict[tuple[int, int], int] = field(default_factory=dict)
    drain_view: Any = None
    # partition -> every acknowledged message's completion time (ns), sorted: the progress step
    ack_times: dict[int, Any] = field(default_factory=dict)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks, as Spark's exact
    ``percentile`` (a list, or a numpy array of floats)."""
    pos = (len(sorted_values) - 1) * p
    lo, hi = int(pos // 1), -int(-pos // 1)
    if lo == hi:
        return float(sorted_values[lo])
    return (hi - pos) * sorted_values[lo] + (pos - lo) * sorted_values[hi]


def lag_summary(p50: float | None, p99: float | None, mx: float | None) -> dict[str, float | None]:
    r = lambda ns: None if ns is None else round(ns / 1e6, 3)  # noqa: E731
    return {"p50_ms": r(p50), "p99_ms": r(p99), "max_ms": r(mx)}


def availability(counts: dict[tuple[int, str], int]) -> list[dict[str, int]]:
    """Per-second ok/fail/info completions, with idle seconds filled in as zeros."""
    if not counts:
        return []
    last = max(s for s, _ in counts)
    return [{"second": s, **{t: counts.get((s, t), 0) for t in ("ok", "fail", "info")}}
            for s in range(0, last + 1)]


class Timeline:
    """Faults and leader samples over time, to explain a witness."""

    def __init__(self, control_rows: list[dict[str, Any]]):
        rows = sorted(control_rows, key=lambda r: r["invoke_index"])
        self.events: list[dict[str, Any]] = []    # nemesis ops that start no fault
        self.samples: dict[int, tuple[list[int], list[dict[str, Any]]]] = {}
        tracker = FaultTracker()
        start_ops: dict[int, dict[str, Any]] = {}
        for r in rows:
            if r["role"] == SAMPLER and r.get("sample") is not None:
                self._add_sample(r)
            elif r["role"] == "nemesis":
                op = witness_op(r)
                ev = NemesisOp(index=r["invoke_index"], invoke_time=r["invoke_time"], time=r["time"],
                               f=r["f"], value=op["value"], error=r["error"])
                tracker.add(ev)
                if ev.action == ACTION_START:
                    start_ops[r["invoke_index"]] = op
                else:
                    self.events.append({"time": ev.end_time, "op": op})
        # {"start", "end", "op"}: each fault's interval and the op that began it
        self.faults = [{"start": iv.start_time, "end": iv.end_time, "op": start_ops[iv.start.index]}
                       for iv in tracker.intervals]
        self.event_times = [e["time"] for e in self.events]

    def _add_sample(self, r: dict[str, Any]) -> None:
        idx = r["index"] if r["index"] is not None else r["invoke_index"]
        for s in r["sample"]:
            keys, vals = self.samples.setdefault(s["partition"], ([], []))
            keys.append(idx)
            vals.append({"index": idx, "time": r["time"], "controller": r["controller"],
                         "leader": s["leader"], "isr": list(s["isr"] or []), "epoch": s["epoch"]})

    def context(self, partition: int | None, op: dict[str, Any] | None) -> dict[str, Any]:
        """What was going on around ``op`` (a witness's first op): the faults in
        effect at any moment between its invocation and completion, the last
        few other nemesis ops by its completion, and the partition's last
        sample at or before it."""
        if op is None:
            return {"faults": [], "recent_nemesis": [], "sample": None}
        t0 = op["invoke_time"]
        t1 = op["time"] if op["time"] is not None else t0
        idx = op["index"] if op["index"] is not None else op["invoke_index"]
        faults = [{"f": fl["op"]["f"], "value": fl["op"]["value"], "index": fl["op"]["invoke_index"],
                   "time": fl["start"], "healed_time": fl["end"]}
                  for fl in self.faults if fl["start"] <= t1 and (fl["end"] is None or fl["end"] >= t0)]
        k = bisect.bisect_right(self.event_times, t1)
        recent = [{"f": e["op"]["f"], "value": e["op"]["value"], "index": e["op"]["invoke_index"],
                   "time": e["time"]} for e in self.events[max(0, k - RECENT_NEMESIS):k]]
        sample = None
        if partition in self.samples:
            keys, vals = self.samples[partition]
            i = bisect.bisect_right(keys, idx)
            sample = vals[i - 1] if i else None
        return {"faults": faults, "recent_nemesis": recent, "sample": sample}


def assemble(rf: RunFindings, settings: Settings, checker: dict[str, Any],
             records: "RunRecords | None" = None) -> CheckResult:
    """Elections (from Kafka's record when given), allowed anomalies, verdict
    and witnesses with their context."""
    if "unclean-election" not in rf.anomalies:
        from .elections import judge
        try:
            judge(rf, records, settings.max_witnesses)
        except Exception as e:  # noqa: BLE001 - never a pass on a crash
            msg = f"elections: {type(e).__name__}: {e}"
            rf.errors.append(msg)
            rf.anomalies.update({t: Finding(error=msg) for t in ("unclean-election", "elr-election")})
    if "hanging-transaction" not in rf.anomalies:
        try:
            judge_hanging(rf, records, settings)
        except Exception as e:  # noqa: BLE001 - never a pass on a crash
            msg = f"hanging-transaction: {type(e).__name__}: {e}"
            rf.errors.append(msg)
            rf.anomalies["hanging-transaction"] = Finding(error=msg)
    from .progress_check import judge as judge_progress    # imported here: it builds on this module's Finding
    judge_progress(rf, settings)
    allowed = settings.allowed_for(rf.mode)
    timeline = Timeline(rf.control_rows)
    anomalies: dict[str, dict[str, Any]] = {}
    errors = list(rf.errors)
    rows = {**{r["invoke_index"]: r for r in rf.control_rows}, **rf.op_rows}   # sampler ops witness elections
    for typ in ANOMALY_TYPES:
        fnd = rf.anomalies.get(typ)
        if fnd is None:
            fnd = Finding(error="not checked")
            errors.append(f"{typ}: not checked")
        witnesses = []
        for w in fnd.witnesses[: settings.max_witnesses]:
            ids = list(dict.fromkeys(w.op_ids))
            ops = [witness_op(rows[i]) for i in ids if i in rows]
            first = ops[0] if ids and ids[0] in rows else None
            witnesses.append({"partition": w.partition, "offsets": w.offsets, "values": w.values,
                              "ops": ops, "context": timeline.context(w.partition, first), **w.extra})
        entry = {"count": fnd.count, "allowed": typ in allowed, "reason": allowed.get(typ),
                 "description": DESCRIPTIONS[typ], "witnesses": witnesses}
        if fnd.error:
            entry["error"] = fnd.error
        anomalies[typ] = entry
    unknown = unknown_reasons(rf, anomalies, errors)
    if any(a["count"] > 0 and not a["allowed"] and t not in UNKNOWN_TYPES for t, a in anomalies.items()):
        valid: Any = False
    elif unknown:
        valid = "unknown"
    else:
        valid = True
    stats = dict(rf.stats)
    stats["mode"] = rf.mode
    return CheckResult(valid=valid, anomalies=anomalies, stats=stats, errors=errors,
                       unclean_elections=rf.elections, checker=checker, unknown=unknown,
                       elections=rf.election_source, partition_changes=rf.partition_changes)


def drain_counts(ops: int, ok: int, stops: list[str | None]) -> dict[str, Any]:
    """``stats["drains"]``: the drain ops, the ok ones and, when some were
    not ok, the first one's error in history order (why the drain stopped:
    a timeout, no leader, a transaction still open)."""
    out: dict[str, Any] = {"ops": ops, "ok": ok}
    if ok < ops:
        out["stopped"] = next((e for e in stops if e), None)
    return out


def unknown_reasons(rf: RunFindings, anomalies: dict[str, dict[str, Any]], errors: list[str]) -> list[str]:
    """Why the record cannot give a valid verdict: a checker failed, nothing
    was acknowledged, acknowledged writes were never read, or the final drain
    stopped short."""
    out = []
    if errors:
        out.append(f"{len(errors)} checker error(s): {errors[0]}")
    if not rf.has_ok_send:
        out.append("no send was acknowledged: there is nothing to check")
    for t in UNKNOWN_TYPES:
        a = anomalies.get(t) or {}
        if a.get("count") and not a.get("allowed"):
            out.append(f"{a['count']} acknowledged write(s) were never read ({t}): no read of their "
                       "partition reached their offsets")
    if rf.stats.get("unknown_consumption"):     # checkers/groups.py
        out.append(f"{rf.stats['unknown_consumption']} value(s) a consumer group committed past were never "
                   "delivered to a member, but a member poll ended info: it may have delivered them unrecorded")
    if rf.stats.get("unknown_share"):           # checkers/share.py
        out.append(f"{rf.stats['unknown_share']} acknowledged record(s) were never accepted or archived by the "
                   f"share group, and the run's end cannot say they are lost: "
                   f"{(rf.stats.get('share') or {}).get('end_why') or 'no share-end recorded'}")
    if rf.stats.get("unknown_share_counts"):    # checkers/share.py
        out.append(f"{rf.stats['unknown_share_counts']} share delivery count(s) did not go up between two "
                   "deliveries while a share-partition leader may have changed (a fault, or less than 300 s "
                   "after one): Kafka does not persist a count on acquisition, so a new leader may repeat it")
    if rf.stats.get("unknown_offset_changes"):     # checkers/committed_offsets.py
        out.append(f"{rf.stats['unknown_offset_changes']} change(s) of a group's committed offset only a commit "
                   "of unknown offsets (an info commit of the consumer's positions) could explain")
    for why in rf.stats.get("hanging_unknown") or []:      # checkers/hanging.py
        out.append(f"Kafka's record cannot tell whether a transaction hangs: {why}")
    drains = rf.stats.get("drains") or {}
    if drains.get("ops") and drains.get("ok", 0) < drains["ops"]:
        out.append(f"the final drain did not complete: {drains['ops'] - drains.get('ok', 0)} of "
                   f"{drains['ops']} partition drains stopped before the end they recorded"
                   + (f" ({drains['stopped']})" if drains.get("stopped") else ""))
    elif drains.get("ops") and rf.stats.get("drain_complete") is False:
        out.append("the final drain did not read every partition that has acknowledged writes")
    return out


def summary(result: CheckResult) -> list[tuple[str, int, bool]]:
    """(type, count, allowed) for every anomaly type, in the canonical order."""
    return [(t, int(result.anomalies.get(t, {}).get("count", 0) or 0),
             bool(result.anomalies.get(t, {}).get("allowed", False))) for t in ANOMALY_TYPES]


def crashed(settings: Settings, checker: dict[str, Any], error: str) -> CheckResult:
    """A result for an analysis that could not run at all: never a pass."""
    rf = RunFindings(anomalies={t: Finding(error=error) for t in ANOMALY_TYPES}, stats={},
                     elections=[], mode="unknown", has_ok_send=False, errors=[error],
                     op_rows={}, control_rows=[])
    return assemble(rf, settings, checker)
