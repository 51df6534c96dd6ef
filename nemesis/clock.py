"""Clock skew through libfaketime, which every broker JVM preloads.

The JVM reads its offset from FAKETIME_FILE (re-read about every 2 s), so
the nemesis only rewrites that file: ``+3600s`` puts the node an hour ahead,
``+0s`` is true time. The file is replaced by rename so a reader never sees
it half written. A strobe is a detached shell loop on the node (named
``kchaos-strobe``) flipping the file between two offsets; it stops by itself
after its duration and is killed by any reset or bump on that node.

libfaketime compares its cache age in whole seconds and strictly
(``now - last_read > FAKETIME_CACHE_DURATION``), so with a duration of 1 it
re-reads the file about every 2 s: a change takes up to ~2 s to show, and a
strobe period must be at least MIN_STROBE_PERIOD_S or the JVM, sampling at the
same rhythm, may see only one of the two offsets.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from broker.config import FAKETIME_FILE
from history.ops import ACTION_START, ACTION_STOP
from infra.errors import UsageError
from infra.node import Node, shell_join
from nemesis.protocol import NemesisContext, Op, completed, each, node_names, resolve_nodes
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

FAULT = "clock"
BUMP, STROBE, RESET = "bump-clock", "strobe-clock", "reset-clock"
STROBE_MARK = "kchaos-strobe"
# A regex that matches the loop's command line but not the pkill/timeout
# command lines that carry the pattern itself.
STROBE_PATTERN = "kchaos[-]strobe"
MIN_STROBE_PERIOD_S = 2.0


def offset_text(offset_s: float) -> str:
    """libfaketime's relative offset: +3600s, -120s, +0s."""
    return f"{int(round(offset_s)):+d}s"


def parse_offset(text: str) -> int | None:
    t = text.strip()
    if not t.endswith("s"):
        return None
    try:
        return int(float(t[:-1]))
    except ValueError:
        return None


def _write(offset: str) -> str:
    d = FAKETIME_FILE.rsplit("/", 1)[0]
    return (f"mkdir -p {d} && printf '%s\\n' {shell_join([offset])} > {FAKETIME_FILE}.tmp "
            f"&& mv -f {FAKETIME_FILE}.tmp {FAKETIME_FILE}")


def _stop_strobe() -> str:
    pattern = shell_join([STROBE_PATTERN])
    return (f"pkill -KILL -f {pattern} 2>/dev/null; i=0; "
            f"while pgrep -f {pattern} >/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; "
            "sleep 0.1")


def set_offset(node: Node, offset_s: float) -> str:
    """Stop any strobe on the node and write the offset; returns the text written."""
    text = offset_text(offset_s)
    node.run(["sh", "-c", f"{_stop_strobe()}; {_write(text)}"], timeout=30)
    return text


def read_offset(node: Node) -> str | None:
    res = node.run(["cat", FAKETIME_FILE], check=False, timeout=15)
    return res.out.strip() if res.exit == 0 else None


def strobe_running(node: Node) -> bool:
    return node.run(["pgrep", "-f", STROBE_PATTERN], check=False, timeout=15).exit == 0


def strobe_script(offsets_s: Sequence[float], period_s: float, duration_s: float) -> str:
    a, b = (offset_text(o) for o in offsets_s)
    return (f"end=$(( $(date +%s) + {max(1, int(duration_s))} )); "
            f"while [ \"$(date +%s)\" -lt \"$end\" ]; do "
            f"{_write(a)}; sleep {period_s:.3f}; {_write(b)}; sleep {period_s:.3f}; done; "
            f"{_write(offset_text(0))}")


def start_strobe(node: Node, offsets_s: Sequence[float], period_s: float, duration_s: float) -> None:
    node.run(["sh", "-c", f"{_stop_strobe()}; {_write(offset_text(offsets_s[0]))}"], timeout=30)
    node.run(["sh", "-c", strobe_script(offsets_s, period_s, duration_s), STROBE_MARK], detach=True)


def reset_node(node: Node) -> None:
    set_offset(node, 0)


class ClockNemesis:
    """``bump-clock`` (value: ``offset_s``, the node's new offset from true time,
    plus target keys), ``strobe-clock`` (``offsets_s`` [a, b], ``period_s``,
    ``duration_s``, target keys), ``reset-clock`` (every node back to +0s)."""

    fs = frozenset({BUMP, STROBE, RESET})

    def __init__(self, ctx: NemesisContext | None = None) -> None:
        # Given a context here, the nemesis can act without setup() (which heals).
        self.ctx = ctx

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx
        each(reset_node, ctx.cluster.nodes, key=lambda n: n.name)

    def _targets(self, value: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        nodes, details = resolve_nodes(self.ctx, value)
        for key in ("seed", "node_index"):
            if value.get(key) is not None:
                details[key] = value[key]
        return nodes, {k: v for k, v in details.items() if v is not None or k in ("leader", "controller")}

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        cluster = self.ctx.cluster
        f = op["f"]
        if f == BUMP:
            offset = int(round(float(value.get("offset_s", 0))))
            nodes, details = self._targets(value)
            results, errors = each(lambda n: set_offset(cluster.node(n), offset), nodes)
            return completed(op, {"fault": FAULT, **details, "nodes": sort_nodes(results),
                                  "offset_s": offset}, errors, action=ACTION_START)
        if f == STROBE:
            offsets = [int(round(float(o))) for o in value.get("offsets_s", [0, 60])]
            if len(offsets) != 2:
                raise ValueError(f"strobe-clock takes two offsets, got {offsets}")
            period = float(value.get("period_s", 3.0))
            if period < MIN_STROBE_PERIOD_S:
                raise UsageError(f"strobe period {period}s is below {MIN_STROBE_PERIOD_S}s, which libfaketime "
                                 "cannot follow (it re-reads its offset about every 2 s)")
            duration = float(value.get("duration_s", 60.0))
            nodes, details = self._targets(value)
            results, errors = each(lambda n: start_strobe(cluster.node(n), offsets, period, duration), nodes)
            return completed(op, {"fault": FAULT, **details, "nodes": sort_nodes(results), "offsets_s": offsets,
                                  "period_s": period, "duration_s": duration}, errors, action=ACTION_START)
        if f == RESET:
            names = node_names(cluster)
            results, errors = each(lambda n: reset_node(cluster.node(n)), names)
            return completed(op, {"fault": FAULT, "nodes": sort_nodes(results), "offset_s": 0}, errors,
                             action=ACTION_STOP)
        raise ValueError(f"ClockNemesis cannot do {f!r}")

    def teardown(self) -> None:
        if self.ctx is not None:
            _, errors = each(reset_node, self.ctx.cluster.nodes, key=lambda n: n.name)
            if errors:
                log.warning("clock reset failed on %s", errors)
