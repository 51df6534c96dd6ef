"""report.html and junit.xml from a stored run folder."""
from __future__ import annotations

import datetime as _dt
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import jinja2

from checkers.kafka_record import records_read_wall_ms
from history.ops import PROXY, history_header

from .availability import WriteAvailability
from .checked import checked_lines
from .controller_logs import controller_logs, divergence_text
from .fault_progress import progress_rows, run_progress
from .elections_page import RECORD_KEYS, all_elections, election_source, elections_context, witness_record
from .faults import fault_timeline
from .junit import junit_xml
from .early import PLOTS, PROGRESS, EarlyParts
from .load import RunData, load_run, node_logs
from .story import story
from .view import flat_rows, group_witnesses, jtext, secs, witness_view

log = logging.getLogger(__name__)

MAX_WITNESSES_SHOWN = 50     # results.json bounds them already (20 by default)
MAX_NEMESIS_ROWS = 400
_PROMOTED = ("name", "kafka_version", "seed", "nodes", "nemesis")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),  # report.html.j2 ships as package data
    autoescape=True,              # every value from the run is data, never markup
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _stats_rows(stats: dict[str, Any]) -> dict[str, Any]:
    ops = stats.get("ops") if isinstance(stats.get("ops"), dict) else {}
    op_rows = []
    for f, c in ops.items():
        if isinstance(c, dict):
            op_rows.append({"f": jtext(f, 40), "ok": jtext(c.get("ok", 0), 20), "fail": jtext(c.get("fail", 0), 20),
                            "info": jtext(c.get("info", 0), 20)})
    scalars = []
    lag = stats.get("realtime_lag")
    for k, v in stats.items():
        if k in ("ops", "availability", "realtime_lag", "settled_txns", "raft_log"):   # raft_log: its own section
            continue
        scalars.append((jtext(k, 60), jtext(v, 400)))
    if isinstance(lag, dict):
        scalars.append(("realtime lag", ", ".join(f"{jtext(k, 30)} {jtext(v, 30)}" for k, v in lag.items())))
    elif lag is not None:
        scalars.append(("realtime lag", jtext(lag)))
    return {"ops": op_rows, "scalars": scalars}


def _settled_rows(stats: dict[str, Any]) -> list[dict[str, str]]:
    """Each info txn (its commit outcome never learned) and how the checkers
    settled it: from Kafka's markers, a read, the drain, or not at all
    (checkers/settle.py)."""
    rows = stats.get("settled_txns")
    if not isinstance(rows, list):
        return []
    return [{"op": jtext(r.get("op"), 20), "outcome": jtext(r.get("outcome"), 20), "source": jtext(r.get("from"), 20),
             "evidence": jtext(r.get("evidence"), 600)} for r in rows if isinstance(r, dict)]


def _with_write_share(rows: dict[str, Any], wa: WriteAvailability | None) -> dict[str, Any]:
    """The stats rows, led by the share of the workload time with acknowledged writes."""
    if wa is not None:
        rows["scalars"].insert(0, ("write availability", wa.line()))
    return rows


def _config_rows(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The config as one row per setting; nested objects become dotted keys."""
    return [(jtext(k, 120), jtext(v, 2000)) for k, v in flat_rows(config)]


def _names(v: Any, limit: int = 300) -> str:
    """A list of names as ``a, b, c``."""
    return jtext(", ".join(jtext(x, 80) for x in v) if isinstance(v, list) else v, limit)


def _ran_on_lines(ran_on: Any) -> list[str]:
    """config.json's ran_on (harness/provenance.py) as words: the software behind the verdict."""
    if not isinstance(ran_on, dict):
        return []
    src, pkgs = ran_on.get("kchaos") or {}, ran_on.get("packages") or {}
    lines = []
    if isinstance(src, dict):
        commit = str(src.get("commit") or "")[:12] or "no git commit"
        lines.append(f"kchaos {src.get('version') or '?'} at {commit}"
                     + (" with uncommitted changes" if src.get("dirty") else ""))
    if isinstance(pkgs, dict) and pkgs:
        lines.append(", ".join(f"{k} {v}" for k, v in pkgs.items()) + f"; Python {ran_on.get('python') or '?'}"
                     + (f"; {ran_on['jdk']}" if ran_on.get("jdk") else ""))
    kafka, image = ran_on.get("kafka") or {}, ran_on.get("image") or {}
    if isinstance(kafka, dict) and kafka:
        jars = kafka.get("jars") or {}
        lines.append(f"Kafka {kafka.get('version') or '?'}" + (f", {len(jars)} jars (sha256 in config.json)"
                                                               if isinstance(jars, dict) and jars else "")
                     + (f"; node image {image.get('tag')} {str(image.get('id') or '')[:19]}"
                        if isinstance(image, dict) and image else ""))
    return [jtext(line, 300) for line in lines]


def client_line(library: Any) -> str | None:
    """config.json's ``client_settings.library`` (harness/client_config.py
    ``client_identity``) in words: the Kafka client the workload ran on."""
    if not isinstance(library, dict) or not library.get("name"):
        return None
    text = f"{library['name']} {library.get('version') or '?'}"
    extra = library.get("binding") or library.get("library")
    return jtext(text + (f" ({extra})" if extra else ""), 200)


def _checker_text(checker: dict[str, Any]) -> str:
    """``reference engine, 0.42 s`` (plus anything else the results say about it)."""
    engine, master, seconds = checker.get("engine"), checker.get("master"), checker.get("seconds")
    bits = [f"{jtext(engine, 40)} engine" + (f" on {jtext(master, 80)}" if master else "")] if engine else []
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        bits.append(f"{seconds:.2f} s")
    rest = {k: v for k, v in checker.items() if k not in ("engine", "master", "seconds")}
    if rest:
        bits.append(jtext(rest, 200))
    return ", ".join(bits)


def _witness(w: dict[str, Any], origin: float) -> dict[str, Any]:
    """A witness's view plus, for lost writes, Kafka's record of it (``record``)."""
    view = witness_view(w, origin=origin)
    view["record"] = witness_record(w, origin)
    if view["record"] is not None:
        view["extra"] = {k: v for k, v in view["extra"].items() if k not in RECORD_KEYS}
    return view


def _workload_start_wall(run: RunData, origin: float) -> float | None:
    """The workload's start on the wall clock (epoch seconds), from the history's
    header; None for a history written before the header carried it."""
    try:
        zero = history_header(run.run_dir / "history.jsonl").get("wall_ns_at_zero")
    except (OSError, ValueError):
        return None
    if not isinstance(zero, int) or isinstance(zero, bool):
        return None
    return zero / 1e9 + origin


def _wall_start(run: RunData, origin: float) -> str | None:
    """The workload's start on the wall clock (UTC), or None (``_workload_start_wall``)."""
    start = _workload_start_wall(run, origin)
    return None if start is None else \
        _dt.datetime.fromtimestamp(start, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _records_read_at(run: RunData, origin: float) -> float | None:
    """When Kafka's records (replicas, metadata and Raft logs) were read, on the
    report's clock: replicas.jsonl's header (``read_wall_ms``) against the
    workload's wall-clock start; None when either is missing."""
    start = _workload_start_wall(run, origin)
    read_ms = records_read_wall_ms(run.run_dir)
    if start is None or read_ms is None:
        return None
    return read_ms / 1e3 - start


def _quiet(a: dict[str, Any]) -> bool:
    """A check that found nothing, or was not reported by the checkers (an
    older or narrower results.json) without an error: a row of the compact
    table, not a section."""
    return not a["failing"] and not a["count"] and not a["witnesses"] and not a["error"]


def _story(run: RunData, d: Any, tl: Any) -> list[str]:
    try:
        return story(run.results, d.origin, d.ack_time, tl.intervals)
    except Exception:  # the story must never sink the report
        log.exception("the story of the run failed")
        return []


def build_context(run: RunData, plots: bool = True) -> dict[str, Any]:
    d = run.digest()
    tl = fault_timeline(d)
    rows = run.anomalies()
    elections = run.unclean_elections
    stats = run.stats
    plot_list = []
    if plots:
        from .plots import make_plots  # matplotlib only when drawing
        by_type = {a.type: a.witnesses for a in rows}
        avail = stats.get("availability") if isinstance(stats.get("availability"), list) else None
        plot_list = make_plots(d, tl, by_type, elections if run.results is not None else None,
                               [a for a in (avail or []) if isinstance(a, dict)] or None,
                               all_elections(run.results),
                               {k: v for k, v in run.made.items() if k in PLOTS})

    anomalies = []
    for a in rows:
        shown = [_witness(w, d.origin) for w in a.witnesses[:MAX_WITNESSES_SHOWN]]
        anomalies.append({
            "type": a.type,
            "anchor": "anomaly-" + "".join(c if c.isalnum() or c == "-" else "_" for c in a.type),
            "count": a.count,
            "allowed": a.allowed,
            "reason": a.reason,
            "description": a.description,
            "failing": a.failing,
            "present": a.present,
            "checked": run.results is not None and a.present and not a.error,
            "error": a.error,
            "witnesses": shown,
            "groups": group_witnesses(shown),
            "more_witnesses": max(0, a.count - min(len(a.witnesses), MAX_WITNESSES_SHOWN)),
        })
    ue_rows = []
    known = ("partition", "time", "index", "from_leader", "to_leader", "epoch", "last_isr",
             "lost_writes", "inconsistent_offsets", "kind", "offset", "last_elr", "isr", "elr")
    for e in elections:
        ue_rows.append({
            "partition": jtext(e.get("partition"), 40), "time": secs(e.get("time"), d.origin),
            "index": jtext(e.get("index"), 20), "offset": jtext(e.get("offset"), 20),
            "last_elr": jtext(e.get("last_elr"), 100),
            "from": jtext(e.get("from_leader"), 40), "to": jtext(e.get("to_leader"), 40),
            "epoch": jtext(e.get("epoch"), 20), "last_isr": jtext(e.get("last_isr"), 100),
            "lost": jtext(e.get("lost_writes"), 20), "inconsistent": jtext(e.get("inconsistent_offsets"), 20),
            "extra": jtext({k: v for k, v in e.items() if k not in known}, 300) if set(e) - set(known) else "",
        })
    nemesis = [{
        "time": f"{ev.time - d.origin:.3f}", "end": "" if ev.end is None else f"{ev.end - d.origin:.3f}",
        "index": jtext(ev.index, 20), "f": jtext(ev.f, 60),
        "value": jtext(ev.value, 300), "error": jtext(ev.error, 300),
        "kind": ev.kind or "", "color": ev.color or "", "action": ev.action or "",
    } for ev in tl.events[:MAX_NEMESIS_ROWS]]
    intervals = [{"kind": iv.kind, "color": iv.color, "start": f"{iv.start - d.origin:.3f}",
                  "end": f"{iv.end - d.origin:.3f}",
                  "duration": f"{iv.end - iv.start:.1f}", "nodes": ", ".join(iv.nodes),
                  "open": iv.open_at_end} for iv in tl.intervals]

    checker = (run.results or {}).get("checker") if run.results else None
    cfg = run.config
    summary = [("Kafka version", jtext(cfg.get("kafka_version"), 80) or "unknown"),
               ("seed", jtext(cfg.get("seed"), 80) or "unknown"),
               ("nodes", _names(cfg.get("nodes")) or "unknown"),
               ("nemesis", _names(cfg.get("nemesis")) or "none")]
    summary += [("duration", f"{d.duration:.1f} s"
                  + (f" (set-up {d.setup:.1f} s, workload {d.span:.1f} s)" if d.start is not None else "")),
                ("history ops", str(d.n_ops)),
                ("client processes", str(d.processes)), ("metadata samples", str(len(d.samples)))]
    if isinstance(cfg.get("workload_seconds"), (int, float)) and isinstance(cfg.get("time_limit"), (int, float)):
        summary.append(("workload length", f"planned {cfg['time_limit']:g} s, ran {cfg['workload_seconds']:.1f} s "
                        "(every planned fault step runs, each its planned gap after the previous one completed)"))
    client = client_line((cfg.get("client_settings") or {}).get("library")
                         if isinstance(cfg.get("client_settings"), dict) else None)
    if client:
        summary.append(("client", client))
    summary += [("ran on", text) for text in _ran_on_lines(cfg.get("ran_on"))]
    if isinstance(checker, dict) and checker:
        summary.append(("checker", _checker_text(checker)))
    verdict = run.verdict
    ctx_el = elections_context(run.results, stats, d.origin)
    failing = [a for a in anomalies if a["failing"]]
    if verdict == "valid":
        headline = "No anomaly outside the allowed ones was found."
    elif verdict == "invalid":
        raft_diverged = divergence_text(stats.get("raft_log")) is not None
        found = [f"{a['count']} {a['type']}" for a in failing] + \
            ([f"{stats['raft_log']['divergences']} divergences of the controllers' metadata logs"] if raft_diverged else [])
        headline = ("Anomalies found: " + ", ".join(found)) if found else "The checkers marked this run invalid."
    elif ctx_el["unknown_reasons"]:
        headline = "The verdict is unknown:"
    else:
        headline = "The checkers gave no verdict" + (": see the checker errors below." if run.errors else ".")
    logs = node_logs(run.run_dir)
    wa = run.write_availability()
    return {
        **ctx_el,
        "show_unknown_reasons": verdict == "unknown" and bool(ctx_el["unknown_reasons"]),
        "name": run.name,
        "run_dir": str(run.run_dir.resolve()),
        "verdict": verdict,
        "verdict_label": {"valid": "valid", "invalid": "INVALID"}.get(verdict, "unknown"),
        "headline": headline,
        "story": _story(run, d, tl) if verdict == "invalid" else [],
        "notes": run.notes,
        "errors": run.errors,
        "reproduce": run.reproduce_commands(),
        "summary": summary,
        "config_rows": _config_rows(cfg),
        "anomalies": anomalies,
        # failing types first, then allowed ones that occurred, then the rest (stable: canonical order);
        # the checks that found nothing fold into one compact table ("quiet")
        "sections": sorted([a for a in anomalies if not _quiet(a)],
                           key=lambda a: 0 if a["failing"] else 1 if a["count"] else 2),
        "quiet": [a for a in anomalies if _quiet(a)],
        "n_failing": len(failing),
        "unclean": ue_rows,
        "has_results": run.results is not None,
        "plots": plot_list,
        # the report's one clock: time 0 is the workload's start, this many seconds
        # after the harness started (the set-up), at this wall-clock time
        "workload_start": None if d.start is None else f"{d.start:.1f}",
        "wall_start": _wall_start(run, d.origin) if d.start is not None else None,
        "nemesis": nemesis,
        "nemesis_more": max(0, len(tl.events) - MAX_NEMESIS_ROWS),
        # the protocol proxy's events (history.ops.PROXY) are listed with the nemesis ops
        "proxy_events": sum(1 for ev in tl.events if ev.kind == PROXY and ev.action is None),
        "intervals": intervals,
        "fault_colors": sorted(tl.colors.items()),
        "stats": _with_write_share(_stats_rows(stats), wa),
        "checked": checked_lines(run.results, stats, d, tl, election_source(run.results), elections, wa),
        "fault_progress": progress_rows(run.made[PROGRESS] if PROGRESS in run.made else run_progress(d, cfg)),
        "settled_txns": _settled_rows(stats),
        "controller_logs": controller_logs(stats.get("raft_log"), tl.events, d.origin,
                                           _records_read_at(run, d.origin) if "raft_log" in stats else None),
        "computed_ops": [{"f": jtext(f, 40), "ok": c.get("ok", 0), "fail": c.get("fail", 0), "info": c.get("info", 0)}
                         for f, c in sorted(d.op_counts.items())],
        "logs": logs,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def render_html(run: RunData, plots: bool = True) -> str:
    return _env.get_template("report.html.j2").render(**build_context(run, plots=plots))


def render_run(run_dir: Path, early: EarlyParts | None = None) -> Path:
    """Write ``report.html`` and ``junit.xml`` into ``run_dir``; return the report's path.
    ``early``: the history's digest and the parts made from it
    (``reports.early.early_parts``) when the caller made them already, else
    everything is made here.

    Never fails for a missing or broken piece of the run folder: such a
    problem becomes a note in the report (and the verdict becomes unknown
    when results.json is missing).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    run = load_run(run_dir)
    if early is not None and run.history_present:
        run.use_digest(early.digest, early.notes)
        run.made = early.made
    report = run_dir / "report.html"
    html = render_html(run)
    _write_atomic(report, html.encode("utf-8", errors="replace"))  # lone surrogates from JSON escapes
    _write_atomic(run_dir / "junit.xml",
                  junit_xml(run, report_path=str(report.resolve()), reproduce=run.reproduce_commands()))
    log.info("report written to %s (verdict %s)", report, run.verdict)
    return report


__all__ = ["render_run", "render_html", "build_context"]
