"""The progress step both engines share, after the engine like the elections
step: from the run's nemesis and sampler ops and every acknowledged message's
completion time (``RunFindings.ack_times``), each fault's progress
(progress.py), the run's fault seconds with acknowledged writes on unimpaired
partitions (``stats["fault_progress"]``), and, with ``[checker] min_progress``
set, the anomaly ``too-little-progress`` (docs/design.md, "Progress where a
fault does not reach").

The workload's span here is the first to the last acknowledged write: the
checkers see the acks, not the runner's clock, and both engines see the same.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from history.fault_intervals import NemesisOp, fault_intervals
from history.ops import NEMESIS, SAMPLER
from history.paired import witness_op

from .common import Finding, RunFindings, Settings, Witness
from .progress import Rule, Sample, fault_progress, progress_seconds, too_little_progress, waits_for_isr

TYPE = "too-little-progress"


def control_faults_and_samples(rows: list[dict[str, Any]]) -> tuple[list[NemesisOp], list[Sample]]:
    """The nemesis ops and the leader/ISR samples of the control rows (to_row() form), in history order."""
    events, samples = [], []
    for r in sorted(rows, key=lambda r: r["invoke_index"]):
        if r["role"] == NEMESIS:
            events.append(NemesisOp(index=r["invoke_index"], invoke_time=r["invoke_time"], time=r["time"],
                                    f=r["f"], value=witness_op(r)["value"], error=r["error"]))
        elif r["role"] == SAMPLER and r.get("sample") is not None and r.get("time") is not None:
            samples.append((int(r["time"]), {int(s["partition"]): (s["leader"], list(s["isr"] or []))
                                             for s in r["sample"]}))
    samples.sort(key=lambda s: s[0])
    return events, samples


def judge(rf: RunFindings, settings: Settings) -> None:
    """Sets ``rf.anomalies[TYPE]`` and ``rf.stats["fault_progress"]``; a crash
    marks the type with the error (never a pass)."""
    try:
        finding, stat = _judge(rf, settings)
    except Exception as e:  # noqa: BLE001 - a crash must give "unknown", never a pass
        msg = f"progress: {type(e).__name__}: {e}"
        rf.errors.append(msg)
        rf.anomalies[TYPE] = Finding(error=msg)
        return
    rf.anomalies[TYPE] = finding
    if stat is not None:
        rf.stats["fault_progress"] = stat


def _judge(rf: RunFindings, settings: Settings) -> tuple[Finding, dict[str, Any] | None]:
    acks = {int(p): np.asarray(ts, np.int64) for p, ts in rf.ack_times.items() if len(ts)}
    events, samples = control_faults_and_samples(rf.control_rows)
    intervals = fault_intervals(events)
    if not intervals or not acks:
        return Finding(), None
    span = (min(int(ts.min()) for ts in acks.values()), max(int(ts.max()) for ts in acks.values()))
    rule = Rule(settings.min_insync, waits_for_isr((settings.client_settings or {}).get("producer")))
    progress = fault_progress(intervals, acks, samples, rule, span)
    seconds = progress_seconds(intervals, acks, samples, rule, span)
    stat = {"fault_seconds": seconds.seconds, "with_acks_on_unimpaired": seconds.progressing}
    if settings.min_progress is None:
        return Finding(), stat
    slow = sorted(too_little_progress(progress, settings.min_progress),
                  key=lambda fp_p: (fp_p[0].start, fp_p[1]))
    witnesses = [Witness(p, [], [], [fp.start_index] if fp.start_index is not None else [],
                         extra={"fault": fp.fault, "interval": [fp.start, fp.end], "impaired": sorted(fp.impaired),
                                "acks": fp.acks.get(p, 0), "unimpaired_seconds": fp.free_seconds.get(p, 0),
                                "unimpaired_acks": fp.free_acks.get(p, 0), "acks_per_s": round(fp.rate(p), 3),
                                "fault_free_acks_per_s": round(fp.baseline.get(p, 0.0), 3),
                                "min_progress": settings.min_progress})
                 for fp, p in slow[: settings.max_witnesses]]
    return Finding(count=len(slow), witnesses=witnesses), stat
