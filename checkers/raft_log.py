"""Kafka's own Raft log: do the controllers' metadata logs agree, and does the
quorum keep committing? (docs/design.md, "Quorum membership").

``raft-log.jsonl`` (written by harness/record_collector.py): a header
``{"kchaos-raft-log": 1, "high_watermark", "status_before", "status_after",
"replication", "errors"}``, then one line per controller ``{"node",
"log_start_offset", "end_offset", "snapshots", "entries": [[offset, epoch,
digest], ...]}``, every record of its ``__cluster_metadata`` log.

Raft's safety promise is about committed entries: below the high watermark
every replica that holds an offset holds the same entry. Above it a replica
may hold entries of a leader that lost its term, which the next leader
truncates: divergence there is legal and never an anomaly. The committed
offset is the high watermark ``describe --status`` reported when the logs
were read (``high_watermark``); without one, the end of the newest snapshot
any controller holds (snapshots are only taken of committed entries), and
without that, no offset is judged. Standard library only, pure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RAFT_LOG_FILE = "raft-log.jsonl"


@dataclass
class RaftListing:
    node: str
    log_start_offset: int | None
    end_offset: int | None
    entries: dict[int, tuple[int | None, str]]     # offset -> (batch leader epoch, digest)
    snapshots: list[str] = field(default_factory=list)


@dataclass
class RaftLog:
    listings: list[RaftListing]
    high_watermark: int | None = None
    status_before: dict[str, Any] = field(default_factory=dict)
    status_after: dict[str, Any] = field(default_factory=dict)
    replication: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Divergence:
    """Two controllers hold different entries at ``offset``, below the committed offset."""

    offset: int
    nodes: tuple[str, str]
    entries: tuple[tuple[int | None, str], tuple[int | None, str]]


def snapshot_end(name: str) -> int | None:
    """``00000000000000001234-0000000005.checkpoint`` -> 1234 (the snapshot holds offsets below it)."""
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def committed_offset(log: RaftLog) -> tuple[int | None, str]:
    """The offset below which entries are committed, and where it came from."""
    if log.high_watermark is not None:
        return log.high_watermark, "high watermark (describe --status)"
    ends = [e for l in log.listings for s in l.snapshots if (e := snapshot_end(s))]
    if ends:
        return max(ends), "newest snapshot"
    return None, "none: no high watermark and no snapshot"


def divergences(listings: list[RaftListing], committed: int | None) -> list[Divergence]:
    """Every (offset, pair of controllers) whose entries differ on an offset
    both hold below ``committed``; none when nothing is known committed."""
    if committed is None:
        return []
    out: list[Divergence] = []
    ordered = sorted(listings, key=lambda l: l.node)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            for offset in sorted(set(a.entries) & set(b.entries)):
                if offset < committed and a.entries[offset] != b.entries[offset]:
                    out.append(Divergence(offset, (a.node, b.node), (a.entries[offset], b.entries[offset])))
    return out


def keeps_committing(log: RaftLog) -> bool | None:
    """Whether the high watermark moved on between the two describes taken
    around the reading (KRaft's leader appends a no-op record every
    metadata.max.idle.interval.ms, so a live quorum always commits); None when
    either describe failed."""
    before, after = log.status_before.get("high_watermark"), log.status_after.get("high_watermark")
    if before is None or after is None:
        return None
    return after > before


def _voter_ids(status: dict[str, Any]) -> list[int]:
    return sorted(int(v["id"]) for v in status.get("voters") or [])


def judge(log: RaftLog, max_witnesses: int = 10) -> dict[str, Any]:
    """The summary a report shows: the committed offset, the offsets compared,
    the divergences below it (the anomaly), and whether the quorum kept committing."""
    committed, source = committed_offset(log)
    found = divergences(log.listings, committed)
    compared = 0 if committed is None else len({o for l in log.listings for o in l.entries if o < committed})
    return {"committed_offset": committed, "committed_source": source, "offsets_compared": compared,
            "controllers": sorted(l.node for l in log.listings),
            "end_offsets": {l.node: l.end_offset for l in sorted(log.listings, key=lambda l: l.node)},
            "divergences": len(found),
            "witnesses": [{"offset": d.offset, "nodes": list(d.nodes), "entries": [list(e) for e in d.entries]}
                          for d in found[:max_witnesses]],
            "keeps_committing": keeps_committing(log),
            # the two describes around the reading, for the report's words on them
            "high_watermarks": [log.status_before.get("high_watermark"), log.status_after.get("high_watermark")],
            "voters_before": _voter_ids(log.status_before),
            "voters": _voter_ids(log.status_after),
            "errors": dict(log.errors)}


def load(run_dir: Path) -> RaftLog | None:
    """The stored raft-log.jsonl of a run, or None when none was stored."""
    path = Path(run_dir) / RAFT_LOG_FILE
    if not path.exists():
        return None
    head: dict[str, Any] = {}
    listings: list[RaftListing] = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines()):
        if not line.strip():
            continue
        obj = json.loads(line)
        if n == 0 and "kchaos-raft-log" in obj:
            head = obj
            continue
        listings.append(RaftListing(str(obj["node"]), obj.get("log_start_offset"), obj.get("end_offset"),
                                    {int(o): (e, str(d)) for o, e, d in obj.get("entries") or []},
                                    list(obj.get("snapshots") or [])))
    return RaftLog(listings, head.get("high_watermark"), head.get("status_before") or {},
                   head.get("status_after") or {}, head.get("replication") or [], head.get("errors") or {})
