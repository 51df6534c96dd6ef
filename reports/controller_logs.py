"""The controllers' metadata logs in the report: did Kafka's own Raft log agree
between controllers, and did the quorum keep committing? (issue 31;
docs/design.md, "Quorum membership").

checkers/raft_log.py judges the logs (results.json ``stats.raft_log``); here
that judgement becomes a few lines in words and two small tables: the
divergences with their witnesses, and the voter changes the nemesis made
(``remove-controller`` / ``add-controller`` completions carry the voter set
before and after). Times are on the report's one clock: seconds since the
workload started. Pure: plain data in, plain text out (the template escapes it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class ControllerLogs:
    """What the report's "Controllers' metadata logs" section shows."""

    lines: list[tuple[str, str]]                  # (label, words)
    divergences: int                              # (offset, pair of controllers) that differ below the committed offset
    witnesses: list[dict[str, str]] = field(default_factory=list)
    voter_changes: list[dict[str, str]] = field(default_factory=list)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _ids(xs: Any) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]" if isinstance(xs, list) else "unknown"


def _entry(e: Any) -> str:
    """``[epoch, digest]`` of one log entry -> ``epoch 2, record 1a2b3c4d``."""
    if not isinstance(e, (list, tuple)) or len(e) != 2:
        return str(e)[:80]
    epoch, digest = e
    return f"epoch {epoch if epoch is not None else '?'}, record {str(digest)[:16]}"


def _offsets(raft: dict[str, Any]) -> list[int]:
    return sorted({w["offset"] for w in raft.get("witnesses") or [] if isinstance(w, dict) and _int(w.get("offset"))})


def divergence_text(raft: Any) -> str | None:
    """One sentence for an invalid run's story, or None when the logs agree:
    ``The controllers' metadata logs diverge below the committed offset 326
    (high watermark (describe --status)): 2 pairs of controllers hold different
    entries, at offset 4 (n4 epoch 1, record d4 / n5 epoch 2, record other).``"""
    if not isinstance(raft, dict) or not _int(raft.get("divergences")) or raft["divergences"] <= 0:
        return None
    n = raft["divergences"]
    text = (f"The controllers' metadata logs diverge below the committed offset {raft.get('committed_offset')} "
            f"({raft.get('committed_source') or 'source unknown'}): {n} "
            + ("pair of controllers holds different entries" if n == 1 else "pairs of controllers hold different entries"))
    ws = [w for w in raft.get("witnesses") or [] if isinstance(w, dict)]
    if ws:
        w = ws[0]
        nodes, entries = list(w.get("nodes") or ["?", "?"]), list(w.get("entries") or [None, None])
        offsets = _offsets(raft)
        text += (f", at offset{'s' if len(offsets) > 1 else ''} " + ", ".join(map(str, offsets[:6]))
                 + (" and more" if len(offsets) > 6 else "")
                 + f"; the first: {nodes[0]} {_entry(entries[0])} against {nodes[1]} {_entry(entries[1])}")
    return text + "."


def agreement_line(raft: Any) -> str | None:
    """The "What was checked" line: controllers, offsets compared, divergences, commitment."""
    if not isinstance(raft, dict):
        return None
    ctrl = ", ".join(map(str, raft.get("controllers") or [])) or "no controller"
    compared = raft.get("offsets_compared") or 0
    if raft.get("committed_offset") is None:
        text = f"{ctrl}: not compared (the committed offset is unknown)"
    elif _int(raft.get("divergences")) and raft["divergences"] > 0:
        text = f"{ctrl}: {raft['divergences']} divergences in {compared} committed offsets"
    else:
        text = f"{ctrl} agree on all {compared} committed offsets"
    kept = raft.get("keeps_committing")
    return text + {True: "; the quorum kept committing", False: "; the quorum did NOT keep committing"}.get(kept, "")


def _committing_words(raft: dict[str, Any]) -> str:
    kept = raft.get("keeps_committing")
    hw = raft.get("high_watermarks") if isinstance(raft.get("high_watermarks"), list) else [None, None]
    if kept is True:
        return f"yes: the high watermark moved from {hw[0]} to {hw[1]} between the two describes" \
            if None not in hw else "yes: the high watermark moved between the two describes"
    if kept is False:
        return f"no: the high watermark stayed at {hw[1]} between the two describes" \
            if hw[1] is not None else "no: the high watermark did not move between the two describes"
    return "unknown: the quorum was not described twice (a combined cluster's static quorum is not described)"


def _voters_words(raft: dict[str, Any]) -> str:
    before, after = raft.get("voters_before"), raft.get("voters")
    if not after and not before:
        return "not described"
    if before is None or before == after:
        return f"{_ids(after)} when the logs were read"
    return f"{_ids(before)} before the logs were read, {_ids(after)} after"


def voter_changes(events: Iterable[Any], origin: float) -> list[dict[str, str]]:
    """Every nemesis completion that names the voter set after it (quorum
    membership changes), with the set before it (its own, else the previous
    change's) and Kafka's answer."""
    rows: list[dict[str, str]] = []
    last: Any = None
    for ev in events:
        value = ev.value if isinstance(ev.value, dict) else {}
        if "voters_after" not in value:
            continue
        before = value.get("voters_before", last)
        if not value.get("nodes") and before == value["voters_after"]:
            continue            # the final heal found every controller a voter: nothing changed
        answer = value.get("answer") or value.get("answers") or ev.error or ""
        if isinstance(answer, dict):    # add-controller: {node: [each answer, the last one accepted]}
            answer = "; ".join(str(a[-1] if isinstance(a, list) and a else a) for a in answer.values())
        rows.append({"time": "" if ev.end is None else f"{ev.end - origin:.1f}", "f": str(ev.f),
                     "nodes": ", ".join(map(str, value.get("nodes") or [])),
                     "before": _ids(before) if before is not None else "?", "after": _ids(value["voters_after"]),
                     "leader": "" if value.get("leader_after") is None else f"n{value['leader_after']}",
                     "answer": str(answer)[:300]})
        last = value["voters_after"]
    return rows


def controller_logs(raft: Any, events: Iterable[Any] = (), origin: float = 0.0,
                    read_at: float | None = None, max_witnesses: int = 20) -> ControllerLogs | None:
    """The section's content from ``stats.raft_log`` and the nemesis events
    (``reports.faults.NemesisEvent``); None when the run stored no Raft log.
    ``read_at``: when the logs were read, on the report's clock."""
    if not isinstance(raft, dict):
        return None
    ends = raft.get("end_offsets") if isinstance(raft.get("end_offsets"), dict) else {}
    ctrl = [str(c) for c in raft.get("controllers") or []]
    lines = [("controllers compared", (", ".join(ctrl) or "none")
              + (" (log end offsets: " + ", ".join(f"{c} {ends[c]}" for c in ctrl if c in ends) + ")"
                 if ends else ""))]
    if read_at is not None:
        lines.append(("logs read at", f"{read_at:.1f} s, after the workload and its final reads"))
    committed = raft.get("committed_offset")
    if committed is None:
        why = str(raft.get("committed_source") or "the committed offset is unknown").removeprefix("none: ")
        lines.append(("offsets compared", f"none: {why} (only entries below the committed offset must agree)"))
    else:
        lines.append(("offsets compared", f"{raft.get('offsets_compared', 0)}, every offset two controllers both "
                      f"hold below the committed offset {committed} ({raft.get('committed_source')}); "
                      "above it a deposed leader's uncommitted tail may differ, as Raft allows"))
    n = raft.get("divergences") if _int(raft.get("divergences")) else 0
    lines.append(("divergences", "none" if not n else
                  f"{n} (offset, pair of controllers) with different entries below the committed offset: "
                  "the run is invalid"))
    lines.append(("the quorum kept committing", _committing_words(raft)))
    lines.append(("voters", _voters_words(raft)))
    errors = raft.get("errors") if isinstance(raft.get("errors"), dict) else {}
    if errors:
        lines.append(("not read", "; ".join(f"{k}: {str(v)[:200]}" for k, v in errors.items())))
    witnesses = []
    for w in [w for w in raft.get("witnesses") or [] if isinstance(w, dict)][:max_witnesses]:
        nodes, entries = list(w.get("nodes") or ["?", "?"]), list(w.get("entries") or [None, None])
        witnesses.append({"offset": str(w.get("offset")), "a": str(nodes[0]), "a_entry": _entry(entries[0]),
                          "b": str(nodes[1]), "b_entry": _entry(entries[1])})
    return ControllerLogs(lines, n, witnesses, voter_changes(events, origin))


__all__ = ["ControllerLogs", "controller_logs", "agreement_line", "divergence_text", "voter_changes"]
