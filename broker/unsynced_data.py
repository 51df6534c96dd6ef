"""What a power loss takes from a broker's disk: every log byte never fsynced.

Kafka's partition logs are fsynced only (docs/design.md, "Power loss"):
- when a segment rolls: the old segments are flushed up to the new segment's
  base offset (``UnifiedLog.roll`` schedules ``flushUptoOffsetExclusive``);
- after an append that leaves ``flush.messages`` (``log.flush.interval.messages``,
  default Long.MAX) or more messages unflushed;
- by the log flusher, for logs unflushed for ``flush.ms`` (default Long.MAX:
  never), and on a clean shutdown.
The flushed point of each log (its recovery point) is written every
``log.flush.offset.checkpoint.interval.ms`` (60 s) to
``recovery-point-offset-checkpoint``. So, on default settings, what survives a
power loss is exactly every segment but the active one, plus the active
segment up to the checkpointed recovery point: the cut is
max(checkpoint, base offset of the active segment). With ``flush.messages=1``
every append is flushed and nothing is cut. Other flush settings flush at times
no file records; the cut is then the same bound and may take fsynced bytes too
(``exact`` false). The KRaft metadata log is not cut: its voters fsync after
every append (``KafkaRaftClient.flushLeaderLog`` / ``appendAsFollower``).

The pure part (``scan_batches``, ``parse_checkpoint``, ``plan_cut``) works on
bytes and names; ``power_cut`` applies it to a node whose broker is dead,
through the Node interface only (``run`` with find/truncate/rm, ``get`` for the
active segment: SSH hosts need not have Python).
"""
from __future__ import annotations

import re
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from broker.config import DATA_DIR
from infra.node import Node, shell_join

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
METADATA_LOG = "__cluster_metadata-0"
LONG_MAX = (1 << 63) - 1
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>[0-9]+)")
_SEGMENT = re.compile(r"(?P<base>[0-9]{20})\.log")
# A record batch (v2) or message-set entry (v0/v1) starts with baseOffset int64,
# batchLength int32 (bytes after this field); magic is byte 16 in every version.
_HEAD = struct.Struct(">qi")
_LOG_OVERHEAD = 12
_MAGIC_AT = 16
_V2_LAST_DELTA_AT = 23  # lastOffsetDelta int32
_V2_COUNT_AT = 57       # records count int32
_V2_HEADER = 61


class SegmentError(ValueError):
    """A segment's bytes are not a sequence of Kafka record batches."""


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    position: int  # byte position of the batch in its segment
    size: int      # bytes, header included
    records: int


def scan_batches(data: bytes) -> tuple[list[Batch], int]:
    """The batches of a segment file, in order, and the byte length they cover.

    Stops at a torn or zero-filled tail (a batch whose length runs past the end,
    or is too short to be one), as Kafka's recovery would.
    """
    batches: list[Batch] = []
    pos = 0
    n = len(data)
    while pos + _LOG_OVERHEAD <= n:
        base, length = _HEAD.unpack_from(data, pos)
        size = _LOG_OVERHEAD + length
        if length < _MAGIC_AT + 1 - _LOG_OVERHEAD or pos + size > n:
            break
        magic = data[pos + _MAGIC_AT]
        if magic == 2:
            if size < _V2_HEADER:
                break
            last = base + struct.unpack_from(">i", data, pos + _V2_LAST_DELTA_AT)[0]
            records = struct.unpack_from(">i", data, pos + _V2_COUNT_AT)[0]
        elif magic in (0, 1):
            # A (possibly compressed) message: its offset is its last inner offset.
            last, records = base, 1
        else:
            raise SegmentError(f"batch at byte {pos} has magic {magic}")
        if batches and base <= batches[-1].last_offset:
            raise SegmentError(f"batch at byte {pos} starts at offset {base}, not after {batches[-1].last_offset}")
        batches.append(Batch(base, last, pos, size, records))
        pos += size
    return batches, pos


def parse_checkpoint(text: str) -> dict[str, int]:
    """An offset checkpoint file (version 0: version, count, "topic partition
    offset" lines) as {partition dir name: offset}. Empty for a missing file."""
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        return {}
    if lines[0].strip() != "0":
        raise ValueError(f"unknown checkpoint version {lines[0].strip()!r}")
    out: dict[str, int] = {}
    for line in lines[2:]:
        topic, partition, offset = line.split()
        out[f"{topic}-{int(partition)}"] = int(offset)
    return out


def partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition log dir; None for the metadata log and
    for dirs being deleted, moved or set aside (``-delete``, ``-future``, ``-stray``)."""
    if name == METADATA_LOG:
        return None
    m = _PARTITION_DIR.fullmatch(name)
    return (m["topic"], int(m["partition"])) if m else None


def segment_base(file_name: str) -> int | None:
    m = _SEGMENT.fullmatch(file_name)
    return int(m["base"]) if m else None


@dataclass
class Cut:
    """What a power loss does to one partition log."""

    log: str                    # partition dir name, e.g. kchaos-0
    recovery_point: int         # from the checkpoint (0 when absent)
    active_base: int            # base offset of the active segment
    cut: int                    # first offset that may be lost
    log_end: int                # log end offset before the cut
    new_end: int                # log end offset after it
    records: int = 0            # records dropped
    bytes: int = 0              # bytes dropped
    exact: bool = True          # False when flush settings make the cut a lower bound
    truncate: tuple[str, int] | None = None         # (segment file, new size)
    delete: list[str] = field(default_factory=list)  # files to remove (index files, later snapshots)

    def record(self) -> dict[str, Any]:
        """The history's view: the offsets dropped, [from, to)."""
        out: dict[str, Any] = {"from": self.new_end, "to": self.log_end, "records": self.records,
                               "bytes": self.bytes, "recovery_point": self.recovery_point,
                               "active_base": self.active_base}
        if not self.exact:
            out["exact"] = False
        return out


def plan_cut(log: str, files: list[str], recovery_point: int, active: bytes, *,
             flushed_every_append: bool = False, exact: bool = True) -> Cut:
    """The cut of one partition log.

    ``files`` are the names in its dir, ``active`` the bytes of its active
    segment (the ``.log`` with the highest base offset), ``recovery_point`` its
    checkpointed recovery point. Batches that start before the cut are kept
    whole (a flush never ends inside a batch); nothing before the active
    segment is touched (it was flushed when it rolled).
    """
    bases = sorted(b for b in (segment_base(f) for f in files) if b is not None)
    if not bases:
        return Cut(log, recovery_point, 0, 0, 0, 0, exact=exact)
    active_base = bases[-1]
    batches, _ = scan_batches(active)
    log_end = batches[-1].last_offset + 1 if batches else active_base
    cut = log_end if flushed_every_append else max(recovery_point, active_base)
    kept = [b for b in batches if b.base_offset < cut]
    dropped = batches[len(kept):]
    position = kept[-1].position + kept[-1].size if kept else 0
    new_end = kept[-1].last_offset + 1 if kept else active_base
    out = Cut(log, recovery_point, active_base, cut, log_end, new_end, exact=exact,
              records=sum(b.records for b in dropped), bytes=len(active) - position)
    if position < len(active):
        name = f"{active_base:020d}"
        out.truncate = (f"{name}.log", position)
        out.delete = [f"{name}.index", f"{name}.timeindex"]
        out.delete += sorted(f for f in files if f.endswith(".snapshot") and f[:-9].isdigit()
                             and int(f[:-9]) > new_end)
    return out


# -- on a node ---------------------------------------------------------------------
@dataclass(frozen=True)
class FlushPolicy:
    """A topic's effective flush settings (``flush.messages``, ``flush.ms``)."""

    messages: int = LONG_MAX
    ms: int = LONG_MAX

    @property
    def every_append(self) -> bool:
        return self.messages <= 1

    @property
    def exact(self) -> bool:
        """Whether the cut is exactly what was never fsynced: flushes on roll only,
        or on every append."""
        return self.every_append or (self.messages == LONG_MAX and self.ms == LONG_MAX)


def listing_script(data_dir: str = DATA_DIR) -> str:
    """Print the recovery-point checkpoint, a separator, then "dir/file size" lines."""
    return (f"cat {shell_join([f'{data_dir}/{RECOVERY_CHECKPOINT}'])} 2>/dev/null; echo '--- files'; "
            f"find {shell_join([data_dir])} -mindepth 2 -maxdepth 2 -type f -printf '%P %s\\n'")


def parse_listing(out: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(checkpoint, {dir: {file: size}}) from the output of ``listing_script``."""
    head, _, files = out.partition("--- files")
    dirs: dict[str, dict[str, int]] = {}
    for line in files.splitlines():
        parts = line.rsplit(" ", 1)
        if len(parts) != 2 or "/" not in parts[0]:
            continue
        d, f = parts[0].split("/", 1)
        dirs.setdefault(d, {})[f] = int(parts[1])
    return parse_checkpoint(head), dirs


def power_cut(node: Node, policy: Callable[[str], FlushPolicy], data_dir: str = DATA_DIR) -> dict[str, Any]:
    """Drop every log byte the dead broker on ``node`` never fsynced.

    Returns {"logs": {dir: dropped range} (logs that lost something),
    "records": total, "bytes": total, "metadata_log": why it is kept}. The
    broker must not be running (the caller checks).
    """
    listing = node.run(["sh", "-c", listing_script(data_dir)], timeout=60)
    checkpoint, dirs = parse_listing(listing.out)
    cuts: list[Cut] = []
    with tempfile.TemporaryDirectory(prefix="kchaos-power-") as tmp:
        for d in sorted(dirs):
            tp = partition_dir(d)
            if tp is None:
                continue
            files = dirs[d]
            bases = sorted(b for b in (segment_base(f) for f in files) if b is not None)
            if not bases:
                continue
            active_name = f"{bases[-1]:020d}.log"
            active = b""
            if files[active_name] > 0:
                local = Path(tmp) / d / active_name
                node.get(f"{data_dir}/{d}/{active_name}", local)
                active = local.read_bytes()
            pol = policy(tp[0])
            cuts.append(plan_cut(d, list(files), checkpoint.get(d, 0), active,
                                 flushed_every_append=pol.every_append, exact=pol.exact))
    steps = []
    for c in cuts:
        base = f"{data_dir}/{c.log}"
        if c.truncate:
            steps.append(shell_join(["truncate", "-s", str(c.truncate[1]), f"{base}/{c.truncate[0]}"]))
        if c.delete:
            steps.append(shell_join(["rm", "-f", *(f"{base}/{f}" for f in c.delete)]))
    if steps:
        node.run(["sh", "-c", " && ".join(steps) + " && sync"], timeout=120)
    lost = {c.log: c.record() for c in cuts if c.records or c.bytes}
    return {"logs": lost, "records": sum(c.records for c in cuts), "bytes": sum(c.bytes for c in cuts),
            "metadata_log": "kept: KRaft voters fsync every append"}


def preflight_script(data_dir: str = DATA_DIR) -> str:
    """Succeeds when a node can lose power the kchaos way: its log dir is where
    kchaos put it and the tools the cut uses are there."""
    return (f"test -f {shell_join([data_dir + '/meta.properties'])} && command -v truncate >/dev/null "
            f"&& command -v find >/dev/null && find {shell_join([data_dir])} -maxdepth 0 -printf '' ")
