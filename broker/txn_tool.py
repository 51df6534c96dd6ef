"""Kafka's own word on hanging transactions: ``kafka-transactions.sh find-hanging``
(KIP-664), run on a node with the distribution's jars at teardown, a second witness
beside the replicas' data files (docs/design.md, "Kafka's own record").

The tool asks broker ``broker_id`` (DescribeProducers) for every partition it leads
or follows and lists the open transactions older than ``--max-transaction-timeout``
minutes whose transactional id no coordinator reports ongoing: the hanging ones.
Parsing its table is pure (``parse_find_hanging``).
"""
from __future__ import annotations

from typing import Any, Sequence

from infra.distribution import KAFKA_LIB
from infra.errors import KchaosError
from infra.node import Node, run_read

TOOL_MAIN = "org.apache.kafka.tools.TransactionsCommand"
TOOL_TIMEOUT_S = 120.0
# minutes: the tool's floor for "older than the longest transaction timeout" (its default is 15)
MAX_TXN_TIMEOUT_MIN = 1
COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
           "LastTimestamp", "Duration(min)")


def find_hanging_argv(bootstrap: str, broker_id: int) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF",
            "-cp", f"{KAFKA_LIB}/*", TOOL_MAIN, "--bootstrap-server", bootstrap, "find-hanging",
            "--broker-id", str(broker_id), "--max-transaction-timeout", str(MAX_TXN_TIMEOUT_MIN)]


def parse_find_hanging(text: str) -> list[dict[str, Any]]:
    """The tool's table -> one dict per row, ints where they parse; no header, no rows."""
    lines = [l.split() for l in text.splitlines() if l.strip()]
    head = next((i for i, l in enumerate(lines) if l[:2] == ["Topic", "Partition"]), None)
    if head is None:
        return []
    names = lines[head]
    rows = []
    for cells in lines[head + 1:]:
        if len(cells) != len(names):
            continue
        rows.append({n: int(c) if c.lstrip("-").isdigit() else c for n, c in zip(names, cells)})
    return rows


def find_hanging(node: Node, bootstrap: str, broker_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Run the tool on ``node`` once per broker id: [{"broker", "exit", "rows", "out", "err"}]."""
    out = []
    for b in broker_ids:
        try:
            res = run_read(node, find_hanging_argv(bootstrap, b), timeout=TOOL_TIMEOUT_S)
            out.append({"broker": b, "exit": res.exit, "rows": parse_find_hanging(res.out) if res.exit == 0 else [],
                        "out": res.out[-4000:], "err": res.err[-2000:]})
        except KchaosError as exc:
            out.append({"broker": b, "exit": None, "rows": [], "out": "", "err": str(exc)})
    return out
