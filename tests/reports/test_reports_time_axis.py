"""Every plot's time axis starts at the workload's start, not the harness's:
a long set-up (here 100 s before the first client op) is named in the
captions, not drawn as an empty band on the left of each plot.

``write_setup_gap_run`` is shared with the browser test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.digest import digest
from reports.faults import fault_timeline
from reports.load import load_run

S = 1_000_000_000
SETUP = 100.0          # first client op at 100 s
END = 160.0
LEFT_EDGE = 0.1        # the first data point lies within the left 10 % of the axis


def setup_gap_ops() -> list[dict]:
    """A small history whose client ops start at 100 s: the sampler starts a
    little before them, a consumer polls from 100.1 s, a partition fault at 120-135 s, an unclean election of
    p0 (n1 -> n2, n2 not in the ISR) at 130 s."""
    ev: list[tuple[float, dict]] = []
    counters = {0: 0, 1: 0}
    for proc in (0, 1):
        t = SETUP + proc * 0.05
        while t < END - 1:
            p = (int(t * 10) + proc) % 2
            v = counters[p]
            counters[p] += 1
            ev.append((t, {"process": proc, "type": "invoke", "f": "send", "value": [[p, v, None]]}))
            ev.append((t + 0.02, {"process": proc, "type": "ok", "f": "send", "value": [[p, v, v]]}))
            t += 0.25
    # a consumer (process 2) polls both partitions every 0.5 s and reads what
    # was acknowledged until 0.3 s before (so its reads lag a little)
    acks = sorted((at, op["value"][0]) for at, op in ev if op["type"] == "ok" and op["f"] == "send")
    read, t = 0, SETUP + 0.1
    while t < END - 1:
        new = [m for at, m in acks[read:] if at <= t - 0.3]
        read += len(new)
        recs = {str(q): [[m[2], m[1]] for m in new if m[0] == q] for q in (0, 1)}
        ev.append((t, {"process": 2, "type": "invoke", "f": "poll", "value": None}))
        ev.append((t + 0.01, {"process": 2, "type": "ok", "f": "poll", "value": recs}))
        t += 0.5
    t = SETUP - 1.5
    while t < END:
        p0 = {"leader": 1, "isr": [1, 2, 3], "epoch": 0}
        if 121 <= t < 130:
            p0 = {"leader": 1, "isr": [1], "epoch": 0}
        elif t >= 130:
            p0 = {"leader": 2, "isr": [2], "epoch": 1}
        ev.append((t, {"process": "sampler", "type": "ok", "f": "sample",
                       "value": {"controller": 1, "partitions": {"0": p0, "1": {"leader": 2, "isr": [2, 3, 1],
                                                                            "epoch": 0}}}}))
        t += 1.0
    for t, f, value in ((120.0, "start-partition", {"action": "start", "fault": "partition", "nodes": ["n1"]}),
                        (135.0, "heal", {"action": "heal", "fault": "partition", "nodes": ["n1"]})):
        ev.append((t, {"process": "nemesis", "type": "invoke", "f": f, "value": value}))
        ev.append((t + 0.1, {"process": "nemesis", "type": "info", "f": f, "value": value}))
    ev.sort(key=lambda e: e[0])
    return [{"index": i, "time": int(t * S), **op} for i, (t, op) in enumerate(ev)]


def write_setup_gap_run(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"name": "setup-gap", "seed": 1, "nodes": ["n1", "n2", "n3"],
                                                     "nemesis": ["partition"]}))
    with open(run_dir / "history.jsonl", "w") as fh:
        fh.write(json.dumps({"kchaos-history": 2}) + "\n")
        for op in setup_gap_ops():
            fh.write(json.dumps(op) + "\n")
    return run_dir


def left_fraction(first_x: float, x_min: float, x_max: float) -> float:
    return (first_x - x_min) / (x_max - x_min)


def _plots(ops):
    from reports.plots import make_plots
    d = digest(ops)
    return d, make_plots(d, fault_timeline(d), {}, None, None)


def test_digest_knows_the_workload_start():
    d = digest(setup_gap_ops())
    assert d.start == pytest.approx(SETUP)      # the first client op, not the earlier sample
    assert d.setup == pytest.approx(SETUP)
    assert d.span == pytest.approx(d.duration - SETUP)
    assert digest([]).start is None and digest([]).origin == 0.0


def test_every_plot_starts_at_the_workload_start():
    d, plots = _plots(setup_gap_ops())
    assert [p.id for p in plots] == ["throughput", "latency", "offsets", "unseen", "lag", "leaders"]
    for p in plots:
        assert p.uri, (p.id, p.note)
        assert p.origin == pytest.approx(SETUP)
        assert p.x_min == pytest.approx(0.0)
        assert p.x_max == pytest.approx(d.duration - SETUP)
        assert p.first_x is not None, p.id
        assert 0.0 <= left_fraction(p.first_x, p.x_min, p.x_max) < LEFT_EDGE, (p.id, p.first_x, p.x_max)
        assert "harness" not in p.caption          # one clock: no caption explains another


def test_fault_bands_and_elections_move_with_the_axis():
    """The bands and election markers are drawn at (time - workload start)."""
    import matplotlib
    from matplotlib.figure import Figure

    from reports import plots as P

    ops = setup_gap_ops()
    d = digest(ops)
    tl = fault_timeline(d)
    elections = P._derive_elections(d.samples)
    assert elections and elections[0]["time"] / 1e9 == pytest.approx(130.5)   # the first sample after 130 s
    with matplotlib.rc_context(P.RC):
        fig = Figure()
        ax = fig.add_subplot()
        P.shade(ax, tl, d.origin)
        bands = ax.collections[0]            # one collection of every fault band, not data
        assert bands.get_gid() == P.MARKER
        band = bands.get_paths()[0].vertices[:, 0]
    assert min(band) == pytest.approx(120.0 - SETUP, abs=0.2)
    assert max(band) == pytest.approx(135.1 - SETUP, abs=0.2)
    # the leaders plot's election marker sits at 30.5 s, not 130.5 s: its first
    # data point is still at the left edge and the marker is not taken for data
    p = P.leaders_plot(d, tl, elections, derived=True)
    assert left_fraction(p.first_x, p.x_min, p.x_max) < LEFT_EDGE


def test_without_setup_gap_nothing_moves():
    """A history whose client ops start at 0 keeps its times."""
    ops = [dict(op, time=op["time"] - int(SETUP * S)) for op in setup_gap_ops()
           if op["time"] >= int(SETUP * S)]
    d, plots = _plots(ops)
    assert d.origin == 0.0
    for p in plots:
        assert p.origin == 0.0 and p.x_min == 0.0
        assert left_fraction(p.first_x, p.x_min, p.x_max) < LEFT_EDGE


@pytest.mark.parametrize("kind", ["valid", "invalid", "unknown"])
def test_fixture_reports_start_at_the_workload(kind, fixture_copy):
    run = load_run(fixture_copy(kind))
    from reports.plots import make_plots
    d = run.digest()
    plots = make_plots(d, fault_timeline(d), {a.type: a.witnesses for a in run.anomalies()},
                       run.unclean_elections if run.results is not None else None, None)
    for p in plots:
        if p.uri:
            assert left_fraction(p.first_x, p.x_min, p.x_max) < LEFT_EDGE, (kind, p.id)


def test_report_html_names_the_origin(tmp_path):
    from reports import render_run
    from reports.render import build_context

    run_dir = write_setup_gap_run(tmp_path / "run")
    ctx = build_context(load_run(run_dir))
    assert ctx["workload_start"] == "100.0"
    assert any(k == "duration" and "(set-up 100.0 s, workload " in v for k, v in ctx["summary"])
    html = render_run(run_dir).read_text()
    assert 'id="time-origin"' in html
    assert "the 100.0 s of set-up before it count as negative" in html   # said once, at the top
    for pid in ("throughput", "latency", "offsets", "unseen", "lag", "leaders"):
        assert f'<figure id="plot-{pid}" data-x-min="0" ' in html
    assert "since the harness started" not in html
