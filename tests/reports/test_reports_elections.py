"""Kafka's own record in report.html: why a verdict is unknown, where elections
came from, each partition's election timeline, and per lost write the election
it is attributed to and the replicas that still hold it."""
from __future__ import annotations

import json
import re
from pathlib import Path

from reports import render_run
from reports.elections_page import ELR_LABEL, MAX_CHANGES_PER_PARTITION
from reports.load import load_run
from reports.render import render_html

S = 1_000_000_000
NO_METADATA = "no metadata log was stored: elections come from the sampler's view (gaps, no ELR)"


def _change(p, offset, t, kind, leader, epoch, isr, elr=(), lke=(), prev=None, **kw):
    return {"partition": p, "offset": offset, "time": None if t is None else int(t * S), "kind": kind,
            "leader": leader, "leader_epoch": epoch, "isr": list(isr), "elr": list(elr),
            "last_known_elr": list(lke), "replicas": [1, 2, 3],
            "previous_leader": None if prev is None else prev[0],
            "previous_isr": None if prev is None else list(prev[1]),
            "previous_elr": None if prev is None else list(prev[2]), "recovering": kw.get("recovering", False)}


CHANGES = [
    _change(0, 10, None, "create", 1, 0, [1, 2, 3]),
    _change(0, 40, 6.0, None, 1, 0, [1], prev=(1, [1, 2, 3], [])),
    _change(0, 77, 17.5, "unclean", 3, 1, [3], prev=(1, [1], []), recovering=True),
    _change(0, 90, 21.0, None, 3, 1, [3, 2], prev=(3, [3], [])),
    _change(1, 11, None, "create", 2, 0, [2, 3, 1]),
    _change(1, 50, 9.0, None, 2, 0, [2], elr=[3], lke=[], prev=(2, [2, 3, 1], [])),
    _change(1, 61, 12.25, "elr", 3, 1, [3], elr=[], lke=[2], prev=(2, [2], [3])),
]
UNCLEAN = {"partition": 0, "time": int(17.5 * S), "index": None, "offset": 77, "kind": "unclean",
           "from_leader": 1, "to_leader": 3, "epoch": 1, "last_isr": [1], "last_elr": [], "isr": [3], "elr": [],
           "recovering": True, "lost_writes": 12, "inconsistent_offsets": 13}
ELR = {"partition": 1, "time": int(12.25 * S), "index": None, "offset": 61, "kind": "elr",
       "from_leader": 2, "to_leader": 3, "epoch": 1, "last_isr": [2], "last_elr": [3], "isr": [3], "elr": [],
       "recovering": False}


def _with_records(run_dir: Path, **over) -> dict:
    """The invalid fixture's results.json with the metadata-log fields, plus ``over``."""
    res = json.loads((run_dir / "results.json").read_text())
    res["unclean_elections"] = [UNCLEAN]
    res["elections"] = {"source": "metadata-log", "notes": [], "elections": [ELR, UNCLEAN]}
    res["partition_changes"] = CHANGES
    res["anomalies"]["elr-election"] = {"count": 1, "allowed": True, "reason": "clean by design (KIP-966)",
                                        "description": "a leader elected from its ELR",
                                        "witnesses": [{"partition": 1, "offsets": [], "values": [], "ops": [],
                                                       **{k: ELR[k] for k in ("kind", "epoch", "to_leader")}}]}
    ws = res["anomalies"]["lost-write"]["witnesses"]
    ws[0].update({"attributed_to": {"partition": 0, "epoch": 1, "to_leader": 3, "time": int(17.5 * S),
                                    "offset": 77, "index": None},
                  "attribution": "epoch", "replicas": {"n1": "absent", "n2": "absent", "n3": "absent"}})
    ws[1].update({"attributed_to": None, "attribution": "start offset of leader epoch 1 unknown",
                  "replicas": {"n1": 20, "n2": "absent", "n3": "not read"}})
    res["stats"]["lost_writes_on_replicas"] = {"absent_everywhere": 11, "present_somewhere": 1, "not_read": 1}
    res["stats"]["unattributed_lost_writes"] = 1
    res.update(over)
    (run_dir / "results.json").write_text(json.dumps(res))
    return res


def _text(html: str) -> str:
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#39;", "'")
    return re.sub(r" ([;,)])", r"\1", text)


def _rows(html: str, partition: int) -> list[str]:
    table = re.search(rf'<table class="ops timeline" data-partition="{partition}">(.*?)</table>', html, re.S)
    assert table, f"no timeline table for partition {partition}"
    return re.findall(r"<tr class=\"change[^\"]*\".*?</tr>", table.group(1), re.S)


def test_timeline_attribution_and_replicas(fixture_copy):
    run_dir = fixture_copy("invalid")
    _with_records(run_dir)
    run = load_run(run_dir)
    origin = run.digest().origin
    html = render_html(run, plots=False)
    text = _text(html)

    # where elections came from
    src = re.search(r'<p class="ctx" id="election-source" data-source="metadata-log">(.*?)</p>', html, re.S)
    assert src and "controller&#39;s metadata log" in src.group(1)
    assert "1 UNCLEAN election" in _text(src.group(1)) and f"1 {ELR_LABEL}" in _text(src.group(1))

    # partition 0: create, ISR shrink, the unclean election (highlighted), ISR expand
    p0 = _rows(html, 0)
    assert len(p0) == 4
    assert ['class="change unclean"' in r for r in p0] == [False, False, True, False]
    unclean = _text(p0[2])
    assert f"{17.5 - origin:.3f}" in unclean and "UNCLEAN election" in unclean and "(leader recovering)" in unclean
    assert "n1 → n3" in unclean and " 1 " in unclean and "[n3]" in unclean and " 77 " in unclean
    assert "partition created" in _text(p0[0]) and "[n1, n2, n3]" in _text(p0[0])
    assert "ISR change" in _text(p0[1]) and "[n1]" in _text(p0[1])
    assert "[n3, n2]" in _text(p0[3])

    # partition 1: the ELR grows, then an ELR election (labelled, not highlighted as unclean)
    p1 = _rows(html, 1)
    assert len(p1) == 3
    elr_row = p1[2]
    assert 'class="change elr"' in elr_row and "unclean" not in elr_row.split(">")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", elr_row, re.S)
    assert cells[0] == f"{12.25 - origin:.3f}" and cells[1] == "61"
    assert ELR_LABEL in cells[2] and cells[3] == "n2 → n3" and cells[4] == "1"
    assert cells[5:8] == ["[n3]", "[]", "[n2]"]               # ISR, ELR, last known ELR
    grow = re.findall(r"<td[^>]*>(.*?)</td>", p1[1], re.S)
    assert "ELR" in grow[2] and grow[5:7] == ["[n2]", "[n3]"]

    # lost writes: attribution, replicas, the section summary
    lost = html[html.index('data-anomaly="lost-write"'):]
    lost = lost[:lost.index("</section>")]
    witnesses = lost.split('<div class="witness">')[1:]
    w1, w2 = _text(witnesses[0]), _text(witnesses[1])
    assert "removed by: unclean election, epoch 1, new leader n3" in w1
    assert f"at {17.5 - origin:.3f} s," in w1   # the report's one clock: since the workload started and "metadata log offset 77" in w1
    assert "n1: absent; n2: absent; n3: absent" in w1 and "(absent from every replica)" in w1
    assert "unattributed: start offset of leader epoch 1 unknown" in w2
    assert "present at offset 20 on n1 — never served" in w2 and "n2: absent" in w2 and "n3: not read" in w2
    assert "absent from every replica" not in w2
    assert "attributed_to" not in lost                         # shown structured, not as raw JSON
    summary = _text(re.search(r'id="lost-write-replicas">(.*?)</p>', lost, re.S).group(1))
    assert "absent from every replica: 11" in summary and "still on some replica (never served): 1" in summary
    assert "not attributed to an unclean election: 1" in summary

    # the unclean elections table gains the metadata offset and last ELR; elr-election allowed with its reason
    ue = html[html.index('<section id="unclean-elections">'):]
    ue = ue[:ue.index("</section>")]
    assert "metadata offset" in ue and "<td class=\"num\">77</td>" in ue
    assert "elr-election" in text and "clean by design (KIP-966)" in text
    assert "The verdict is unknown" not in text                  # invalid: no unknown reasons shown
    assert 'id="unknown-reasons"' not in html


def test_unknown_reasons_and_sampler_source(fixture_copy):
    run_dir = fixture_copy("valid")
    res = json.loads((run_dir / "results.json").read_text())
    reasons = ["3 acknowledged writes were never read (unseen)",
               "the final drain of partition 2 stopped at offset 40 before its end 55: <timeout>"]
    res.update({"valid": "unknown", "unknown": reasons,
                "elections": {"source": "samples", "notes": [NO_METADATA], "elections": []},
                "partition_changes": []})
    res["anomalies"]["duplicate"] = {"count": 2, "allowed": True,
                                     "reason": "enable.idempotence=false with retries: at-least-once delivery",
                                     "witnesses": []}
    (run_dir / "results.json").write_text(json.dumps(res))
    render_run(run_dir)
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    header = html[:html.index("</header>")]
    assert 'data-verdict="unknown"' in header and "The verdict is unknown:" in header
    items = re.findall(r"<li>(.*?)</li>", header[header.index('id="unknown-reasons"'):])
    assert items == [reasons[0], reasons[1].replace("<", "&lt;").replace(">", "&gt;")]
    assert "<timeout>" not in html
    src = re.search(r'id="election-source" data-source="samples">(.*?)</p>', html, re.S)
    assert src and "sampler" in src.group(1) and "no elections" in src.group(1)
    assert '<div class="note election-note">' + NO_METADATA.replace("'", "&#39;") + "</div>" in html
    no_tl = re.search(r'id="no-timeline">(.*?)</p>', html, re.S).group(1)
    assert "No partition changes" in no_tl and "no metadata log was stored" in no_tl
    # an allowance from the producer settings shows its reason (summary table and section)
    assert html.count("enable.idempotence=false with retries: at-least-once delivery") >= 2


def test_timeline_is_bounded_and_plots_draw_elections(fixture_copy):
    run_dir = fixture_copy("invalid")
    n = MAX_CHANGES_PER_PARTITION + 25
    many = [_change(2, 100 + i, 1.0 + i * 0.01, None, 3, 0, [3] if i % 2 else [3, 1, 2], prev=(3, [3, 1, 2], []))
            for i in range(n)]
    _with_records(run_dir, partition_changes=CHANGES + many)
    render_run(run_dir)                                         # with plots: clean elections on the leaders plot
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert len(_rows(html, 2)) == MAX_CHANGES_PER_PARTITION
    assert f"… 25 more changes of partition 2 not listed (the first {MAX_CHANGES_PER_PARTITION} are shown)" in html
    leaders = re.search(r'<figure id="plot-leaders".*?</figure>', html, re.S).group(0)
    assert 'src="data:image/png;base64,' in leaders and "orange diamonds ELR elections" in leaders


def test_old_results_without_records(rendered):
    """A results.json from before the metadata log: no source, no timeline, still renders."""
    html = (rendered["invalid"] / "report.html").read_text(encoding="utf-8")
    assert 'id="election-timeline"' in html
    assert "do not say where elections came from" in html
    assert 'id="no-timeline"' in html and "removed by:" not in html


def test_odd_record_shapes_render(fixture_copy):
    """Unexpected shapes in the new fields render as escaped text, never raise."""
    run_dir = fixture_copy("invalid")
    xss = "<script>alert(1)</script>"
    odd = [{"partition": [1], "offset": "x", "time": "soon", "kind": ["elr"], "leader": {"a": xss},
            "isr": xss, "elr": None, "previous_leader": 1},
           {"partition": xss, "kind": "unclean", "leader": 2, "isr": [1, "two"]}, "not a change"]
    res = _with_records(run_dir, unknown=xss, partition_changes=odd,
                        elections={"source": ["?"], "notes": xss, "elections": [{"kind": ["x"]}, 3]})
    ws = res["anomalies"]["lost-write"]["witnesses"]
    ws[2].update({"attributed_to": "weird", "attribution": [xss], "replicas": {xss: [1]}})
    res["stats"]["lost_writes_on_replicas"] = xss
    (run_dir / "results.json").write_text(json.dumps({**res, "valid": "unknown"}))
    render_run(run_dir)
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert xss not in html and "&lt;script&gt;" in html
    assert 'id="unknown-reasons"' in html and 'class="change unclean"' in html
