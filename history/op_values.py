"""An op's value, read as the history format defines it (``history.ops``).

Each view checks what it reads and names the first thing that is not as
the format says (``HistoryFormatError`` with the op's ``where``), so a bad
history costs one line, never a wrong verdict. Split from ``history.ops``
(the format's spec and its reader) because these views are what the
checkers and the columnar copy call per op.
"""
from __future__ import annotations

from typing import Any, Iterator

from history.ops import ACK_KINDS, POLL, SEND, HistoryFormatError, Message, PartitionSample


def require_int(x: Any, what: str, where: str) -> int:
    """``x`` as an int, or HistoryFormatError naming ``what`` and ``where``."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise HistoryFormatError(f"{where}: {what} is not an integer: {x!r}")
    return x


def _opt_int(x: Any, what: str, where: str) -> int | None:
    return None if x is None else require_int(x, what, where)


def send_messages(value: Any, where: str) -> list[Message]:
    """(partition, offset, value) per message of a send. An offset means the
    message was acknowledged, whatever the op's type: every message of an ok
    send has one, so do the acknowledged messages of a mixed info send."""
    if not isinstance(value, list):
        raise HistoryFormatError(f"{where}: send value is not a list: {value!r:.80}")
    out = []
    for m in value:
        if not isinstance(m, list) or len(m) < 2:
            raise HistoryFormatError(f"{where}: send message is not [partition, value, offset]: {m!r}")
        offset = m[2] if len(m) > 2 else None
        out.append((require_int(m[0], "partition", where), _opt_int(offset, "offset", where),
                    require_int(m[1], "value", where)))
    return out


def acknowledged_offsets(value: Any) -> Iterator[tuple[Any, int]]:
    """(partition, offset) of each acknowledged message of a send completion's
    value, skipping what is malformed: for live counters that must not raise
    (``send_messages`` is the strict reading)."""
    if isinstance(value, list):
        for m in value:
            if isinstance(m, (list, tuple)) and len(m) == 3 and type(m[2]) is int:
                yield m[0], m[2]


def poll_reads(value: Any, where: str) -> tuple[list[Message], list[int]]:
    """The messages a poll read, and the partitions it reported (in order)."""
    if value is None:
        return [], []
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: poll value is not a dict: {value!r:.80}")
    msgs: list[Message] = []
    parts = []
    for key, pairs in value.items():
        try:
            p = int(key)
        except ValueError:
            raise HistoryFormatError(f"{where}: poll partition key is not an integer: {key!r}") from None
        parts.append(p)
        for pair in pairs or []:
            if not isinstance(pair, list) or len(pair) != 2:
                raise HistoryFormatError(f"{where}: poll read is not [offset, value]: {pair!r}")
            msgs.append((p, require_int(pair[0], "offset", where), require_int(pair[1], "value", where)))
    return msgs, parts


def txn_micro_ops(value: Any, where: str) -> tuple[list[Message], list[Message]]:
    """(writes, reads) of a txn, each in micro-op order: writes as (partition,
    offset or None, value), reads as (partition, offset, value)."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise HistoryFormatError(f"{where}: txn value is not a list: {value!r:.80}")
    writes: list[Message] = []
    reads: list[Message] = []
    for mop in value:
        if not isinstance(mop, list) or not mop or mop[0] not in (SEND, POLL):
            raise HistoryFormatError(f"{where}: txn micro-op is not [\"send\", ...] or [\"poll\", ...]: {mop!r:.80}")
        if mop[0] == SEND:
            if len(mop) < 3:
                raise HistoryFormatError(f"{where}: txn send is not [\"send\", partition, value, offset]: {mop!r}")
            writes.extend(send_messages([mop[1:]], where))
        elif len(mop) > 1:
            reads.extend(poll_reads(mop[1], where)[0])
    return writes, reads


def offsets_map(value: Any, where: str) -> list[tuple[int, int]]:
    """(partition, offset) pairs of a commit value ``{"<partition>": offset}``."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: commit value is not a dict: {value!r:.80}")
    out = []
    for key, off in value.items():
        if not str(key).lstrip("-").isdigit():
            raise HistoryFormatError(f"{where}: commit partition key is not an integer: {key!r}")
        out.append((int(key), require_int(off, "committed offset", where)))
    return out


def committed_offsets_view(value: Any, where: str) -> list[tuple[int, int | None]]:
    """(partition, committed offset or None: none) pairs of an ``offsets`` sample."""
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: offsets value is not a dict: {value!r:.80}")
    out = []
    for key, off in value.items():
        if not str(key).lstrip("-").isdigit():
            raise HistoryFormatError(f"{where}: offsets partition key is not an integer: {key!r}")
        out.append((int(key), _opt_int(off, "committed offset", where)))
    return out


def rebalance_view(value: Any, where: str) -> tuple[list[int], list[int], int | None]:
    """(assigned, revoked, generation) of a rebalance event."""
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: rebalance value is not a dict: {value!r:.80}")
    assigned = [require_int(p, "assigned partition", where) for p in value.get("assigned") or []]
    revoked = [require_int(p, "revoked partition", where) for p in value.get("revoked") or []]
    return assigned, revoked, _opt_int(value.get("generation"), "generation", where)


def share_deliveries(value: Any, where: str) -> list[tuple[int, int, int, int]]:
    """(partition, offset, value, delivery_count) of each record of an ok share-poll."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: share-poll value is not a dict: {value!r:.80}")
    out = []
    for key, recs in value.items():
        if not str(key).lstrip("-").isdigit():
            raise HistoryFormatError(f"{where}: share-poll partition key is not an integer: {key!r}")
        for r in recs or []:
            if not isinstance(r, list) or len(r) != 3:
                raise HistoryFormatError(f"{where}: share-poll record is not [offset, value, delivery_count]: {r!r}")
            out.append((int(key), require_int(r[0], "offset", where), require_int(r[1], "value", where),
                        require_int(r[2], "delivery count", where)))
    return out


def share_marks(value: Any, where: str) -> list[tuple[str, int, int]]:
    """(kind, partition, offset) of each mark of a share-ack or share-acked value."""
    if value is None:
        return []
    if not isinstance(value, dict) or not set(value) <= set(ACK_KINDS):
        raise HistoryFormatError(f"{where}: share acknowledgement is not {{kind: {{partition: offsets}}}}: "
                                 f"{value!r:.80}")
    out = []
    for kind, parts in value.items():
        for key, offsets in (parts or {}).items():
            if not str(key).lstrip("-").isdigit():
                raise HistoryFormatError(f"{where}: share acknowledgement partition is not an integer: {key!r}")
            out += [(kind, int(key), require_int(o, "offset", where)) for o in offsets or []]
    return out


def sample_view(value: Any, where: str) -> tuple[list[PartitionSample], int | None]:
    """A sample's (partition, leader, isr, epoch) per partition, and the controller."""
    if not isinstance(value, dict):
        raise HistoryFormatError(f"{where}: sample value is not a dict: {value!r:.80}")
    out = []
    for key, s in (value.get("partitions") or {}).items():
        s = s or {}
        if not str(key).lstrip("-").isdigit():
            raise HistoryFormatError(f"{where}: sample partition key is not an integer: {key!r}")
        isr = [require_int(b, "isr broker", where) for b in s.get("isr") or []]
        out.append((require_int(int(key), "partition", where), _opt_int(s.get("leader"), "leader", where),
                    isr, _opt_int(s.get("epoch"), "epoch", where)))
    return out, _opt_int(value.get("controller"), "controller", where)


# -- fault boundaries ----------------------------------------------------------------
# Format 1 histories carry no ``action``: their nemesis ops are read by exact
# name, as the nemeses of that version named them.
