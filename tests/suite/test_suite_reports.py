"""The suite's index.html and aggregate junit.xml, from fabricated run folders."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from checkers.result import ANOMALY_TYPES
from harness.suite import SuiteRun
from harness.suite_config import expand, parse
from reports.suite_report import load_earlier, suite_junit, write_suite_reports

from .fakes import FakeClock, FakeRunner, make_run_dir

EVIL = '<script>alert("x")</script>'


class Index(HTMLParser):
    """Rows (data-outcome, data-cell), report links and trend marks of index.html."""

    def __init__(self, html: str):
        super().__init__()
        self.rows: list[dict] = []
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.tags: set[str] = set()
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if "href" in a:
            self.hrefs.append(a["href"])
        if "src" in a:
            self.srcs.append(a["src"])
        cls = (a.get("class") or "").split()
        if tag == "tr" and "run" in cls:
            self.rows.append({"outcome": a["data-outcome"], "cell": a["data-cell"], "report": None, "trend": []})
        elif tag == "a" and "report" in cls:
            self.rows[-1]["report"] = a["href"]
        elif "t" in cls and self.rows and tag in ("a", "span") and "title" in a:
            self.rows[-1]["trend"].append((cls[1][2:], a.get("href"), "t-current" in cls))


def run_suite(tmp_path: Path, plan: dict[str, str], **extra):
    data = {"name": "rs", "description": f"nightly {EVIL}",
            "base": {"time_limit": 5, "producer": {"client.id": EVIL}},
            "matrix": {"seeds": [1, 2, 3, 4]}, **extra}
    s = parse(data)
    clock = FakeClock()
    return SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=FakeRunner(plan, clock), clock=clock).execute()


def test_index_rows_links_verdicts_and_escaping(tmp_path):
    suite_dir, code = run_suite(tmp_path, {"rs-s2": "invalid", "rs-s3": "unknown", "rs-s4": "error"})
    assert code == 3
    html = (suite_dir / "index.html").read_text()
    idx = Index(html)
    assert [r["outcome"] for r in idx.rows] == ["valid", "invalid", "unknown", "error"]
    assert [r["cell"] for r in idx.rows] == [f"kafka=4.3.1 variant=base nemesis=none seed={i}" for i in (1, 2, 3, 4)]
    for r in idx.rows:
        assert r["report"] and not r["report"].startswith("/") and (suite_dir / r["report"]).is_file()
        assert r["report"].startswith("../../../rs-s")
    # self-contained: no scripts, no external resources, only relative or in-page links
    assert "script" not in idx.tags and "img" not in idx.tags
    assert not re.search(r"https?://", html)
    for h in idx.hrefs:
        assert h == "data:," or not re.match(r"^([a-z]+:|/)", h), h
    # every value is escaped
    assert EVIL not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "&lt;in time&gt;" in html  # the harness error text
    assert 'data-verdict="error"' in html
    assert "3 lost-write" in html and "1 inconsistent-offset" in html
    # invalid anomalies are red pills, listed per row
    row2 = html.split('data-cell="kafka=4.3.1 variant=base nemesis=none seed=2"')[1].split("</tr>")[0]
    assert 'pill-fail' in row2 and "lost-write" in row2


def test_trend_shows_earlier_suite_runs_per_cell(tmp_path):
    first, _ = run_suite(tmp_path, {"rs-s2": "invalid"})
    second, _ = run_suite(tmp_path, {"rs-s3": "unknown"})
    # an earlier suite run with a different matrix: cell seed=4 is absent from it
    third, code = run_suite(tmp_path, {"rs-s1": "invalid"}, matrix={"seeds": [1, 2, 3, 4, 5]})
    assert code == 1
    assert [d for d, _ in load_earlier(third, 10)] == [first.name, second.name]
    assert [d for d, _ in load_earlier(third, 1)] == [second.name]
    idx = Index((third / "index.html").read_text())
    trend = {r["cell"][-6:]: r["trend"] for r in idx.rows}
    outcomes = {k: [m[0] for m in v] for k, v in trend.items()}
    assert outcomes["seed=1"] == ["valid", "valid", "invalid"]
    assert outcomes["seed=2"] == ["invalid", "valid", "valid"]
    assert outcomes["seed=3"] == ["valid", "unknown", "valid"]
    assert outcomes["seed=5"] == ["absent", "absent", "valid"]
    assert [m[2] for m in trend["seed=1"]] == [False, False, True]
    # earlier marks link to that suite run's report of the same cell
    link = trend["seed=2"][0][1]
    assert link.startswith("../") and (third / link).resolve().is_file()
    earlier_doc = json.loads((first / "suite.json").read_text())
    assert (third / link).resolve() == (first / earlier_doc["runs"][1]["report"]).resolve()
    assert f'href="../{second.name}/index.html"' in (third / "index.html").read_text()


def test_trend_length_is_bounded(tmp_path):
    dirs = [run_suite(tmp_path, {}, trend=2)[0] for _ in range(4)]
    idx = Index((dirs[-1] / "index.html").read_text())
    assert all(len(r["trend"]) == 3 for r in idx.rows)


def test_aggregate_junit_one_testsuite_per_run_with_counts(tmp_path):
    data = {"name": "js", "time_budget": 250, "run_overhead": 0, "base": {"time_limit": 5},
            "matrix": {"seeds": [1, 2, 3, 4, 5]}}
    s = parse(data)
    clock = FakeClock()
    runner = FakeRunner({"js-s2": "invalid", "js-s3": "unknown", "js-s4": "error"}, clock, seconds=60)
    suite_dir, code = SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=runner, clock=clock).execute()
    assert code == 3
    root = ET.parse(suite_dir / "junit.xml").getroot()
    suites = root.findall("testsuite")
    assert [t.get("name") for t in suites] == ["js-s1", "js-s2", "js-s3", "js-s4", "js-s5"]

    def counts(el):
        return tuple(int(el.get(k)) for k in ("tests", "failures", "errors", "skipped"))

    def props(el):
        return {p.get("name"): p.get("value") for p in el.iter("property")}

    valid, invalid, unknown, error, skipped = suites
    n = len(ANOMALY_TYPES)
    assert counts(valid) == (n, 0, 0, 0)
    assert counts(invalid) == (n, 2, 0, 0)
    assert {tc.get("name") for tc in invalid.findall("testcase") if tc.find("failure") is not None} == \
        {"lost-write", "inconsistent-offset"}
    assert counts(unknown) == (n, 0, n, 0)
    assert "<b>boom</b>" in unknown.find("testcase/error").text  # checker errors carried, as text
    assert counts(error) == (n + 1, 0, n + 1, 0)  # no results: every type unknown, plus the harness error
    run_case = [tc for tc in error.findall("testcase") if tc.get("name") == "run"][0]
    assert run_case.find("error").get("message").startswith("ClusterError")
    assert counts(skipped) == (1, 0, 0, 1) and "time budget" in skipped.find("testcase/skipped").get("message")
    assert props(invalid)["cell"] == "kafka=4.3.1 variant=base nemesis=none seed=2"
    assert props(invalid)["outcome"] == "invalid" and props(invalid)["verdict"] == "invalid"
    assert float(valid.get("time")) == 60.0
    assert counts(root) == tuple(sum(c) for c in zip(*map(counts, suites)))
    assert counts(root) == (4 * n + 2, 2, 2 * n + 1, 1)


def test_reports_render_from_run_folders_made_elsewhere(tmp_path):
    """write_suite_reports needs only suite.json data and the run folders it points at."""
    suite_dir = tmp_path / "store" / "suites" / "x" / "20250101T000000"
    suite_dir.mkdir(parents=True)
    good = make_run_dir(tmp_path / "store" / "x-a" / "t1", "x-a", "valid")
    crashed = make_run_dir(tmp_path / "store" / "x-b" / "t1", "x-b", None)
    (crashed / "report.html").unlink()
    runs = [{"index": 1, "cell": "c1", "name": "x-a", "outcome": "valid", "run_dir": "../../../x-a/t1",
             "report": "../../../x-a/t1/report.html", "anomalies": {}},
            {"index": 2, "cell": "c2", "name": "x-b", "outcome": "error", "run_dir": "../../../x-b/t1",
             "report": None, "error": "boom", "anomalies": {}},
            {"index": 3, "cell": "c3", "name": "x-c", "outcome": "pending"}]
    data = {"name": "x", "status": "running", "runs": runs}
    write_suite_reports(suite_dir, data, [])
    idx = Index((suite_dir / "index.html").read_text())
    assert [r["outcome"] for r in idx.rows] == ["valid", "error", "pending"]
    assert idx.rows[0]["report"] == "../../../x-a/t1/report.html" and idx.rows[1]["report"] is None
    assert 'data-verdict="running"' in (suite_dir / "index.html").read_text()
    root = ET.fromstring(suite_junit(suite_dir, data))
    assert len(root.findall("testsuite")) == 3 and root.get("tests") == str(len(ANOMALY_TYPES) * 2 + 2)
    assert good.is_dir()
