"""Slow and lossy links without ``sch_netem``: iptables for loss, an NFQUEUE
delayer for delay, jitter and reordering.

For kernels built without netem (and without prio), on a node with NET_ADMIN:

* **loss**: chain ``KCHAOS-LOSS``, hooked first into OUTPUT, one rule per
  shaped link, ``-d ADDR/32`` (or ``-o DEV`` for "all") ``-m statistic
  --mode random --probability p -j DROP``: the node's packets to the link's
  other end, as netem drops them;
* **delay**: chain ``KCHAOS-DELAY``, hooked first into mangle INPUT (so
  a released packet still meets the partition chain in filter INPUT), ``-s ADDR/32``
  (or ``-i DEV``) ``-j NFQUEUE --queue-num 19267 --queue-bypass``, and the
  delayer (``nemesis/netem_delayer.py``, put on the node at each start and
  run with python3) holding each packet for delay ± jitter. The delay is on
  what the node *receives* on the link, not what it sends: a packet held in
  OUTPUT still counts against its TCP socket's small-queue budget, so one
  flow would crawl at about two segments per delay (measured: 0.03 MB/s at
  200 ms, against 7 MB/s held in INPUT). Every round trip over the link
  still crosses the delay once. ``--queue-bypass`` lets packets through if
  the delayer is gone.

Healing unhooks, flushes and deletes both chains, then SIGTERMs the delayer
(which lets its held packets go) and SIGKILLs it if it lingers; it needs no
state and is part of ``nemesis.netem.heal_script``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from infra.node import Node, shell_join

LOSS_CHAIN = "KCHAOS-LOSS"
DELAY_CHAIN = "KCHAOS-DELAY"
# (table, built-in chain, our chain). The delay sits in mangle, whose INPUT runs
# before filter's: a packet the delayer accepts leaves the table it was queued
# in, and must still meet the partition chain (filter INPUT).
HOOKS = (("filter", "OUTPUT", LOSS_CHAIN), ("mangle", "INPUT", DELAY_CHAIN))
QUEUE = 0x4B43  # 19267
DELAYER_SOURCE = Path(__file__).with_name("netem_delayer.py")
DELAYER_PATH = "/usr/local/lib/kchaos/netem_delayer.py"
PID_FILE = "/run/kchaos-netem-delayer.pid"
STATS_FILE = "/run/kchaos-netem-delayer.stats"
LOG_FILE = "/var/log/kchaos-netem-delayer.log"
# A regex that matches the delayer's command line but not a shell whose
# script names it (pgrep -f would find the heal script itself).
DELAYER_PATTERN = "[n]etem_delayer.py --queue"
MAX_HELD = 10_000


class DelayerFailed(RuntimeError):
    """The delayer did not bind its queue on a node (no python3, no nfnetlink_queue)."""


def _ipt(table: str, *args: str) -> str:
    return shell_join(["iptables", "-w", "-t", table, *args])


def _table(chain: str) -> str:
    return next(t for t, _, c in HOOKS if c == chain)


def rule_args(loss_pct: float, delay_ms: float, destinations: Sequence[str] | None) -> list[list[str]]:
    """The rules, as iptables arguments after ``-A``: loss rules (``KCHAOS-LOSS``)
    then delay rules (``KCHAOS-DELAY``). ``destinations`` None means every
    packet on the interface in ``$dev`` (the script resolves it)."""
    def match(addr: str | None, way: str) -> list[str]:
        if addr is None:
            return ["-o" if way == "out" else "-i", "$dev"]
        return ["-d" if way == "out" else "-s", f"{addr}/32"]

    targets: list[str | None] = [None] if destinations is None else list(destinations)
    rules: list[list[str]] = []
    if loss_pct:
        p = f"{min(1.0, loss_pct / 100):.10g}"
        rules += [[LOSS_CHAIN, *match(a, "out"), "-m", "statistic", "--mode", "random", "--probability", p,
                   "-j", "DROP"] for a in targets]
    if delay_ms:
        rules += [[DELAY_CHAIN, *match(a, "in"), "-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]
                  for a in targets]
    return rules


def _rule_line(args: list[str]) -> str:
    # "$dev" stays a shell variable; the rest is quoted.
    return " ".join(["iptables", "-w", "-t", _table(args[0]), "-A"] +
                    [a if a == "$dev" else shell_join([a]) for a in args])


def install_script(rules: list[list[str]]) -> str:
    """Shell script: create both chains, hook each first into its built-in
    chain once, append ``rules``. The caller healed the node before."""
    lines = ["set -e"]
    for table, hook, chain in HOOKS:
        lines += [f"{_ipt(table, '-N', chain)} 2>/dev/null || {_ipt(table, '-F', chain)}",
                  f"{_ipt(table, '-C', hook, '-j', chain)} 2>/dev/null || {_ipt(table, '-I', hook, '-j', chain)}"]
    lines += [_rule_line(r) for r in rules]
    return "\n".join(lines)


def heal_script() -> str:
    """Shell script: unhook, flush and delete both chains; stop the delayer
    (SIGTERM, then SIGKILL after 3 s); fails if a chain or the delayer is left."""
    lines = ["rc=0", "if command -v iptables >/dev/null 2>&1; then"]
    for t, hook, chain in HOOKS:
        lines += [
            f"  n=0; while {_ipt(t, '-D', hook, '-j', chain)} 2>/dev/null && [ $n -lt 20 ]; do n=$((n+1)); done",
            f"  {_ipt(t, '-F', chain)} 2>/dev/null || true",
            f"  {_ipt(t, '-X', chain)} 2>/dev/null || true",
            f"  if {_ipt(t, '-n', '-L', chain)} >/dev/null 2>&1; then echo 'chain {chain} still present' >&2; rc=1; fi",
        ]
    pattern = shell_join([DELAYER_PATTERN])
    lines += [
        "fi",
        f"pids=\"$(cat {PID_FILE} 2>/dev/null) $(pgrep -f {pattern} 2>/dev/null)\"",
        "pids=$(for p in $pids; do kill -0 \"$p\" 2>/dev/null && echo \"$p\"; done | sort -u)",
        "alive() { for p in $pids; do kill -0 \"$p\" 2>/dev/null && return 0; done; return 1; }",
        "if [ -n \"$pids\" ]; then",
        "  kill -TERM $pids 2>/dev/null || true",
        "  i=0; while [ $i -lt 30 ] && alive; do sleep 0.1; i=$((i+1)); done",
        "  kill -KILL $pids 2>/dev/null || true",
        "fi",
        f"rm -f {PID_FILE}",
        f"if pgrep -f {pattern} >/dev/null 2>&1; then echo 'netem delayer still running' >&2; rc=1; fi",
        "exit $rc",
    ]
    return "\n".join(lines)


def delayer_argv(delay_ms: float, jitter_ms: float, reorder_pct: float, seed: int | None) -> list[str]:
    argv = ["python3", DELAYER_PATH, "--queue", str(QUEUE), "--delay-ms", f"{delay_ms:g}",
            "--jitter-ms", f"{jitter_ms:g}", "--reorder-pct", f"{reorder_pct:g}", "--max-held", str(MAX_HELD),
            "--pid-file", PID_FILE, "--stats-file", STATS_FILE]
    return argv + (["--seed", str(seed)] if seed is not None else [])


def start_delayer(node: Node, argv: list[str], timeout_s: float = 15.0) -> int:
    """Put the delayer on the node, start it detached, wait until it has bound
    the queue (its pid file); its pid. DelayerFailed (one line) otherwise."""
    if node.run(["sh", "-c", "command -v python3"], check=False, timeout=30).exit != 0:
        raise DelayerFailed("kchaos: no python3 on the node: the NFQUEUE delayer needs it (loss alone does not)")
    node.put(DELAYER_SOURCE, DELAYER_PATH)
    node.run(["sh", "-c", f"rm -f {PID_FILE}; : > {LOG_FILE}"], timeout=30)
    node.run(["setsid", "sh", "-c", f"exec {shell_join(argv)} >> {LOG_FILE} 2>&1"], detach=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = node.run(["sh", "-c", f"cat {PID_FILE} 2>/dev/null; pgrep -f {shell_join([DELAYER_PATTERN])} "
                                    ">/dev/null || echo gone"], check=False, timeout=30).out.split()
        if out and out[0].isdigit():
            return int(out[0])
        if "gone" in out:
            time.sleep(0.3)  # the log is written before exit; one more look at the pid file
            if node.run(["test", "-s", PID_FILE], check=False, timeout=30).exit != 0:
                tail = node.run(["sh", "-c", f"tail -n 1 {LOG_FILE}"], check=False, timeout=30).out.strip()
                raise DelayerFailed(tail or "kchaos: the NFQUEUE delayer exited at once")
        time.sleep(0.2)
    raise DelayerFailed(f"kchaos: the NFQUEUE delayer did not bind queue {QUEUE} within {timeout_s:g} s")


def install(node: Node, loss_pct: float, delay_ms: float, jitter_ms: float, reorder_pct: float,
            destinations: Sequence[str] | None, dev_line: str, seed: int | None) -> int | None:
    """Start the delayer (when there is a delay), then the rules; the delayer's
    pid or None. The node must be healed before; on failure the caller heals."""
    pid = start_delayer(node, delayer_argv(delay_ms, jitter_ms, reorder_pct, seed)) if delay_ms else None
    script = (dev_line + "\n" if destinations is None else "") + install_script(
        rule_args(loss_pct, delay_ms, destinations))
    node.run(["sh", "-c", script], timeout=30)
    return pid


def chains(node: Node) -> dict[str, list[str]]:
    """Our chains' rules on a node (``iptables -S`` lines), only the chains present."""
    out: dict[str, list[str]] = {}
    for table, _, chain in HOOKS:
        res = node.run(["iptables", "-w", "-t", table, "-S", chain], check=False, timeout=30)
        if res.exit == 0:
            out[chain] = [line for line in res.out.splitlines() if line.startswith("-A ")]
    return out


def delayer_pids(node: Node) -> list[int]:
    res = node.run(["pgrep", "-f", DELAYER_PATTERN], check=False, timeout=30)
    return [int(p) for p in res.out.split() if p.isdigit()]


def delayer_stats(node: Node) -> dict[str, int] | None:
    res = node.run(["cat", STATS_FILE], check=False, timeout=30)
    return json.loads(res.out) if res.exit == 0 and res.out.strip() else None
