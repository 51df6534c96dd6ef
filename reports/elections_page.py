"""Kafka's own record in the report: where elections came from, each
partition's election timeline (from the controller's metadata log), why a
verdict is unknown, and, per lost write, the election it is attributed to
and which replicas still hold it.

Shapes read here are results.json's (checkers/result.py): ``unknown``,
``elections`` ({source, notes, elections}), ``partition_changes``, and the
lost-write witnesses' ``attributed_to`` / ``attribution`` / ``replicas``.
Everything returned is plain text for the template, which escapes it.
Timeline times are seconds on the plots' axis (since the workload started,
``Digest.origin``); missing or odd values render as blanks, never raise.
"""
from __future__ import annotations

from typing import Any

from checkers.elections import METADATA, SAMPLES

from .digest import as_partition
from .view import jtext

MAX_CHANGES_PER_PARTITION = 200
MAX_PARTITIONS = 64
RECORD_KEYS = ("attributed_to", "attribution", "replicas")   # lost-write witness fields shown here

ELR_LABEL = "ELR election (clean, KIP-966)"
LAST_LEADER_LABEL = "last known leader re-elected (ISR and ELR empty; KIP-966 balanced recovery, recovering)"
ELECTION_KINDS = ("isr", "elr", "last-leader", "unclean", "leaderless")
KIND_LABELS = {
    "create": "partition created",
    "isr": "election from ISR (clean)",
    "elr": ELR_LABEL,
    "last-leader": LAST_LEADER_LABEL,
    "unclean": "UNCLEAN election",
    "leaderless": "leader lost (no leader)",
}
SOURCE_LABELS = {
    METADATA: "the controller's metadata log (Kafka's own record of every partition change)",
    SAMPLES: "the sampler's view (periodic leader/ISR samples: changes between samples are missed, no ELR)",
}


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def broker(b: Any) -> str:
    """Broker id k runs on node nk."""
    return f"n{b}" if isinstance(b, int) and not isinstance(b, bool) else (jtext(b, 40) or "none")


def brokers(xs: Any) -> str:
    if xs is None:
        return ""
    if not isinstance(xs, list):
        return jtext(xs, 80)
    return "[" + ", ".join(broker(b) for b in xs[:32]) + (", …" if len(xs) > 32 else "") + "]"


def workload_secs(ns: Any, origin: float) -> str:
    """ns since the history's start -> seconds on the plots' axis."""
    return f"{ns / 1e9 - origin:.3f}" if _num(ns) else ""


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _dicts(x: Any) -> list[dict[str, Any]]:
    return [e for e in x if isinstance(e, dict)] if isinstance(x, list) else []


# ---- why unknown, where elections came from ---------------------------------

def unknown_reasons(results: dict[str, Any] | None) -> list[str]:
    u = (results or {}).get("unknown")
    if u is None:
        return []
    u = u if isinstance(u, list) else [u]
    return [jtext(r, 600) for r in u if r not in (None, "")]


def election_source(results: dict[str, Any] | None) -> dict[str, Any] | None:
    """{source, label, notes, counts} or None when results.json does not say."""
    el = (results or {}).get("elections")
    if not isinstance(el, dict) or not el:
        return None
    source = el.get("source")
    notes = el.get("notes")
    notes = notes if isinstance(notes, list) else [] if notes is None else [notes]
    counts: dict[str, int] = {}
    for e in _dicts(el.get("elections")):
        k = str(e.get("kind") or "unknown")
        counts[k] = counts.get(k, 0) + 1
    return {
        "source": jtext(source, 60) or "unknown",
        "label": SOURCE_LABELS.get(source if isinstance(source, str) else "", f"an unknown source ({jtext(source, 60)})" if source else
                                   "an unnamed source"),
        "from_metadata": source == METADATA,
        "notes": [jtext(n, 600) for n in notes if n not in (None, "")],
        "counts": [(KIND_LABELS.get(k, k), n) for k, n in sorted(counts.items())],
    }


def all_elections(results: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """Every election results.json lists (any kind), for the leaders plot; None if absent."""
    el = (results or {}).get("elections")
    if not isinstance(el, dict) or "elections" not in el:
        return None
    return _dicts(el.get("elections"))


# ---- the per-partition election timeline ------------------------------------

def _change_label(c: dict[str, Any]) -> str:
    kind = c.get("kind")
    if isinstance(kind, str) and kind in KIND_LABELS:
        return KIND_LABELS[kind]
    if kind is not None:
        return jtext(kind, 60)
    bits = []
    if c.get("previous_isr") is not None and c.get("isr") != c.get("previous_isr"):
        bits.append("ISR")
    if c.get("previous_elr") is not None and c.get("elr") != c.get("previous_elr"):
        bits.append("ELR")
    return (" and ".join(bits) + " change") if bits else "no leader change"


def _partition_key(p: Any) -> tuple[bool, Any]:
    p = as_partition(p)
    return (not isinstance(p, int), p if isinstance(p, int) else str(p))


def timeline(results: dict[str, Any] | None, origin: float) -> list[dict[str, Any]]:
    """One entry per partition: {partition, rows, more, counts}; rows in
    metadata log order, at most MAX_CHANGES_PER_PARTITION (the first ones)."""
    changes = _dicts((results or {}).get("partition_changes"))
    by_p: dict[Any, list[dict[str, Any]]] = {}
    for c in changes:
        p = as_partition(c.get("partition"))
        try:
            hash(p)
        except TypeError:
            p = jtext(p, 40)
        by_p.setdefault(p, []).append(c)
    out = []
    for p in sorted(by_p, key=_partition_key)[:MAX_PARTITIONS]:
        cs = sorted(by_p[p], key=lambda c: (c.get("offset") if _num(c.get("offset")) else float("inf"),))
        rows = []
        for c in cs[:MAX_CHANGES_PER_PARTITION]:
            kind = c.get("kind")
            leader, prev = c.get("leader"), c.get("previous_leader")
            changed = kind in ELECTION_KINDS
            rows.append({
                "time": workload_secs(c.get("time"), origin),
                "offset": jtext(c.get("offset"), 20),
                "kind": jtext(kind, 40) if kind is not None else "",
                "label": _change_label(c),
                "leader": (f"{broker(prev)} → {broker(leader)}" if changed and "previous_leader" in c
                           else broker(leader)),
                "epoch": jtext(c.get("leader_epoch"), 20),
                "isr": brokers(c.get("isr")),
                "elr": brokers(c.get("elr")),
                "last_known_elr": brokers(c.get("last_known_elr")),
                "replicas": brokers(c.get("replicas")),
                "recovering": bool(c.get("recovering")),
                "unclean": kind == "unclean",
                "elr_election": kind == "elr",
            })
        counts: dict[str, int] = {}
        for c in cs:
            if c.get("kind") in ELECTION_KINDS:
                counts[c["kind"]] = counts.get(c["kind"], 0) + 1
        out.append({"partition": jtext(p, 40), "rows": rows,
                    "more": max(0, len(cs) - MAX_CHANGES_PER_PARTITION),
                    "counts": [(KIND_LABELS.get(k, k), n) for k, n in sorted(counts.items())],
                    "has_unclean": any(r["unclean"] for r in rows)})
    return out


def timeline_more_partitions(results: dict[str, Any] | None) -> int:
    ps = {jtext(c.get("partition"), 40) for c in _dicts((results or {}).get("partition_changes"))}
    return max(0, len(ps) - MAX_PARTITIONS)


# ---- lost writes: attribution and replicas ----------------------------------

def _on_axes(ns: Any, origin: float) -> str:
    if not _num(ns):
        return "at an unknown time"
    return f"at {workload_secs(ns, origin)} s"


def witness_record(w: dict[str, Any], origin: float) -> dict[str, Any] | None:
    """{attribution: text, attributed: bool, replicas: [(node, text, state)]}
    for a witness carrying the checkers' attribution, else None."""
    if not any(k in w for k in RECORD_KEYS):
        return None
    to = w.get("attributed_to")
    basis = w.get("attribution")
    if isinstance(to, dict):
        bits = [f"epoch {jtext(to.get('epoch'), 20)}" if to.get("epoch") is not None else "epoch unknown",
                f"new leader {broker(to.get('to_leader'))}", _on_axes(to.get("time"), origin)]
        if to.get("offset") is not None:
            bits.append(f"metadata log offset {jtext(to.get('offset'), 20)}")
        if to.get("partition") is not None and jtext(to.get("partition")) != jtext(w.get("partition")):
            bits.append(f"partition {jtext(to.get('partition'), 20)}")
        how = {"epoch": "by leader epoch start offset", "time": "by time only (sampled elections have no epochs)"}
        what = "last-leader election" if to.get("kind") == "last-leader" else "unclean election"
        text = f"{what}, " + ", ".join(bits) + (f"; attributed {how[basis]}" if isinstance(basis, str) and basis in how else
                                                          f"; basis: {jtext(basis, 200)}" if basis else "")
        attributed = True
    else:
        text = "unattributed: " + (jtext(basis, 300) or "no reason given")
        attributed = False
    reps = []
    r = w.get("replicas")
    if isinstance(r, dict):
        for node in sorted(r, key=str):
            v = r[node]
            if _num(v):
                reps.append((jtext(node, 40), f"present at offset {jtext(v, 20)} on {jtext(node, 40)} — never served",
                             "present"))
            elif v == "absent":
                reps.append((jtext(node, 40), "absent", "absent"))
            else:
                reps.append((jtext(node, 40), jtext(v, 80) or "unknown", "unknown"))
    return {"attribution": text, "attributed": attributed, "replicas": reps,
            "replicas_known": isinstance(r, dict),
            "absent_everywhere": bool(reps) and all(s == "absent" for _, _, s in reps)}


def lost_write_summary(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """The lost-write section's summary lines from stats."""
    out = []
    on = stats.get("lost_writes_on_replicas")
    if isinstance(on, dict):
        for key, label in (("absent_everywhere", "absent from every replica"),
                           ("present_somewhere", "still on some replica (never served)"),
                           ("not_read", "replicas not read")):
            if key in on:
                out.append((label, jtext(on.get(key), 20)))
    if "unattributed_lost_writes" in stats:
        out.append(("not attributed to an unclean election", jtext(stats.get("unattributed_lost_writes"), 20)))
    return out


def elections_context(results: dict[str, Any] | None, stats: dict[str, Any], origin: float) -> dict[str, Any]:
    return {
        "unknown_reasons": unknown_reasons(results),
        "election_source": election_source(results),
        "timeline": timeline(results, origin),
        "timeline_more_partitions": timeline_more_partitions(results),
        "timeline_max": MAX_CHANGES_PER_PARTITION,
        "lost_summary": lost_write_summary(stats),
        "elr_label": ELR_LABEL,
    }
