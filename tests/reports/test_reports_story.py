"""The story at the top of an invalid report, witnesses grouped under a shared
context, and the two Jepsen views (unseen over time, real-time lag)."""
from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from reports import render_run
from reports.digest import digest
from reports.faults import fault_timeline
from reports.load import load_run
from reports.render import build_context
from reports.story import MAX_LINES, election_text, fault_label, story
from reports.view import context_items, group_witnesses
from reports.visibility import lag_plot, lag_points, unseen_plot, unseen_series

S = 1_000_000_000


def _invalid(fixture_copy):
    run = load_run(fixture_copy("invalid"))
    d = run.digest()
    return run, d, fault_timeline(d)


# ---- the story ----------------------------------------------------------------

def test_story_of_the_invalid_fixture(fixture_copy):
    run, d, tl = _invalid(fixture_copy)
    lines = story(run.results, d.origin, d.ack_time, tl.intervals)
    assert 1 <= len(lines) <= MAX_LINES
    first = lines[0]
    res = run.results
    n_lost = res["anomalies"]["lost-write"]["count"]
    assert first.startswith(f"{res['stats']['acknowledged']} acknowledged writes; {n_lost} lost on partition 0, ")
    # when the listed lost writes were acknowledged, on the plots' axis
    acks = [d.ack_time[(0, w["values"][0])] - d.origin for w in res["anomalies"]["lost-write"]["witnesses"]]
    assert f"acknowledged between {min(acks):.1f} s and {max(acks):.1f} s (the 5 listed)" in first
    # the attributed election, on the plots' axis
    t_el = res["unclean_elections"][0]["time"] / 1e9 - d.origin
    assert (f"all attributed to the unclean election of partition 0 at {t_el:.1f} s "
            "(epoch 1, n3 elected outside the last sampled ISR [n1])") in first
    assert "faults active then: partition (cut-replication, n1), kill n1" in first
    # one line per other failing type, with count, partition and time span
    n_inc = res["anomalies"]["inconsistent-offset"]["count"]
    assert lines[1].startswith(f"inconsistent-offset: {n_inc} on partition 0, between ")
    assert lines[2].startswith("unclean-election: 1: the unclean election of partition 0 at ")
    assert len(lines) == 3


def test_story_with_kafkas_record(fixture_copy):
    """Witnesses carrying the checkers' attribution and replica presence; the
    election from the metadata log (ISR and ELR)."""
    run, d, tl = _invalid(fixture_copy)
    res = copy.deepcopy(run.results)
    n = res["anomalies"]["lost-write"]["count"]
    res["unclean_elections"][0].update({"epoch": 3, "last_isr": [1], "last_elr": [], "lost_writes": n})
    res["stats"].update({"lost_writes_on_replicas": {"absent_everywhere": n, "present_somewhere": 0, "not_read": 0},
                         "unattributed_lost_writes": 0})
    first = story(res, d.origin, d.ack_time, tl.intervals)[0]
    assert "(epoch 3, n3 elected outside ISR [n1] ∪ ELR [])" in first
    assert ", absent from every replica; faults active then:" in first

    # two elections and some unattributed: each named with its share
    second = dict(res["unclean_elections"][0], partition=2, time=int(25 * S), epoch=2, to_leader=2, lost_writes=3)
    res["unclean_elections"][0]["lost_writes"] = n - 5
    res["unclean_elections"].append(second)
    res["stats"]["unattributed_lost_writes"] = 2
    res["stats"]["lost_writes_on_replicas"] = {"absent_everywhere": n - 1, "present_somewhere": 1, "not_read": 0}
    first = story(res, d.origin, d.ack_time, tl.intervals)[0]
    assert f"attributed: {n - 5} to the unclean election of partition 0" in first
    assert f"; 3 to the unclean election of partition 2 at {25 - d.origin:.1f} s" in first
    assert "; 2 not attributed to any election" in first
    assert f"{n - 1} absent from every replica, 1 still on a replica (never served)" in first
    assert "on partitions 0, 2" in first


def test_story_only_for_invalid_runs_and_bounded(fixture_copy):
    run, d, tl = _invalid(fixture_copy)
    assert story(None) == []
    assert story(dict(run.results, valid=True)) == []
    assert story(dict(run.results, valid="unknown")) == []
    res = copy.deepcopy(run.results)
    for typ in ("duplicate", "nonlinearizable-offset", "nonmonotonic-send", "nonmonotonic-poll", "poll-skip",
                "phantom-write"):
        res["anomalies"][typ].update(count=2, allowed=False)
    lines = story(res, d.origin, d.ack_time, tl.intervals)
    assert len(lines) == MAX_LINES
    assert lines[-1].startswith("Also failing: ")
    # no lost write: the lines are the failing types only
    res = copy.deepcopy(run.results)
    res["anomalies"]["lost-write"]["count"] = 0
    lines = story(res, d.origin)
    assert [ln.split(":")[0] for ln in lines] == ["inconsistent-offset", "unclean-election"]


def test_election_and_fault_texts():
    e = {"partition": 2, "time": int(50.3 * S), "epoch": 3, "to_leader": 3, "last_isr": [1], "last_elr": []}
    assert election_text(e, 1.2) == "the unclean election of partition 2 at 49.1 s (epoch 3, n3 elected outside ISR [n1] ∪ ELR [])"
    assert fault_label({"f": "kill", "value": {"nodes": ["n1"]}})[1] == "kill n1"
    assert fault_label({"f": "start-partition", "value": {"fault": "partition", "nodes": ["n1"],
                                                          "topology": "one-way"}})[1] == "partition (one-way, n1)"


def test_story_opens_the_report(rendered):
    html = (rendered["invalid"] / "report.html").read_text()
    m = re.search(r'<div id="story">(.*?)</div>', html, re.S)
    assert m and "acknowledged writes;" in m.group(1) and "all attributed to the unclean election" in m.group(1)
    assert html.index('id="story"') < html.index('id="anomalies"')
    assert html.index('id="verdict"') < html.index('id="story"')
    for kind in ("valid", "unknown"):
        assert 'id="story"' not in (rendered[kind] / "report.html").read_text()


# ---- witnesses grouped by context ---------------------------------------------

def test_grouping_keeps_consecutive_shared_contexts():
    ctx = {"faults": [{"f": "kill", "value": {"nodes": ["n1"]}, "time": 5 * S}],
           "sample": {"leader": 1, "isr": [1], "epoch": 0, "time": 7 * S}}
    other = {"faults": [], "sample": {"leader": 3, "isr": [3], "epoch": 1, "time": 9 * S}}
    views = [{"context": context_items(c)} for c in
             [ctx] * 3 + [dict(ctx, sample=dict(ctx["sample"], time=8 * S))] + [other] + [ctx]]
    groups = group_witnesses(views)
    # the sample time does not split a group; a different view does; order is kept
    assert [(len(g["witnesses"]), g["first"]) for g in groups] == [(4, 1), (1, 5), (1, 6)]
    assert groups[0]["context"]["view"] == "leader n1, ISR [n1], epoch 0"


def test_report_shows_a_shared_context_once(fixture_copy):
    run_dir = fixture_copy("invalid")
    res = json.loads((run_dir / "results.json").read_text())
    lw = res["anomalies"]["lost-write"]
    w0 = lw["witnesses"][0]
    lw["witnesses"] = [dict(copy.deepcopy(w0), values=[w0["values"][0] + 1000 + i]) for i in range(12)]
    lw["count"] = 12
    (run_dir / "results.json").write_text(json.dumps(res))
    html = render_run(run_dir).read_text()
    sec = html[html.index('data-anomaly="lost-write"'):]
    sec = sec[:sec.index("</section>")]
    assert sec.count('<div class="ctx-group"') == 1 and 'data-witnesses="12"' in sec
    assert "These 12 witnesses (Witness 1–12) share one context:" in sec
    assert sec.count("faults active:") == 1 and sec.count("leader / ISR:</span>") == 1
    assert sec.count('<div class="witness">') == 12 and "Witness 12</strong>" in sec


# ---- unseen over time, real-time lag -------------------------------------------

def _ops(events):
    return [{"index": i, "time": int(t * S), **op} for i, (t, op) in enumerate(sorted(events, key=lambda e: e[0]))]


def _send(t, p, v, off, proc=0):
    return [(t, {"process": proc, "type": "invoke", "f": "send", "value": [[p, v, None]]}),
            (t + 0.1, {"process": proc, "type": "ok", "f": "send", "value": [[p, v, off]]})]


def _poll(t, recs, proc=5, drain=False):
    extra = {"drain": True} if drain else {}
    return [(t, {"process": proc, "type": "invoke", "f": "poll", "value": None, **extra}),
            (t + 0.1, {"process": proc, "type": "ok", "f": "poll", "value": recs, **extra})]


def _history():
    ev = _send(0.0, 0, 1, 0) + _send(1.0, 0, 2, 1) + _send(2.0, 1, 7, 0) + _send(3.0, 0, 3, 2)
    ev += _poll(4.0, {"0": [[0, 1]]})                       # reads v1 at 4.1: behind acks of offsets 1, 2
    ev += _poll(6.0, {"0": [[1, 2], [2, 3]], "1": []})      # caught up on p0; p1 read nothing
    ev += _poll(8.0, {"1": [[0, 7]]}, drain=True)           # the drain reads p1 (no lag point)
    return _ops(ev)


def test_unseen_counts_acked_values_not_yet_read():
    d = digest(_history())
    xs = np.array([0.05, 0.2, 1.2, 3.2, 4.15, 6.15, 8.15])
    got = unseen_series(d, xs)
    assert got[0].tolist() == [0, 1, 2, 3, 2, 0, 0]
    assert got[1].tolist() == [0, 0, 0, 1, 1, 1, 0]


def test_lag_follows_the_reference_definition():
    d = digest(_history())
    pts = lag_points(d)
    # poll invoked at 4.0 whose last p0 record is offset 0: offset 1 was acked at 1.1
    x, y = pts[0]
    assert x.tolist() == pytest.approx([4.0, 6.0]) and y.tolist() == pytest.approx([4.0 - 1.1, 0.0])
    assert 1 not in pts          # no non-drain read of p1 returned a record


def test_new_plots_render_with_axis_attributes(rendered):
    d = digest(_history())
    tl = fault_timeline(digest([]))
    for p in (unseen_plot(d, tl), lag_plot(d, tl)):
        assert p.uri and p.uri.startswith("data:image/png;base64,")
        assert p.x_min == 0.0 and p.x_max > 0 and p.first_x is not None
        assert "harness" not in p.caption          # one clock: no caption explains another
    assert "no poll" in unseen_plot(d, tl).caption and "non-drain ok poll" in lag_plot(d, tl).caption
    for kind in ("valid", "invalid", "unknown"):
        html = (rendered[kind] / "report.html").read_text()
        for pid in ("unseen", "lag"):
            m = re.search(rf'<figure id="plot-{pid}" data-x-min="([^"]+)" data-x-max="([^"]+)" '
                          rf'data-origin="[^"]+" data-first-x="([^"]+)">', html)
            assert m, (kind, pid)
            x_min, x_max, first_x = map(float, m.groups())
            assert x_min == 0.0 and (first_x - x_min) / (x_max - x_min) < 0.1


def test_new_plots_without_data_say_why():
    d = digest(_ops(_send(0.0, 0, 1, 0)))
    assert lag_plot(d, fault_timeline(digest([]))).note == "No non-drain poll read any record."
    assert unseen_plot(digest([]), fault_timeline(digest([]))).note == "No acknowledged sends in the history."


def test_build_context_carries_story_and_groups(fixture_copy):
    ctx = build_context(load_run(fixture_copy("invalid")), plots=False)
    assert ctx["story"] and " acknowledged writes; " in ctx["story"][0]
    lw = next(a for a in ctx["anomalies"] if a["type"] == "lost-write")
    assert sum(len(g["witnesses"]) for g in lw["groups"]) == len(lw["witnesses"])
