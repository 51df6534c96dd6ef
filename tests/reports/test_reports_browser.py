"""The generated report in a real headless Chromium, driven by Selenium
through Debian's chromedriver (helpers shared with the screenshot script in
scripts/browser.py).

Chromium and chromedriver are part of the set-up: if either is missing this
FAILS, it does not skip.
Screenshots go to $KCHAOS_SCREENSHOT_DIR when set, else to a tmp dir (the
path is printed).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from browser import ChromiumMissing, load, page_events, screenshot, start_chromium  # noqa: E402

pytestmark = pytest.mark.browser

EXPECT = {  # kind -> (verdict attribute, verdict text, anomaly types that must be marked failing)
    "valid": ("valid", "valid", []),
    "invalid": ("invalid", "INVALID", ["lost-write", "inconsistent-offset", "unclean-election"]),
    "unknown": ("unknown", "unknown", []),
}

PROBE = r"""
  const v = document.getElementById('verdict');
  const imgs = Array.from(document.querySelectorAll('img.plot'));
  return {
    verdict: v && v.dataset.verdict,
    verdictText: v && v.textContent.trim(),
    verdictColor: v && getComputedStyle(v).color,
    verdictVisible: !!v && v.getBoundingClientRect().height > 10,
    // a section per type that found something, a row of the compact table per quiet one
    sections: Array.from(document.querySelectorAll('[data-anomaly]')).map(s => s.dataset.anomaly),
    failing: Array.from(document.querySelectorAll('section.anomaly.failing')).map(s => s.dataset.anomaly),
    witnessRows: document.querySelectorAll('section.anomaly table.ops tbody tr').length,
    images: imgs.map(i => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
                            scheme: i.src.split(':')[0]})),
    scripts: document.scripts.length,
    xss: typeof window.__kchaos_xss,
    alerted: window.__kchaos_alerts || 0,
    bodyText: document.body.innerText,
  };
"""

# Installed before any page script could run: counts alert/confirm/prompt calls.
HOOK = """
window.__kchaos_alerts = 0;
for (const name of ['alert', 'confirm', 'prompt', 'print']) {
  window[name] = function () { window.__kchaos_alerts++; };
}
"""


@pytest.fixture(scope="module")
def browser():
    """The driver, or why there is none (each test then fails with it)."""
    try:
        driver = start_chromium(viewport=(1280, 900), logs=True)
    except ChromiumMissing as e:
        yield str(e)
        return
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shot_dir(tmp_path_factory) -> Path:
    d = os.environ.get("KCHAOS_SCREENSHOT_DIR")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.parametrize("kind", list(EXPECT))
def test_report_in_chromium(kind, rendered, browser, shot_dir):
    if isinstance(browser, str):
        pytest.fail(f"the browser tests need headless Chromium and chromedriver: {browser}", pytrace=False)
    report = (rendered[kind] / "report.html").resolve()
    url = report.as_uri()
    page_events(browser)                # drop what earlier pages logged
    browser.get_log("browser")
    load(browser, url)
    info = browser.execute_script(PROBE)
    events = page_events(browser)       # Network.* and Page.* DevTools events of this page
    console = browser.get_log("browser")  # console calls, exceptions, CSP and other Log entries

    verdict, label, failing = EXPECT[kind]
    assert info["verdict"] == verdict and info["verdictText"] == label and info["verdictVisible"]
    assert set(info["sections"]) >= {"lost-write", "inconsistent-offset", "unclean-election", "duplicate"}
    assert sorted(info["failing"]) == sorted(failing)
    if kind == "invalid":
        assert info["verdictColor"] == "rgb(201, 42, 42)"
        assert info["witnessRows"] > 10
        assert "<script>alert(1)</script>" in info["bodyText"]      # shown as text
    if kind == "valid":
        assert info["verdictColor"] == "rgb(43, 138, 62)"

    # plots: present, inline and decoded
    assert len(info["images"]) == 6, info["images"]
    for img in info["images"]:
        assert img["complete"] and img["w"] > 0 and img["h"] > 0 and img["scheme"] == "data", img

    # the payloads did not run
    assert info["scripts"] == 0
    assert info["xss"] == "undefined"
    assert info["alerted"] == 0
    assert not [e for e in events if e["method"] == "Page.javascriptDialogOpening"]

    # no console errors, no exceptions, no CSP violations: chromedriver logs
    # console.error/assert and exceptions as SEVERE, console.warn as WARNING,
    # and Log entries (CSP, network, interventions) at their own level
    problems = [e for e in console if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []

    # no network beyond the file itself and data: URIs
    urls = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    assert url in urls
    bad = [u for u in urls if not (u.startswith("file:") or u.startswith("data:"))]
    assert bad == []
    assert not [e for e in events if e["method"] == "Network.loadingFailed"]

    png = screenshot(browser, shot_dir / f"report-{kind}.png", full_page=True)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    print(f"screenshot: {png}")


def test_report_screenshot_stacks_the_chosen_parts(rendered, tmp_path):
    """scripts/report_screenshot.py: one PNG with each chosen part of the report, as Chromium draws it."""
    import subprocess
    import sys

    from PIL import Image
    script = Path(__file__).resolve().parents[2] / "scripts" / "report_screenshot.py"
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, str(script), str(rendered["invalid"]), str(out),
                           "--part", "header", "--part", "#anomaly-lost-write", "--part", "#no-such-part"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 parts, 1 not in this report" in done.stdout
    img = Image.open(out).convert("RGB")
    assert img.width > 600 and img.height > 200
    # the verdict badge's red is in the picture: the header was drawn, not a blank page
    assert any(r > 150 and g < 80 and b < 80 for _, (r, g, b) in img.getcolors(1 << 24))

    missing = subprocess.run([sys.executable, str(script), str(tmp_path), str(out)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 64 and missing.stderr.count("\n") == 1 and "no report" in missing.stderr


AXES_PROBE = r"""
  const origin = document.getElementById('time-origin');
  return {
    origin: origin && origin.innerText,
    clock: (document.getElementById('clock') || {}).innerText || '',
    plots: Array.from(document.querySelectorAll('#plots figure')).map(f => {
      const img = f.querySelector('img.plot');
      return {id: f.id, xMin: f.dataset.xMin, xMax: f.dataset.xMax, firstX: f.dataset.firstX,
              origin: f.dataset.origin, caption: (f.querySelector('figcaption') || {}).innerText || '',
              drawn: !!img && img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 600};
    }),
  };
"""


def _setup_gap_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("kchaos_test_time_axis",
                                                  Path(__file__).resolve().parent / "test_reports_time_axis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["setup-gap", *EXPECT])
def test_plots_start_at_the_workload_start(kind, rendered, browser, tmp_path, shot_dir):
    """The first data point of each plot lies near the left edge of its axis,
    also when the set-up before the workload took 100 s."""
    if isinstance(browser, str):
        pytest.fail(f"the browser tests need headless Chromium and chromedriver: {browser}", pytrace=False)
    from reports import render_run

    tax = _setup_gap_module()
    if kind == "setup-gap":
        run_dir = tax.write_setup_gap_run(tmp_path / "setup-gap")
        render_run(run_dir)
    else:
        run_dir = rendered[kind]
    load(browser, (run_dir / "report.html").resolve().as_uri())
    info = browser.execute_script(AXES_PROBE)
    assert [p["id"] for p in info["plots"]] == ["plot-throughput", "plot-latency", "plot-offsets", "plot-unseen",
                                                "plot-lag", "plot-leaders"]
    for p in info["plots"]:
        assert p["drawn"], p
        x_min, x_max, first_x = float(p["xMin"]), float(p["xMax"]), float(p["firstX"])
        assert x_min == 0.0 and x_max > 0, p
        assert 0.0 <= tax.left_fraction(first_x, x_min, x_max) < tax.LEFT_EDGE, p
        assert "harness" not in p["caption"]       # one clock: no caption explains another
    assert info["origin"] and "workload's start" in info["origin"]
    if kind == "setup-gap":
        assert "the 100.0 s of set-up before it count as negative" in info["clock"]   # said once, at the top
        assert all(float(p["origin"]) == pytest.approx(tax.SETUP) for p in info["plots"])
        png = screenshot(browser, shot_dir / "report-setup-gap.png", full_page=True)
        print(f"screenshot: {png}")
