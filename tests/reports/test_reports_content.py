"""The report a person reads (issue 33): what was checked first, no raw JSON,
one clock counted from the workload's start."""
from __future__ import annotations

import html as html_lib
import json
import re

from checkers.result import ANOMALY_TYPES
from history.ops import header
from reports import render_run
from reports.load import load_run
from reports.render import build_context
from reports.view import context_items, flat_rows, secs, words


def _text(page: str) -> str:
    """The page's visible text (no style, no tags, entities decoded)."""
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", page))


def test_words_are_not_json():
    assert words({"engine": "reference", "master": None, "seconds": 0.42}) == "engine reference, seconds 0.42"
    assert words(["n1", "n2"]) == "[n1, n2]"
    assert words({"nodes": ["n1"], "extra": {"a": 1}}) == "nodes [n1], extra (a 1)"
    assert flat_rows({"workload": {"kind": "queue", "acks": "all"}, "seed": 3, "empty": {}}) == \
        [("workload.kind", "queue"), ("workload.acks", "all"), ("seed", 3), ("empty", {})]


def test_one_clock_counts_set_up_as_negative():
    assert secs(0.5e9, 2.0) == "-1.500" and secs(3e9, 2.0) == "1.000" and secs(None, 2.0) == ""
    ctx = context_items({"faults": [{"f": "start-partition", "value": {"nodes": ["n1"]}, "time": 1_000_000_000}],
                         "sample": {"leader": 1, "isr": [1], "time": 3_000_000_000}}, origin=2.0)
    assert "since -1.000 s" in ctx["faults"][0][0] and ctx["sampled_at"] == "1.000"


def test_valid_report_checked_lines_and_quiet_table(rendered):
    ctx = build_context(load_run(rendered["valid"]), plots=False)
    checked = dict(ctx["checked"])
    assert list(checked) == ["writes", "reads checked", "elections", "faults", "write availability"]
    assert checked["writes"] == "144 acknowledged, 144 of them read back"
    assert checked["reads checked"] == "73 completed polls"
    assert checked["faults"].startswith("partition (1 interval, ")
    # every type is either a section (it found something) or a row of the compact table
    assert {a["type"] for a in ctx["sections"]} == {"poll-skip"}
    assert {a["type"] for a in ctx["quiet"]} | {"poll-skip"} == set(ANOMALY_TYPES)


def test_no_raw_json_and_one_clock_in_the_reports(rendered):
    for kind in ("valid", "invalid", "unknown"):
        text = _text((rendered[kind] / "report.html").read_text(encoding="utf-8"))
        assert not re.search(r'\{"|":|\["', text), kind
        assert "since the harness started" not in text, kind
    page = (rendered["valid"] / "report.html").read_text(encoding="utf-8")
    assert "reference engine, 0.42 s" in page
    assert '<td class="mono">workload.kind</td><td class="wrap mono">queue</td>' in page
    # the first partition began 5.0 s after the harness started, 4.8 s after the workload did
    assert '<td class="num">4.800</td>' in page


def test_wall_clock_start_said_once(fixture_copy):
    """With the history's header, the top line gives the workload's start on the wall clock."""
    run_dir = fixture_copy("valid")
    hist = run_dir / "history.jsonl"
    zero_ns = 1_700_000_000 * 1_000_000_000          # 2023-11-14 22:13:20 UTC at history time 0
    hist.write_text(json.dumps(header(zero_ns)) + "\n" + hist.read_text())
    ctx = build_context(load_run(run_dir), plots=False)
    assert ctx["wall_start"] == "2023-11-14 22:13:20 UTC"   # + the 0.2 s of set-up, in whole seconds
    render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert page.count("2023-11-14 22:13:20 UTC") == 1
