"""A dynamic KRaft quorum (KIP-853) through Kafka's own tools: the voter set at
format time, and ``kafka-metadata-quorum`` (``MetadataQuorumCommand``) to
describe it and to add or remove a controller (docs/design.md, "Quorum membership").

The tool runs on a node through ``Node.run``, as the reassignment tool does;
parsing its text is pure. ``add-controller`` must run on the controller being
added: the tool reads that node's id, listeners and metadata directory id from
its config and its ``meta.properties``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from broker.config import CONFIG_PATH, CONTROLLER_PORT, DATA_DIR, broker_id
from infra.distribution import KAFKA_LIB
from infra.errors import OutputLost
from infra.node import CommandResult, Node, run_read

QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
META_PROPERTIES = f"{DATA_DIR}/meta.properties"
TOOL_TIMEOUT_S = 60.0
NO_INITIAL_CONTROLLERS = "--no-initial-controllers"


@dataclass(frozen=True)
class ToolAnswer:
    """What the tool said: its exit status, on which node, and its output."""

    node: str
    exit: int
    text: str

    @property
    def ok(self) -> bool:
        return self.exit == 0

    def summary(self, limit: int = 500) -> str:
        """One line: exit status and the lines that say what happened (stack frames left out)."""
        keep = [l.strip() for l in self.text.splitlines() if l.strip() and not l.lstrip().startswith("at ")]
        return f"exit {self.exit} on {self.node}: {' | '.join(keep)[:limit] or 'no output'}"


def initial_controllers(voters: Sequence[tuple[str, str, str]]) -> str:
    """StorageTool's ``--initial-controllers`` value for (node name, address,
    directory id) triples: ``id@host:port:directory``, comma separated."""
    return ",".join(f"{broker_id(name)}@{address}:{CONTROLLER_PORT}:{directory}" for name, address, directory in voters)


def controller_bootstrap(addresses: Sequence[str]) -> str:
    return ",".join(f"{a}:{CONTROLLER_PORT}" for a in addresses)


def parse_meta_properties(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (l.partition("=") for l in text.splitlines())
            if k.strip() and not k.startswith("#")}


def parse_status(text: str) -> dict[str, Any]:
    """``describe --status`` -> {"leader_id", "leader_epoch", "high_watermark",
    "voters": [{"id", "directoryId", ...}], "observers": [...]} (keys absent
    when the tool did not print them)."""
    out: dict[str, Any] = {}
    ints = {"LeaderId": "leader_id", "LeaderEpoch": "leader_epoch", "HighWatermark": "high_watermark",
            "MaxFollowerLag": "max_follower_lag"}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        key, rest = key.strip(), rest.strip()
        if key in ints and re.fullmatch(r"-?\d+", rest):
            out[ints[key]] = int(rest)
        elif key in ("CurrentVoters", "CurrentObservers"):
            try:
                out["voters" if key == "CurrentVoters" else "observers"] = json.loads(rest)
            except ValueError:
                out.setdefault("unparsed", []).append(line.strip())
    return out


def parse_replication(text: str) -> list[dict[str, str]]:
    """``describe --replication`` (a header row, then one row per replica) -> rows as dicts."""
    rows = [l.split() for l in text.splitlines() if l.strip()]
    head = next((i for i, r in enumerate(rows) if r and r[0] == "NodeId"), None)
    if head is None:
        return []
    names = rows[head]
    return [dict(zip(names, r)) for r in rows[head + 1:] if len(r) >= len(names) and r[0].lstrip("-").isdigit()]


def _argv(bootstrap: str, *args: str) -> list[str]:
    return ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF",
            "-cp", f"{KAFKA_LIB}/*", QUORUM_TOOL, "--bootstrap-controller", bootstrap, *args]


def _answer(node: Node, res: CommandResult) -> ToolAnswer:
    return ToolAnswer(node.name, res.exit, (res.out + "\n" + res.err).strip())


def _tool(node: Node, bootstrap: str, *args: str, timeout: float = TOOL_TIMEOUT_S) -> ToolAnswer:
    return _answer(node, node.run(_argv(bootstrap, *args), check=False, timeout=timeout))


def describe(node: Node, bootstrap: str, what: str = "status") -> ToolAnswer:
    """``describe --status`` or ``describe --replication``, asked of the controllers at ``bootstrap``;
    its output read whole (infra.node.run_read), else an answer that says it was lost (exit -1)."""
    try:
        return _answer(node, run_read(node, _argv(bootstrap, "describe", f"--{what}"), timeout=TOOL_TIMEOUT_S))
    except OutputLost as exc:
        return ToolAnswer(node.name, -1, str(exc))


def add_controller(node: Node, bootstrap: str) -> ToolAnswer:
    """``add-controller`` with ``node``'s own config (run on the controller being added)."""
    return _tool(node, bootstrap, "--command-config", CONFIG_PATH, "add-controller")


def remove_controller(node: Node, bootstrap: str, controller_id: int, directory_id: str) -> ToolAnswer:
    return _tool(node, bootstrap, "remove-controller", "--controller-id", str(controller_id),
                 "--controller-directory-id", directory_id)


def directory_id(node: Node) -> str | None:
    """The metadata directory id in the node's ``meta.properties`` (None when not formatted)."""
    res = node.run(["cat", META_PROPERTIES], check=False, timeout=15)
    return parse_meta_properties(res.out).get("directory.id") if res.exit == 0 else None
