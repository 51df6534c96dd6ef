"""A suite's index.html and aggregate junit.xml, from its suite.json data.

* ``write_suite_reports(suite_dir, data, earlier)``: writes ``index.html``
  (self-contained, offline, autoescaped) and ``junit.xml`` (one testsuite per
  run, each the run's own junit content) into the suite folder.
* ``load_earlier(suite_dir, n)``: the last ``n`` earlier runs of the same
  suite in the store (sibling folders with a suite.json), oldest first.

suite.json (written by ``harness.suite``)::

    {"format": 1, "name": "nightly", "status": "running" | "finished" | "interrupted",
     "started": ISO, "finished": ISO | null, "duration_s": 812.4, "time_budget": 3600 | null,
     "exit_code": 0 | 1 | 2 | 3 | 130 | null, "counts": {"valid": 3, "skipped": 1, ...},
     "runs": [{"index": 1, "cell": "kafka=4.3.1 variant=base nemesis=partition seed=1",
               "axes": {...}, "name": "nightly-partition-s1", "config": {...}, "overrides": {...},
               "outcome": "valid" | "invalid" | "unknown" | "error" | "skipped" | "interrupted" | "pending",
               "verdict": ..., "exit_code": 0, "seed": 1, "schedule_digest": "...",
               "run_dir": "../../../nightly-partition-s1/20250101T000000",   # relative to the suite folder
               "report": ".../report.html", "anomalies": {"lost-write": {"count": 3, "allowed": false}},
               "error": null, "skip_reason": null, "started": ISO, "duration_s": 61.2,
               # after `kchaos suite --rerun-failed`: each rerun (same fields as a run's
               # outcome) and whether one disagreed with the original (is_flaky)
               "reruns": [{"outcome": "valid", "run_dir": ..., "report": ..., ...}], "flaky": true}, ...],
     "flaky": 1}
"""
from __future__ import annotations

import datetime as _dt
import json
import posixpath
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2

from .junit import _x, junit_xml
from .load import RunData
from .render import _write_atomic
from .view import jtext

OUTCOMES = ("valid", "invalid", "unknown", "error", "interrupted", "skipped", "pending")
_SYMBOL = {"valid": "✓", "invalid": "✗", "unknown": "?", "error": "!", "interrupted": "‖",
           "skipped": "–", "pending": "…", "absent": "·"}
_EXIT_LABEL = {0: ("valid", "valid"), 1: ("invalid", "INVALID"), 2: ("unknown", "unknown"),
               3: ("error", "error"), 130: ("interrupted", "interrupted")}

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
    autoescape=True,              # every value from the suite is data, never markup
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def load_earlier(suite_dir: Path, n: int) -> list[tuple[str, dict[str, Any]]]:
    """Earlier runs of this suite (same store, same name), oldest first, at most n."""
    suite_dir = Path(suite_dir)
    parent = suite_dir.parent
    if n <= 0 or not parent.is_dir():
        return []
    out = []
    for d in sorted(parent.iterdir(), key=lambda p: p.name):
        if d.name.startswith(".") or d.is_symlink() or not d.is_dir() or d.name >= suite_dir.name:
            continue
        data = _read_json(d / "suite.json")
        if isinstance(data, dict) and isinstance(data.get("runs"), list):
            out.append((d.name, data))
    return out[-n:]


VERDICTS = ("valid", "invalid", "unknown")


def is_flaky(rec: dict[str, Any]) -> bool:
    """A run is flaky when a rerun of it (``kchaos suite --rerun-failed``: same
    config, same seed) reached a verdict other than its own. Reruns that
    reached none (a harness error, an interrupt) decide nothing."""
    first = rec.get("outcome")
    reruns = rec.get("reruns") if isinstance(rec.get("reruns"), list) else []
    return first in VERDICTS and any(isinstance(r, dict) and r.get("outcome") in VERDICTS
                                     and r.get("outcome") != first for r in reruns)


def _reruns(suite_dir: Path, rec: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in rec.get("reruns") if isinstance(rec.get("reruns"), list) else []:
        if not isinstance(r, dict):
            continue
        outcome = _outcome(r)
        out.append({"outcome": outcome, "label": {"invalid": "INVALID"}.get(outcome, outcome),
                    "report": _link(suite_dir, r.get("report")), "duration": _fmt_duration(r.get("duration_s")),
                    "started": jtext(r.get("started"), 40), "error": jtext(r.get("error"), 300)})
    return out


def _outcome(rec: dict[str, Any]) -> str:
    o = rec.get("outcome")
    return o if o in OUTCOMES else "unknown"


def _num(v: Any) -> str:
    if isinstance(v, float) and not isinstance(v, bool):
        return f"{v:g}"
    return jtext(v, 20)


def _config_summary(rec: dict[str, Any]) -> list[str]:
    c = rec.get("config") if isinstance(rec.get("config"), dict) else {}
    parts = []
    if c:
        parts.append(f"{_num(c.get('nodes'))} nodes, {_num(c.get('time_limit'))} s, "
                     f"{_num(c.get('rate'))} ops/s, {_num(c.get('concurrency'))} workers")
        parts.append(f"{_num(c.get('partitions'))} partitions, RF {_num(c.get('replication_factor'))}, "
                     f"{jtext(c.get('mode'), 20)}")
        if c.get("faults"):
            parts.append(f"faults every ~{_num(c.get('nemesis_interval'))} s")
    overrides = rec.get("overrides") if isinstance(rec.get("overrides"), dict) else {}
    for table, values in overrides.items():
        if isinstance(values, dict):
            parts += [f"{jtext(table, 40)}.{jtext(k, 80)} = {jtext(v, 120)}" for k, v in values.items()]
        else:
            parts.append(f"{jtext(table, 40)} = {jtext(values, 120)}")
    return parts


def _anomaly_pills(rec: dict[str, Any]) -> list[dict[str, Any]]:
    a = rec.get("anomalies") if isinstance(rec.get("anomalies"), dict) else {}
    pills = []
    for t, v in a.items():
        if not isinstance(v, dict):
            continue
        count = v.get("count")
        pills.append({"type": jtext(t, 60), "count": jtext(count, 20), "allowed": bool(v.get("allowed"))})
    pills.sort(key=lambda p: (p["allowed"], p["type"]))
    return pills


def _link(suite_dir: Path, rel: str | None) -> str | None:
    """A relative link from the index, only when it points at an existing file."""
    if not rel or not isinstance(rel, str):
        return None
    rel = posixpath.normpath(rel)
    return rel if (Path(suite_dir) / rel).exists() else None


def _trend(suite_dir: Path, rec: dict[str, Any], earlier: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    cell = rec.get("cell")
    marks = []
    for folder, data in earlier:
        match = next((r for r in data["runs"] if isinstance(r, dict) and r.get("cell") == cell), None)
        if match is None:
            outcome, link = "absent", None
        else:
            outcome = _outcome(match)
            link = _link(suite_dir, f"../{folder}/{match['report']}") if match.get("report") else None
        flaky = match is not None and is_flaky(match)
        marks.append({"outcome": outcome, "symbol": _SYMBOL[outcome], "link": link, "current": False,
                      "flaky": flaky, "title": f"{folder}: {'not in that suite run' if outcome == 'absent' else outcome}"
                      + (_flaky_title(match) if flaky else "")})
    outcome = _outcome(rec)
    flaky = is_flaky(rec)
    marks.append({"outcome": outcome, "symbol": _SYMBOL[outcome], "link": None, "current": True, "flaky": flaky,
                  "title": f"this suite run: {outcome}" + (_flaky_title(rec) if flaky else "")})
    return marks


def _flaky_title(rec: dict[str, Any]) -> str:
    again = [str(r.get("outcome")) for r in rec.get("reruns") or [] if isinstance(r, dict)]
    return f"; flaky: rerun {', '.join(again)}"


def _fmt_duration(s: Any) -> str:
    if not isinstance(s, (int, float)) or isinstance(s, bool):
        return ""
    s = int(round(s))
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def build_context(suite_dir: Path, data: dict[str, Any], earlier: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    suite_dir = Path(suite_dir)
    runs = [r for r in data.get("runs") or [] if isinstance(r, dict)]
    rows = []
    for rec in runs:
        axes = rec.get("axes") if isinstance(rec.get("axes"), dict) else {}
        rep = (f"seed {jtext(axes['seed'], 30)}" if "seed" in axes else
               f"repeat {jtext(axes.get('repeat'), 10)}" + (f" (seed {jtext(rec.get('seed'), 30)})"
                                                              if rec.get("seed") is not None else ""))
        faults = axes.get("nemesis") if isinstance(axes.get("nemesis"), list) else []
        outcome = _outcome(rec)
        rows.append({
            "index": jtext(rec.get("index"), 10), "name": jtext(rec.get("name"), 200),
            "cell": jtext(rec.get("cell"), 400),
            "kafka": jtext(axes.get("kafka_version"), 40), "variant": jtext(axes.get("variant"), 80),
            "nemesis": ", ".join(jtext(f, 40) for f in faults) or "none", "rep": rep,
            "config": _config_summary(rec),
            "outcome": outcome, "label": {"invalid": "INVALID"}.get(outcome, outcome),
            "anomalies": _anomaly_pills(rec), "has_run": bool(rec.get("run_dir")),
            "error": jtext(rec.get("error"), 500), "skip_reason": jtext(rec.get("skip_reason"), 300),
            "duration": _fmt_duration(rec.get("duration_s")),
            "report": _link(suite_dir, rec.get("report")),
            "run_dir": jtext(rec.get("run_dir"), 400),
            "digest": jtext(rec.get("schedule_digest"), 40),
            "trend": _trend(suite_dir, rec, earlier),
            "flaky": is_flaky(rec), "reruns": _reruns(suite_dir, rec),
        })
    code = data.get("exit_code")
    verdict, verdict_label = _EXIT_LABEL.get(code, ("running", "running")) if data.get("status") != "running" \
        else ("running", "running")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    headline = f"{len(rows)} run{'s' if len(rows) != 1 else ''}: " + ", ".join(
        f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o)) if rows else "no runs"
    flaky = sum(1 for r in rows if r["flaky"])
    if flaky:
        headline += f"; {flaky} flaky (a rerun with the same seed disagreed)"
    summary = [("suite file", jtext(data.get("source"), 300)), ("started", jtext(data.get("started"), 40)),
               ("finished", jtext(data.get("finished"), 40) or "not yet"),
               ("duration", _fmt_duration(data.get("duration_s"))),
               ("time budget", f"{data['time_budget']:g} s" if isinstance(data.get("time_budget"), (int, float))
                else "none"),
               ("exit code", jtext(code, 10) if code is not None else "pending")]
    history = []
    for folder, d in earlier:
        c = d.get("counts") if isinstance(d.get("counts"), dict) else {}
        history.append({"folder": jtext(folder, 80), "link": _link(suite_dir, f"../{folder}/index.html"),
                        "started": jtext(d.get("started"), 40), "exit_code": jtext(d.get("exit_code"), 10),
                        "status": _EXIT_LABEL.get(d.get("exit_code"), ("unknown", "unknown"))[0],
                        "counts": ", ".join(f"{jtext(c[o], 10)} {o}" for o in OUTCOMES if c.get(o))})
    return {
        "name": jtext(data.get("name"), 80), "description": jtext(data.get("description"), 2000),
        "suite_dir": str(suite_dir.resolve()), "verdict": verdict, "verdict_label": verdict_label,
        "headline": headline, "summary": summary, "rows": rows, "history": history,
        "trend_n": len(earlier), "symbols": [(o, _SYMBOL[o]) for o in (*OUTCOMES, "absent")],
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def render_index(suite_dir: Path, data: dict[str, Any], earlier: list[tuple[str, dict[str, Any]]]) -> str:
    return _env.get_template("suite.html.j2").render(**build_context(suite_dir, data, earlier))


# ---- junit ---------------------------------------------------------------------

def _run_data(run_dir: Path) -> RunData:
    """config and results only: the junit content needs no history."""
    run = RunData(run_dir=run_dir)
    cfg = _read_json(run_dir / "config.json")
    run.config = cfg if isinstance(cfg, dict) else {}
    res = _read_json(run_dir / "results.json")
    run.results = res if isinstance(res, dict) else None
    if run.results is None:
        run.notes.append("results.json is missing or unreadable: the verdict is unknown")
    return run


def _set_counts(el: ET.Element, tests: int, failures: int, errors: int, skipped: int) -> None:
    for k, v in (("tests", tests), ("failures", failures), ("errors", errors), ("skipped", skipped)):
        el.set(k, str(v))


def _counts(el: ET.Element) -> tuple[int, int, int, int]:
    return tuple(int(el.get(k, "0")) for k in ("tests", "failures", "errors", "skipped"))  # type: ignore


def _run_testsuite(suite_dir: Path, rec: dict[str, Any]) -> ET.Element:
    name = _x(rec.get("name") or f"run {rec.get('index')}")
    outcome = _outcome(rec)
    run_dir = (Path(suite_dir) / rec["run_dir"]) if rec.get("run_dir") else None
    ts: ET.Element | None = None
    if run_dir is not None and run_dir.is_dir():
        run = _run_data(run_dir)
        report = run_dir / "report.html"
        xml = junit_xml(run, report_path=str(report.resolve()) if report.exists() else None,
                        reproduce=run.reproduce_commands())
        ts = ET.fromstring(xml).find("testsuite")
    if ts is None:
        ts = ET.Element("testsuite")
        ET.SubElement(ts, "properties")
        _set_counts(ts, 0, 0, 0, 0)
    ts.set("name", name)
    props = ts.find("properties")
    if props is None:
        props = ET.Element("properties")
        ts.insert(0, props)
    for key in ("cell", "outcome"):
        ET.SubElement(props, "property", name=key, value=_x(rec.get(key) or ""))
    reruns = [r for r in rec.get("reruns") or [] if isinstance(r, dict)]
    if reruns:
        ET.SubElement(props, "property", name="reruns", value=_x(", ".join(str(r.get("outcome")) for r in reruns)))
        ET.SubElement(props, "property", name="flaky", value="true" if is_flaky(rec) else "false")
    tests, failures, errors, skipped = _counts(ts)
    classname = "kchaos.suite." + "".join(c if c.isalnum() or c in "_.-" else "_" for c in str(rec.get("name")))
    extra: ET.Element | None = None
    if outcome in ("skipped", "pending"):
        extra = ET.Element("testcase", classname=classname, name="run", time="0")
        ET.SubElement(extra, "skipped", message=_x(rec.get("skip_reason") or "not run"))
        tests, skipped = tests + 1, skipped + 1
    elif outcome in ("error", "interrupted"):
        extra = ET.Element("testcase", classname=classname, name="run", time="0")
        msg = rec.get("error") or ("the run was interrupted" if outcome == "interrupted" else "harness error")
        el = ET.SubElement(extra, "error", message=_x(str(msg)[:500]), type=outcome)
        el.text = _x(msg)
        tests, errors = tests + 1, errors + 1
    if extra is not None:
        out = ts.find("system-out")
        ts.insert(list(ts).index(out) if out is not None else len(ts), extra)
    _set_counts(ts, tests, failures, errors, skipped)
    d = rec.get("duration_s")
    ts.set("time", f"{float(d):.3f}" if isinstance(d, (int, float)) and not isinstance(d, bool) else "0.000")
    if rec.get("started"):
        ts.set("timestamp", _x(str(rec["started"]).rstrip("Z")))
    return ts


def suite_junit(suite_dir: Path, data: dict[str, Any]) -> bytes:
    root = ET.Element("testsuites", name=_x(f"kchaos suite {data.get('name', '')}"))
    totals = [0, 0, 0, 0]
    total_time = 0.0
    for rec in data.get("runs") or []:
        if not isinstance(rec, dict):
            continue
        ts = _run_testsuite(Path(suite_dir), rec)
        for i, v in enumerate(_counts(ts)):
            totals[i] += v
        total_time += float(ts.get("time", "0"))
        root.append(ts)
    _set_counts(root, *totals)
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_suite_reports(suite_dir: Path, data: dict[str, Any], earlier: list[tuple[str, dict[str, Any]]]) -> Path:
    """Write index.html and junit.xml into the suite folder; return the index's path."""
    suite_dir = Path(suite_dir)
    index = suite_dir / "index.html"
    _write_atomic(index, render_index(suite_dir, data, earlier).encode("utf-8", errors="replace"))
    _write_atomic(suite_dir / "junit.xml", suite_junit(suite_dir, data))
    return index


__all__ = ["write_suite_reports", "load_earlier", "render_index", "suite_junit", "build_context", "is_flaky"]
