"""Turning history ops, witnesses and contexts into short display strings.

Everything returned here is plain text: the template escapes it.
"""
from __future__ import annotations

from typing import Any

from .digest import as_partition
from history.fault_intervals import fault_boundary

from .faults import default_color, safe_color

MAX_TEXT = 300
MAX_LIST = 8


def words(v: Any, nested: bool = False) -> str:
    """A value from the run as words, never raw JSON: strings as they are,
    lists as ``[a, b]``, objects as ``key value, key value`` (bracketed when
    nested), empty keys left out."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(words(x, True) for x in v) + "]"
    if isinstance(v, dict):
        inner = ", ".join(f"{k} {words(x, True)}".rstrip() for k, x in v.items() if x is not None)
        return f"({inner})" if nested else inner
    return str(v)


def jtext(v: Any, limit: int = MAX_TEXT) -> str:
    """``words(v)`` cut to ``limit`` characters."""
    try:
        s = words(v)
    except RecursionError:
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + " …"


def flat_rows(config: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A nested config as (dotted key, leaf value) rows: a table, not JSON."""
    out: list[tuple[str, Any]] = []
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out += flat_rows(v, key + ".")
        else:
            out.append((key, v))
    return out


def secs(ns: Any, origin: float = 0.0) -> str:
    """History time ``ns`` as seconds on the report's one clock: since the
    workload's start ``origin`` (s on the history's clock); set-up is negative."""
    if isinstance(ns, (int, float)) and not isinstance(ns, bool):
        return f"{ns / 1e9 - origin:.3f}"
    return ""


def _list(xs: list[Any]) -> str:
    if len(xs) <= MAX_LIST:
        return ", ".join(jtext(x, 60) for x in xs)
    return ", ".join(jtext(x, 60) for x in xs[:MAX_LIST]) + f", … (+{len(xs) - MAX_LIST})"


def _key(p: Any) -> Any:
    try:
        hash(p)
        return p
    except TypeError:
        return str(p)


def op_row(op: dict[str, Any], partition: Any, w_offsets: set[Any], w_values: set[Any],
           origin: float = 0.0) -> dict[str, Any]:
    """One witness op as table cells. ``hl`` marks an op that carries one of
    the witness's offsets or values in the witness's partition."""
    p_w = _key(as_partition(partition))
    v = op.get("value")
    f = op.get("f")
    parts, offsets, values = "", "", ""
    hl = False
    if f == "send" and isinstance(v, list) and all(isinstance(m, (list, tuple)) for m in v):
        msgs = [(_key(as_partition(m[0])) if len(m) > 0 else None, m[1] if len(m) > 1 else None,
                 m[2] if len(m) > 2 else None) for m in v]
        mine = [m for m in msgs if m[0] == p_w] or msgs
        parts = _list(list(dict.fromkeys(m[0] for m in mine)))
        offsets = _list([m[2] for m in mine]) if any(m[2] is not None for m in mine) else ""
        values = _list([m[1] for m in mine])
        hl = any(m[0] == p_w and (_key(m[2]) in w_offsets and m[2] is not None or _key(m[1]) in w_values)
                 for m in msgs)
    elif f == "poll" and isinstance(v, dict):
        recs_by_p = {_key(as_partition(k)): r for k, r in v.items() if isinstance(r, list)}
        keys = [p_w] if p_w in recs_by_p else list(recs_by_p)
        parts = _list(keys)
        o_txt, v_txt = [], []
        for k in keys:
            recs = [r for r in recs_by_p[k] if isinstance(r, (list, tuple)) and len(r) >= 2]
            prefix = f"p{k}: " if len(keys) > 1 else ""
            if not recs:
                o_txt.append(prefix + "none")
                continue
            if len(recs) <= 6:
                o_txt.append(prefix + _list([r[0] for r in recs]))
                v_txt.append(prefix + _list([r[1] for r in recs]))
            else:
                o_txt.append(f"{prefix}{jtext(recs[0][0], 40)}–{jtext(recs[-1][0], 40)} ({len(recs)} records)")
                v_txt.append(f"{prefix}{jtext(recs[0][1], 40)} … {jtext(recs[-1][1], 40)}")
                if k == p_w:
                    hits = [r for r in recs if _key(r[0]) in w_offsets or _key(r[1]) in w_values]
                    if hits:
                        v_txt.append("incl. " + _list([f"{r[0]}→{jtext(r[1], 40)}" for r in hits]))
            if k == p_w and any(_key(r[0]) in w_offsets or _key(r[1]) in w_values for r in recs):
                hl = True
        offsets, values = "; ".join(o_txt), "; ".join(v_txt)
    elif f == "sample" and isinstance(v, dict) and isinstance(v.get("partitions"), dict):
        states = {_key(as_partition(k)): s for k, s in v["partitions"].items()}
        keys = [p_w] if p_w in states else list(states)[:4]
        parts = _list(keys)
        bits = []
        for k in keys:
            st = states[k]
            txt = sample_text(st) if isinstance(st, dict) else jtext(st, 80)
            bits.append(txt if len(keys) == 1 else f"p{k}: {txt}")
        if v.get("controller") is not None:
            c = v.get("controller")
            bits.append(f"controller {'n' + str(c) if isinstance(c, int) else jtext(c, 20)}")
        values = "; ".join(bits)
    elif f == "txn" and isinstance(v, list):
        bits = []
        for m in v:
            if isinstance(m, list) and m[:1] == ["send"] and len(m) >= 3:
                bits.append(f"send p{jtext(m[1], 20)} {jtext(m[2], 40)}@{jtext(m[3] if len(m) > 3 else None, 20) or '?'}")
                hl = hl or (_key(as_partition(m[1])) == p_w and (_key(m[2]) in w_values
                                                                 or len(m) > 3 and _key(m[3]) in w_offsets))
            elif isinstance(m, list) and m[:1] == ["poll"]:
                recs = m[1] if len(m) > 1 and isinstance(m[1], dict) else {}
                reads = [f"p{k}: " + _list([f"{r[0]}→{r[1]}" for r in rs if isinstance(r, list) and len(r) == 2])
                         for k, rs in recs.items() if isinstance(rs, list) and rs]
                bits.append("poll " + ("; ".join(reads) if reads else "none"))
                hl = hl or any(_key(as_partition(k)) == p_w and any(
                    isinstance(r, list) and len(r) == 2 and (_key(r[0]) in w_offsets or _key(r[1]) in w_values)
                    for r in rs) for k, rs in recs.items() if isinstance(rs, list))
        values = jtext(" | ".join(bits), 240)
        if op.get("isolation"):
            values += f" ({jtext(op.get('isolation'), 40)})"
    elif v is not None:
        values = jtext(v, 160)
    done, invoked = secs(op.get("time"), origin), secs(op.get("invoke_time"), origin)
    return {
        "index": jtext(op.get("index") if op.get("index") is not None else op.get("invoke_index"), 20),
        "time": done or (invoked + " (invoked)" if invoked else ""),
        "invoked": invoked if done and invoked and invoked != done else "",
        "process": jtext(op.get("process"), 30),
        "type": jtext(op.get("type"), 20),
        "f": jtext(f, 40),
        "partition": parts,
        "offsets": offsets,
        "vals": values,
        "error": jtext(op.get("error"), MAX_TEXT),
        "node": jtext(op.get("node"), 60),
        "hl": hl,
        "drain": bool(op.get("drain")),
    }


def fault_text(fault: Any, since: str = "since", origin: float = 0.0) -> tuple[str, str | None]:
    """(text, colour) for one active fault of a witness context."""
    if isinstance(fault, dict):
        f = fault.get("f") or fault.get("fault") or fault.get("kind") or ""
        value = fault.get("value")
        parts = [str(f)]
        if isinstance(value, dict):
            nodes = value.get("nodes")
            if nodes:
                parts.append("on " + (", ".join(map(str, nodes)) if isinstance(nodes, list) else str(nodes)))
            rest = {k: x for k, x in value.items() if k not in ("nodes", "color")}
            if rest:
                parts.append(jtext(rest, 160))
        elif value is not None:
            parts.append(jtext(value, 160))
        if isinstance(fault.get("time"), (int, float)):
            parts.append(f"{since} {secs(fault['time'], origin)} s")
        if isinstance(fault.get("healed_time"), (int, float)):
            parts.append(f"(healed at {secs(fault['healed_time'], origin)} s)")
        _, kind = fault_boundary(f, value if isinstance(value, dict) else {"fault": fault.get("fault")})
        color = (safe_color(value.get("color")) if isinstance(value, dict) else None) or \
            (default_color(kind) if kind else None)
        return " ".join(p for p in parts if p), color
    return jtext(fault, 200), None


def _broker(b: Any) -> str:
    return f"n{b}" if isinstance(b, int) and not isinstance(b, bool) else (jtext(b, 40) or "none")


def sample_text(st: dict[str, Any]) -> str:
    """``leader n1, ISR [n1, n2], epoch 3`` (broker id k runs on node nk)."""
    bits = []
    if "leader" in st:
        bits.append(f"leader {_broker(st.get('leader'))}")
    if "isr" in st:
        isr = st.get("isr")
        bits.append("ISR [" + (", ".join(_broker(b) for b in isr) if isinstance(isr, list) else jtext(isr, 80)) + "]")
    if st.get("epoch") is not None:
        bits.append(f"epoch {jtext(st.get('epoch'), 20)}")
    return ", ".join(bits)


_SAMPLE_KEYS = ("sample", "last_sample", "partition_state", "metadata", "leader_isr")
_FAULT_KEYS = ("faults", "active_faults", "nemesis")
_RECENT_KEYS = ("recent_nemesis", "recent_faults", "recent")


def context_items(ctx: Any, origin: float = 0.0) -> dict[str, Any]:
    """Witness context as {"faults": [(text, colour)], "state": text, "other": [(key, text)]}.

    Accepts ``faults`` (list of nemesis ops ``{f, value, time?}`` or strings)
    and a sample (``sample``: ``{leader, isr, epoch, controller?, time?}``, or
    those keys directly in the context); anything else is shown as JSON.
    """
    out: dict[str, Any] = {"faults": [], "recent": [], "state": "", "view": "", "sampled_at": "", "other": [],
                           "has_faults_key": False}
    if not isinstance(ctx, dict):
        if ctx is not None:
            out["other"].append(("context", jtext(ctx)))
        return out
    rest = dict(ctx)
    for k in _FAULT_KEYS:
        if k in rest:
            out["has_faults_key"] = True
            fs = rest.pop(k)
            fs = fs if isinstance(fs, list) else [fs] if fs else []
            out["faults"] += [fault_text(x, origin=origin) for x in fs]
    for k in _RECENT_KEYS:
        if k in rest:
            rs = rest.pop(k)
            rs = rs if isinstance(rs, list) else [rs] if rs else []
            out["recent"] += [fault_text(x, since="at", origin=origin) for x in rs]
    sample = None
    for k in _SAMPLE_KEYS:
        if k in rest and (rest[k] is None or isinstance(rest[k], dict)):
            sample = rest.pop(k)
            if sample is not None:
                break
    if sample is None and any(k in rest for k in ("leader", "isr", "epoch")):
        sample = {k: rest.pop(k) for k in ("leader", "isr", "epoch", "controller", "sample_time") if k in rest}
    if sample is not None:
        bits = [sample_text(sample)] if any(k in sample for k in ("leader", "isr", "epoch")) else []
        if sample.get("controller") is not None:
            c = sample.get("controller")
            bits.append(f"controller {'n' + str(c) if isinstance(c, int) else jtext(c, 20)}")
        others = {k: v for k, v in sample.items()
                  if k not in ("leader", "isr", "epoch", "controller", "time", "sample_time", "index")}
        if others:
            bits.append(jtext(others, 160))
        out["view"] = ", ".join(bits)          # the leader/ISR view, without when it was sampled
        t = sample.get("time", sample.get("sample_time"))
        if isinstance(t, (int, float)):
            out["sampled_at"] = secs(t, origin)
            bits.insert(len(bits) - (1 if others else 0), f"sampled at {secs(t, origin)} s")
        out["state"] = ", ".join(bits)
    for k, v in rest.items():
        out["other"].append((jtext(k, 60), jtext(v)))
    return out


def context_key(ctx: dict[str, Any]) -> tuple[Any, ...]:
    """What witnesses sharing one context header must agree on: the active
    faults, the recent nemesis ops, the leader/ISR view (not its sample time)
    and any other context field."""
    return (tuple(ctx["faults"]), tuple(ctx["recent"]), ctx["view"], tuple(ctx["other"]), ctx["has_faults_key"])


def group_witnesses(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive witness views sharing a context, as [{context, witnesses, first}]
    (``first``: the 1-based number of the group's first witness)."""
    groups: list[dict[str, Any]] = []
    for i, v in enumerate(views):
        key = context_key(v["context"])
        if groups and groups[-1]["key"] == key:
            groups[-1]["witnesses"].append(v)
        else:
            groups.append({"key": key, "context": v["context"], "witnesses": [v], "first": i + 1})
    return groups


def witness_view(w: dict[str, Any], max_ops: int = 50, origin: float = 0.0) -> dict[str, Any]:
    """A witness as display strings; times in seconds since the workload's
    start ``origin`` (s on the history's clock)."""
    p = w.get("partition")
    offs = w.get("offsets") if isinstance(w.get("offsets"), list) else []
    vals = w.get("values") if isinstance(w.get("values"), list) else []
    w_offs = {_key(o) for o in offs}
    w_vals = {_key(v) for v in vals}
    ops = [o for o in (w.get("ops") or []) if isinstance(o, dict)]
    rows = [op_row(o, p, w_offs, w_vals, origin) for o in ops[:max_ops]]
    extra = {k: jtext(v) for k, v in w.items()
             if k not in ("partition", "offsets", "values", "ops", "context", "cycle")}
    return {
        "partition": jtext(p, 40),
        "offsets": _list(offs) if offs else "",
        "vals": _list(vals) if vals else "",
        "rows": rows,
        "more_ops": max(0, len(ops) - max_ops),
        "context": context_items(w.get("context"), origin),
        "extra": extra,
        "cycle": cycle_text(w.get("cycle")),
    }


def cycle_text(steps: Any) -> str:
    """A dependency cycle witness (checkers/txn.py) as one line: op ids joined
    by their edges, each ww/wr edge with the partition and offset giving it."""
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
        return ""
    out = [f"#{jtext(steps[0].get('from'), 20)}"]
    for s in steps:
        where = f" p{jtext(s.get('partition'), 20)}@{jtext(s.get('offset'), 20)}" if s.get("partition") is not None else ""
        out.append(f"—{jtext(s.get('kind'), 20)}{where}→ #{jtext(s.get('to'), 20)}")
    return " ".join(out)
