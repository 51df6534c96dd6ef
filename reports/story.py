"""The story of an invalid run in a few lines, read before any table.

From results.json (checkers/result.py: anomalies and their witnesses,
``unclean_elections``, stats ``acknowledged`` / ``lost_writes_on_replicas`` /
``unattributed_lost_writes``) plus, where the witnesses do not carry them, ack
times from the history digest and the fault intervals. Pure: plain data in,
plain text lines out (the template escapes them). Times are seconds on the
plots' axis (since the workload started).

The first line tells what happened to acknowledged writes: how many were lost,
on which partitions, when they were acknowledged, which election (unclean or last-leader) they
are attributed to, whether any replica still has them and which faults were
active then. A divergence of the controllers' metadata logs (stats
``raft_log``) gets the next line. Each other failing anomaly type gets one line:
count, partitions and time span (of the witnesses listed, when the list is bounded).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from history.fault_intervals import fault_boundary
from checkers.result import ANOMALY_TYPES

from .controller_logs import divergence_text
from .digest import as_partition

MAX_LINES = 6
MAX_ELECTIONS = 3


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _dicts(x: Any) -> list[dict[str, Any]]:
    return [e for e in x if isinstance(e, dict)] if isinstance(x, list) else []


def _node(b: Any) -> str:
    return f"n{b}" if isinstance(b, int) and not isinstance(b, bool) else str(b)


def _ids(xs: Any) -> str:
    return "[" + ", ".join(_node(b) for b in xs) + "]" if isinstance(xs, list) else "?"


def _parts(ps: list[Any]) -> str:
    ps = list(dict.fromkeys(ps))
    if not ps:
        return ""
    return ("partition " if len(ps) == 1 else "partitions ") + ", ".join(str(p) for p in ps[:8]) + \
        (f" (+{len(ps) - 8})" if len(ps) > 8 else "")


def _span(times: list[float], origin: float) -> str:
    if not times:
        return ""
    a, b = min(times) - origin, max(times) - origin
    return f"at {a:.1f} s" if abs(b - a) < 0.05 else f"between {a:.1f} s and {b:.1f} s"


def election_text(e: dict[str, Any], origin: float) -> str:
    """``the unclean election of partition 2 at 49.1 s (epoch 3, n3 elected outside ISR [n1] ∪ ELR [])``."""
    bits = []
    if e.get("epoch") is not None:
        bits.append(f"epoch {e['epoch']}")
    who = f"{_node(e['to_leader'])} elected" if e.get("to_leader") is not None else "leader elected"
    when = f" at {e['time'] / 1e9 - origin:.1f} s" if _num(e.get("time")) else ""
    if e.get("kind") == "last-leader":
        bits.append(f"{_node(e.get('to_leader'))}, the last known leader, re-elected with ISR and ELR empty")
        return f"the last-leader election of partition {e.get('partition')}{when} ({', '.join(bits)})"
    if isinstance(e.get("last_elr"), list):
        bits.append(f"{who} outside ISR {_ids(e.get('last_isr'))} ∪ ELR {_ids(e.get('last_elr'))}")
    else:
        bits.append(f"{who} outside the last sampled ISR {_ids(e.get('last_isr'))}")
    return f"the unclean election of partition {e.get('partition')}{when} ({', '.join(bits)})"


def fault_label(fault: Any) -> tuple[tuple[str, str], str]:
    """((kind, nodes), short text) of one fault of a witness context:
    ``partition (cut-replication, n1)``, ``kill n1``."""
    if not isinstance(fault, dict):
        return (str(fault), ""), str(fault)[:80]
    f = fault.get("f") or fault.get("fault") or ""
    value = fault.get("value") if isinstance(fault.get("value"), dict) else {}
    kind = fault_boundary(f, value)[1] or str(f)
    nodes = value.get("nodes")
    nodes = ", ".join(map(str, nodes)) if isinstance(nodes, list) else str(nodes or "")
    how = value.get("topology") or value.get("direction") or value.get("mode")
    if isinstance(how, str) and how:
        text = f"{kind} ({how}{', ' + nodes if nodes else ''})"
    else:
        text = f"{kind} {nodes}".strip()
    return (kind, nodes), text


def _op_times(w: dict[str, Any]) -> list[float]:
    return [o["time"] / 1e9 for o in _dicts(w.get("ops")) if _num(o.get("time"))]


def _ack_t(w: dict[str, Any], ack_time: Mapping[Any, float]) -> float | None:
    p = as_partition(w.get("partition"))
    for v in w.get("values") or []:
        try:
            t = ack_time.get((p, v))
        except TypeError:
            t = None
        if t is not None:
            return t
    sends = [o["time"] / 1e9 for o in _dicts(w.get("ops"))
             if o.get("f") == "send" and o.get("type") == "ok" and _num(o.get("time"))]
    times = sends or _op_times(w)
    return min(times) if times else None


def _faults(ws: list[dict[str, Any]], intervals: Iterable[Any], lo: float | None, hi: float | None) -> list[str]:
    """Faults active while the writes were acknowledged and lost: the witnesses'
    context faults, then fault intervals overlapping [lo, hi] not named yet."""
    seen: dict[tuple[str, str], str] = {}
    for w in ws:
        ctx = w.get("context") if isinstance(w.get("context"), dict) else {}
        for f in ctx.get("faults") or []:
            key, text = fault_label(f)
            seen.setdefault(key, text)
    if lo is not None and hi is not None:
        for iv in intervals:
            if iv.start <= hi and iv.end >= lo:
                nodes = ", ".join(iv.nodes)
                key = (iv.kind, nodes)
                seen.setdefault(key, f"{iv.kind} {nodes}".strip())
    return list(seen.values())


def lost_line(results: dict[str, Any], origin: float, ack_time: Mapping[Any, float],
              intervals: Iterable[Any]) -> str:
    stats = results.get("stats") if isinstance(results.get("stats"), dict) else {}
    a = results["anomalies"]["lost-write"]
    n = a.get("count", 0)
    ws = _dicts(a.get("witnesses"))
    elections = _dicts(results.get("unclean_elections"))
    record = results.get("elections") if isinstance(results.get("elections"), dict) else {}
    elections += [e for e in _dicts(record.get("elections")) if e.get("kind") == "last-leader"]
    blamed = [e for e in elections if _num(e.get("lost_writes")) and e["lost_writes"] > 0]
    head = f"{stats['acknowledged']} acknowledged writes; " if _num(stats.get("acknowledged")) else ""
    parts = [as_partition(e.get("partition")) for e in blamed] + [as_partition(w.get("partition")) for w in ws]
    text = f"{head}{n} lost" + (f" on {_parts(parts)}" if parts else "")
    acks = [t for t in (_ack_t(w, ack_time) for w in ws) if t is not None]
    if acks:
        text += f", acknowledged {_span(acks, origin)}" + (f" (the {len(ws)} listed)" if len(ws) < n else "")
    unattributed = stats.get("unattributed_lost_writes")
    if blamed:
        if len(blamed) == 1 and (unattributed == 0 or (unattributed is None and blamed[0]["lost_writes"] >= n)):
            text += ", all attributed to " + election_text(blamed[0], origin)
        else:
            text += ", attributed: " + "; ".join(f"{e['lost_writes']} to {election_text(e, origin)}"
                                                  for e in blamed[:MAX_ELECTIONS])
            if len(blamed) > MAX_ELECTIONS:
                text += f"; and to {len(blamed) - MAX_ELECTIONS} more elections"
            if _num(unattributed) and unattributed:
                text += f"; {unattributed} not attributed to any election"
    elif _num(unattributed) or results.get("unclean_elections") is not None:
        text += (", none attributed to an election" if elections
                 else ", with no unclean or last-leader election observed")
    on = stats.get("lost_writes_on_replicas")
    if isinstance(on, dict):
        absent, present, unread = (on.get(k, 0) or 0 for k in ("absent_everywhere", "present_somewhere", "not_read"))
        if absent and absent >= n and not present:
            text += ", absent from every replica"
        else:
            bits = [f"{absent} absent from every replica" if absent else "",
                    f"{present} still on a replica (never served)" if present else "",
                    f"{unread} with replicas not read" if unread else ""]
            if any(bits):
                text += ", " + ", ".join(b for b in bits if b)
    hi_t = max([e["time"] / 1e9 for e in blamed if _num(e.get("time"))] + acks, default=None)
    faults = _faults(ws, intervals, min(acks) if acks else None, hi_t)
    if faults:
        text += "; faults active then: " + ", ".join(faults)
    return text + "."


def type_line(typ: str, a: dict[str, Any], results: dict[str, Any], origin: float) -> str:
    n = a.get("count", 0)
    ws = _dicts(a.get("witnesses"))
    if typ == "unclean-election":
        els = _dicts(results.get("unclean_elections"))
        if els:
            text = f"{typ}: {n}: " + "; ".join(election_text(e, origin) for e in els[:MAX_ELECTIONS])
            return text + (f"; +{len(els) - MAX_ELECTIONS} more" if len(els) > MAX_ELECTIONS else "") + "."
    parts = _parts([as_partition(w.get("partition")) for w in ws if w.get("partition") is not None])
    times = [t for w in ws for t in _op_times(w)]
    text = f"{typ}: {n}"
    if parts:
        text += f" on {parts}"
    if times:
        text += f", {_span(times, origin)}"
    if ws and len(ws) < n and (parts or times):
        text += f" (the {len(ws)} witnesses listed)"
    return text + "."


def story(results: dict[str, Any] | None, origin: float = 0.0, ack_time: Mapping[Any, float] | None = None,
          intervals: Iterable[Any] = ()) -> list[str]:
    """At most MAX_LINES lines telling why the run is invalid ([] unless it is)."""
    if not isinstance(results, dict) or results.get("valid") is not False:
        return []
    anomalies = results.get("anomalies") if isinstance(results.get("anomalies"), dict) else {}
    order = list(ANOMALY_TYPES) + sorted(t for t in anomalies if t not in ANOMALY_TYPES)
    failing = [t for t in order if isinstance(anomalies.get(t), dict) and _num(anomalies[t].get("count"))
               and anomalies[t]["count"] > 0 and not anomalies[t].get("allowed")]
    lines = []
    if "lost-write" in failing:
        lines.append(lost_line(results, origin, ack_time or {}, list(intervals)))
    stats = results.get("stats") if isinstance(results.get("stats"), dict) else {}
    raft = divergence_text(stats.get("raft_log"))    # Kafka's own Raft log: no anomaly type of its own
    if raft:
        lines.append(raft)
    others = [t for t in failing if t != "lost-write"]
    room = MAX_LINES - len(lines)
    if len(others) > room:
        shown, rest = others[:room - 1], others[room - 1:]
    else:
        shown, rest = others, []
    lines += [type_line(t, anomalies[t], results, origin) for t in shown]
    if rest:
        lines.append("Also failing: " + ", ".join(f"{anomalies[t]['count']} {t}" for t in rest) + ".")
    return lines


__all__ = ["story", "election_text", "fault_label"]
