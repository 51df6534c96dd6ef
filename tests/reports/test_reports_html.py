"""report.html: content, self-containment, escaping, robustness."""
from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from checkers.result import ANOMALY_TYPES
from reports import console_summary, render_run
from reports.load import load_run
from reports.render import render_html

XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
REPORTS_PKG = Path(__file__).resolve().parents[2] / "reports"
PLOT_IDS = ("plot-throughput", "plot-latency", "plot-offsets", "plot-unseen", "plot-lag", "plot-leaders")


class Doc(HTMLParser):
    """Just enough DOM for the assertions: elements with attributes, the text
    of elements by id, and every URL-bearing attribute."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.urls: list[tuple[str, str, str]] = []
        self.text_by_id: dict[str, str] = {}
        self._open_ids: list[tuple[str, str, int]] = []
        self.tags: list[str] = []
        self.rows_by_section: dict[str, int] = {}
        self._section: str | None = None
        self._in_ops_table = 0
        self._in_tbody = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        self.elements.append((tag, a))
        self.tags.append(tag)
        for k in ("src", "href", "action", "srcset", "poster", "data"):
            if k in a:
                self.urls.append((tag, k, a[k]))
        if tag == "section" and "data-anomaly" in a:
            self._section = a["data-anomaly"]
            self.rows_by_section[self._section] = 0
        if tag == "table" and "ops" in a.get("class", "").split():
            self._in_ops_table += 1
        if tag == "tbody":
            self._in_tbody = True
        if tag == "tr" and self._in_ops_table and self._section and self._in_tbody:
            self.rows_by_section[self._section] += 1
        if "id" in a:
            self._open_ids.append((a["id"], tag, 0))
            self.text_by_id[a["id"]] = ""

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_tbody = False
        if tag == "table" and self._in_ops_table:
            self._in_ops_table -= 1
        if tag == "section" and self._section and not self._in_ops_table:
            self._section = None
        if self._open_ids and self._open_ids[-1][1] == tag:
            self._open_ids.pop()

    def handle_data(self, data):
        for id_, _, _ in self._open_ids:
            self.text_by_id[id_] += data

    def by_attr(self, name: str, value: str | None = None) -> list[dict[str, str]]:
        return [a for _, a in self.elements if name in a and (value is None or a[name] == value)]


def _html(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text(encoding="utf-8")


def _assert_self_contained(html: str, doc: Doc) -> None:
    for tag, attr, url in doc.urls:
        assert not re.match(r"\s*(https?:|//|ftp:|ws:)", url, re.I), f"external URL in <{tag} {attr}>: {url[:80]}"
        if tag in ("img", "script", "iframe", "embed", "source", "video", "audio"):
            assert url.startswith("data:"), f"<{tag}> loads a non-inline resource: {url[:80]}"
        if tag == "link" and attr == "href":
            assert url.startswith("data:"), f"<link> loads {url[:80]}"
    assert not re.search(r"url\(\s*['\"]?\s*(https?:|//)", html, re.I), "external url() in CSS"
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?://""", html, re.I)
    assert "@import" not in html
    assert "<script" not in html.lower(), "the report must not carry scripts"


def _plot_images(doc: Doc) -> list[str]:
    return [a["src"] for tag, a in doc.elements if tag == "img" and "plot" in a.get("class", "").split()]


def _check_png(uri: str) -> None:
    assert uri.startswith("data:image/png;base64,")
    data = base64.b64decode(uri.split(",", 1)[1], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


# ---- the three fixtures ------------------------------------------------------

def test_valid_report(rendered):
    run_dir = rendered["valid"]
    html = _html(run_dir)
    doc = Doc(html)
    v = doc.by_attr("id", "verdict")[0]
    assert v["data-verdict"] == "valid" and "verdict-valid" in v["class"]
    assert doc.text_by_id["verdict"].strip() == "valid"
    sections = {a["data-anomaly"] for a in doc.by_attr("data-anomaly")}
    assert set(ANOMALY_TYPES) <= sections
    # the allowed poll-skip: count, reason, its witness row
    ps = doc.by_attr("data-anomaly", "poll-skip")[0]
    assert ps["data-count"] == "2"
    assert "consumers subscribe: a rebalance may skip offsets" in html
    assert doc.rows_by_section["poll-skip"] == 1
    imgs = _plot_images(doc)
    assert len(imgs) == len(PLOT_IDS)
    for uri in imgs:
        _check_png(uri)
    for pid in PLOT_IDS:
        fig = doc.by_attr("id", pid)[0]
        # the time axis as drawn: [0, end] since the workload started, data from its left edge
        x_min, x_max, first_x = float(fig["data-x-min"]), float(fig["data-x-max"]), float(fig["data-first-x"])
        assert x_min == 0.0 and (first_x - x_min) / (x_max - x_min) < 0.1
    assert 'id="time-origin"' in html and "since the workload started" in html
    _assert_self_contained(html, doc)
    cfg = json.loads((run_dir / "config.json").read_text())
    repro = doc.text_by_id["reproduce"]
    assert f"kchaos reproduce {run_dir.resolve()}" in repro
    assert f"kchaos run --config {run_dir.resolve()}/config.json --seed {cfg['seed']}" in repro
    assert "4.1.1" in html and "faults-all-valid" in html
    # fault colour from the history's value["color"] wins over the palette
    assert "#0b7285" in html


def test_invalid_report(rendered):
    run_dir = rendered["invalid"]
    html = _html(run_dir)
    doc = Doc(html)
    assert doc.by_attr("id", "verdict")[0]["data-verdict"] == "invalid"
    assert doc.text_by_id["verdict"].strip() == "INVALID"
    assert "13 lost-write" in doc.text_by_id["headline"]
    results = json.loads((run_dir / "results.json").read_text())
    for typ in ("lost-write", "inconsistent-offset", "unclean-election"):
        sec = doc.by_attr("data-anomaly", typ)[0]
        a = results["anomalies"][typ]
        assert int(sec["data-count"]) == a["count"] > 0
        assert "failing" in sec["class"]
        # one table row per witness op
        assert doc.rows_by_section[typ] == sum(len(w["ops"]) for w in a["witnesses"]) > 0
        assert a["description"] in html
    assert "failing" not in doc.by_attr("data-anomaly", "duplicate")[0]["class"]
    # witness context: the faults and the leader/ISR at the time
    assert "start-partition on n1" in html
    assert "leader n1, ISR [n1]" in html
    assert "leader n3, ISR [n3], epoch 1" in html   # the sample op after the unclean election
    # the unclean elections table
    ue = doc.text_by_id["unclean-elections"]
    assert "17.300" in ue and "[1]" in ue       # 17.5 s on the history's clock, the workload from 0.2 s
    assert len(_plot_images(doc)) == len(PLOT_IDS)
    _assert_self_contained(html, doc)
    assert "--seed 7" in doc.text_by_id["reproduce"]


def test_invalid_report_escapes_history_and_logs(rendered):
    html = _html(rendered["invalid"])
    assert XSS not in html
    assert XSS_ESCAPED in html                      # the failed send's error text, shown as text
    assert "<img src=x" not in html                 # from a node log line and the config
    assert "&lt;img src=x onerror=" in html
    assert "window.__kchaos_xss=1&lt;/script&gt;" in html
    doc = Doc(html)
    assert "script" not in doc.tags
    assert [u for t, k, u in doc.urls if t == "img" and not u.startswith("data:")] == []


def test_unknown_report(rendered):
    run_dir = rendered["unknown"]
    html = _html(run_dir)
    doc = Doc(html)
    assert doc.by_attr("id", "verdict")[0]["data-verdict"] == "unknown"
    assert doc.text_by_id["verdict"].strip() == "unknown"
    errs = doc.text_by_id["checker-errors"]
    assert "OutOfMemoryError" in errs and XSS in errs   # text content: shown, not executed
    assert XSS not in html and XSS_ESCAPED in html
    # types the crashed checkers did not report are shown as unknown, not as zero
    assert "not checked" in doc.text_by_id["anomaly-lost-write"]
    assert "future_option" in html                    # unknown config keys are listed
    _assert_self_contained(html, doc)


# ---- missing and broken pieces ----------------------------------------------

def test_missing_results_is_unknown(fixture_copy):
    run_dir = fixture_copy("valid")
    (run_dir / "results.json").unlink()
    render_run(run_dir)
    html = _html(run_dir)
    doc = Doc(html)
    assert doc.by_attr("id", "verdict")[0]["data-verdict"] == "unknown"
    assert "results.json is missing" in html
    assert len(_plot_images(doc)) == len(PLOT_IDS)     # the history alone still plots
    _assert_self_contained(html, doc)


def test_empty_history_and_no_config(fixture_copy):
    run_dir = fixture_copy("invalid")
    (run_dir / "history.jsonl").write_text("")
    (run_dir / "config.json").unlink()
    render_run(run_dir)
    html = _html(run_dir)
    doc = Doc(html)
    assert doc.by_attr("id", "verdict")[0]["data-verdict"] == "invalid"
    assert "config.json is missing" in html
    assert "No metadata samples" in html
    assert "No acknowledged sends" in html
    # throughput falls back to results.json's availability
    assert len(_plot_images(doc)) == 1
    repro = doc.text_by_id["reproduce"]
    assert "kchaos reproduce" in repro and "--seed" not in repro


def test_bare_folder(tmp_path):
    run_dir = tmp_path / "empty-run"
    run_dir.mkdir()
    render_run(run_dir)
    html = _html(run_dir)
    assert 'data-verdict="unknown"' in html
    assert "history.jsonl is missing" in html and "results.json is missing" in html
    _assert_self_contained(html, Doc(html))


def test_missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        render_run(tmp_path / "nope")


def test_corrupt_pieces(fixture_copy):
    run_dir = fixture_copy("unknown")
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    lines.insert(10, "{not json")
    (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "results.json").write_text("[1, 2")
    run = load_run(run_dir)
    assert run.digest().n_ops == 10
    html = render_html(run, plots=False)
    assert "could not be read past a corrupt line" in html and "10 ops before it are shown" in html
    assert "The checker results (results.json) could not be read" in html
    assert 'data-verdict="unknown"' in html


def test_odd_values_do_not_break_rendering(fixture_copy):
    """Unknown shapes in witnesses, contexts and ops render as escaped text."""
    run_dir = fixture_copy("valid")
    res = json.loads((run_dir / "results.json").read_text())
    odd_op = {"index": "x", "time": "later", "process": {"a": 1}, "type": "ok", "f": "send",
              "value": [["<b>p</b>", "<i>v</i>"], 3, None], "error": {"nested": XSS}, "node": None}
    res["anomalies"]["duplicate"] = {
        "count": "many", "allowed": False, "witnesses": [
            {"partition": "<b>", "offsets": "nope", "values": [[1, 2]], "ops": [odd_op, "junk", odd_op],
             "context": {"faults": ["a string fault", {"f": "kill", "value": {"nodes": "n1", "color": "red;x:url(y)"}}],
              "leader": 3, "isr": "?", "why": XSS}},
            "not a witness"]}
    res["anomalies"]["made-up-type"] = {"count": 1, "allowed": True, "reason": XSS, "witnesses": []}
    res["unclean_elections"].append({"partition": 1, "time": 1e9, "surprise": XSS})
    res["stats"]["weird"] = {"x": XSS}
    res["errors"] = ["a lone surrogate, as a JSON escape can carry: \ud800"]
    (run_dir / "results.json").write_text(json.dumps(res))
    with open(run_dir / "history.jsonl", "a") as fh:
        fh.write(json.dumps({"index": 10**6, "time": 5 * 10**9, "process": "nemesis", "type": "invoke",
                             "f": "start-partition", "value": {"nodes": ["n2"], "color": "javascript:alert(1)"}})
                 + "\n")
    render_run(run_dir)
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert XSS not in html and "<b>p</b>" not in html and "&lt;b&gt;p&lt;/b&gt;" in html
    assert "made-up-type" in html
    for style in re.findall(r'style="([^"]*)"', html):
        assert re.fullmatch(r"background: #[0-9a-f]{6}", style), style
    _assert_self_contained(html, Doc(html))


def test_no_safe_filter_or_markup_on_data():
    template = (REPORTS_PKG / "report.html.j2").read_text()
    assert "|safe" not in template.replace(" ", "") and "autoescape false" not in template
    for py in REPORTS_PKG.glob("*.py"):
        src = py.read_text()
        assert "Markup(" not in src, py
        assert "autoescape=False" not in src.replace(" ", ""), py


def test_large_history_renders_every_plot_within_a_bounded_size(tmp_path):
    """~100k ops with samples and faults: plotting downsamples and stays quick."""
    import random

    run_dir = tmp_path / "big"
    run_dir.mkdir()
    rng = random.Random(1)
    t = 0
    idx = 0
    offs = [0] * 8
    acked: list[list[tuple[int, int]]] = [[] for _ in range(8)]
    cursor = [0] * 8
    lines = []
    for i in range(50_000):
        t += rng.randint(1_000_000, 12_000_000)
        proc = i % 10
        p = rng.randrange(8)
        lines.append({"index": idx, "time": t, "process": proc, "type": "invoke", "f": "send",
                      "value": [[p, i, None]]})
        idx += 1
        typ = "ok" if rng.random() > 0.02 else rng.choice(["fail", "info"])
        val = [[p, i, offs[p]]] if typ == "ok" else [[p, i, None]]
        if typ == "ok":
            offs[p] += 1
        lines.append({"index": idx, "time": t + rng.randint(100_000, 50_000_000), "process": proc, "type": typ,
                      "f": "send", "value": val})
        idx += 1
        if typ == "ok":
            acked[p].append((offs[p] - 1, i))
        if i % 10 == 5:      # a consumer (process 10) reads what was acknowledged since its last poll
            recs = {str(q): [list(r) for r in acked[q][cursor[q]:]] for q in range(8)}
            cursor = [len(acked[q]) for q in range(8)]
            lines.append({"index": idx, "time": t, "process": 10, "type": "invoke", "f": "poll", "value": None})
            lines.append({"index": idx + 1, "time": t + 2_000_000, "process": 10, "type": "ok", "f": "poll",
                          "value": recs})
            idx += 2
        if i % 200 == 0:
            parts = {str(q): {"leader": 1 + (q + i // 5000) % 3, "isr": [1, 2, 3], "epoch": i // 5000}
                     for q in range(8)}
            lines.append({"index": idx, "time": t, "process": "sampler", "type": "ok", "f": "sample",
                          "value": {"controller": 1, "partitions": parts}})
            idx += 1
        if i % 5000 == 0:
            f = ["start-partition", "stop-partition", "kill", "start"][(i // 5000) % 4]
            lines.append({"index": idx, "time": t, "process": "nemesis", "type": "invoke", "f": f,
                          "value": {"nodes": ["n1"]}})
            idx += 1
    with open(run_dir / "history.jsonl", "w") as fh:
        fh.write("\n".join(json.dumps(o) for o in lines) + "\n")
    (run_dir / "config.json").write_text(json.dumps({"name": "big", "seed": 1}))
    render_run(run_dir)      # how long it takes is a figure for a bench, not an assertion here
    html = _html(run_dir)
    assert len(_plot_images(Doc(html))) == len(PLOT_IDS)
    assert len(html) < 3_000_000


# ---- console summary ---------------------------------------------------------

def test_console_summary(rendered):
    from rich.console import Console

    con = Console(record=True, width=140, color_system=None)
    console_summary(rendered["invalid"], console=con)
    out = con.export_text()
    assert "INVALID" in out
    for typ in ANOMALY_TYPES:
        assert typ in out
    assert re.search(r"lost-write\s+│\s+13\s+│\s+no", out)
    assert str((rendered["invalid"] / "report.html").resolve()) in out

    con = Console(record=True, width=140, color_system=None)
    console_summary(rendered["unknown"], console=con)
    out = con.export_text()
    assert "verdict: unknown" in out and "OutOfMemoryError" in out and XSS in out
    assert re.search(r"lost-write\s+│\s+\?", out)


def test_console_summary_without_results(fixture_copy):
    from rich.console import Console

    run_dir = fixture_copy("valid")
    (run_dir / "results.json").unlink()
    con = Console(record=True, width=140, color_system=None)
    console_summary(run_dir, console=con)
    out = con.export_text()
    assert "verdict: unknown" in out and "results.json is missing" in out and "not rendered yet" in out


def test_settled_txns_are_listed_with_their_evidence(fixture_copy):
    """Each info txn's settlement (results.json stats.settled_txns) has a row:
    the op, what it was settled as, from what, and the evidence."""
    run_dir = fixture_copy("valid")
    results = json.loads((run_dir / "results.json").read_text())
    results["stats"]["settled_txns"] = [
        {"op": 41, "outcome": "committed", "from": "markers",
         "evidence": "n1, n2: value 30 at offset 15 (producer 1000), COMMIT marker at offset 19"},
        {"op": 57, "outcome": "unknown", "from": None, "evidence": "the final drain did not complete partition(s) [2]"}]
    (run_dir / "results.json").write_text(json.dumps(results))
    html = render_html(load_run(run_dir), plots=False)
    section = html[html.index('id="settled-txns"'):]
    section = section[: section.index("</section>")]
    assert "COMMIT marker at offset 19" in section and "markers" in section
    assert "did not complete partition(s) [2]" in section and "unknown" in section
    assert "settled_txns" not in html[html.index('id="statistics"'):]


def test_no_settled_txns_no_section(rendered):
    assert 'id="settled-txns"' not in (rendered["valid"] / "report.html").read_text()
