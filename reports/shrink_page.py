"""The shrink page: a shrink's original and shrunk schedules side by side, and
the search candidate by candidate (harness/shrink_cli.py writes ``shrink.json``;
this renders it as ``shrink.html`` beside it)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

TEMPLATES = Path(__file__).parent


def _steps_text(steps: list[dict[str, Any]]) -> str:
    lines = []
    for s in steps:
        value = s.get("value") or {}
        what = ", ".join(f"{k}={v}" for k, v in value.items() if k != "fault")
        lines.append(f"{float(s.get('at', 0)):7.1f}s  {s.get('f')}  {value.get('fault', '')} {what}".rstrip())
    return "\n".join(lines) or "none"


def render_shrink(shrink_dir: Path) -> Path:
    data = json.loads((shrink_dir / "shrink.json").read_text())
    o, s = data["original"], data["shrunk"]
    compared = [
        ("run folder", o["run_dir"], s.get("run_dir") or "not run (no candidate failed)"),
        ("fault steps", len(o["steps"]), len(s["steps"])),
        ("workload (s)", f"{o['time_limit']:g}", f"{s['time_limit']:g}"),
        ("rate (ops/s)", f"{o['rate']:g}", f"{s['rate']:g}"),
        ("concurrency", o["concurrency"], s["concurrency"]),
        ("failing anomaly types", ", ".join(o["failing_types"]) or "none", ", ".join(s["failing_types"]) or "none"),
    ]
    for attempt in data["path"]:
        for r in attempt["runs"]:
            r["link"] = os.path.relpath(Path(r["run_dir"]) / "report.html", shrink_dir) if r.get("run_dir") else ""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("shrink.html.j2").render(
        name=data["name"], headline=data["headline"], toml=data["toml"], rule=data["rule"], compared=compared,
        original_steps=_steps_text(o["steps"]), shrunk_steps=_steps_text(s["steps"]), path=data["path"])
    out = shrink_dir / "shrink.html"
    out.write_text(html)
    return out
