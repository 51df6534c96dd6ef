"""What a person sees first (issue 33), as headless Chromium lays it out at
1280x800: a valid report shows its verdict, what was checked and its first
plot within the first two screens; an invalid one tells its story first.

Like test_reports_browser.py this FAILS, not skips, without Chromium.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from browser import ChromiumMissing, load, start_chromium  # noqa: E402

pytestmark = pytest.mark.browser

SCREEN = (1280, 800)

# Page coordinates (CSS px from the document's top) of the parts that must come first.
PROBE = r"""
  const top = el => el ? el.getBoundingClientRect().top + window.scrollY : null;
  const bottom = el => el ? el.getBoundingClientRect().bottom + window.scrollY : null;
  const firstPlot = document.querySelector('figure img.plot');
  const checked = document.getElementById('checked');
  return {
    verdictBottom: bottom(document.getElementById('verdict')),
    checkedTop: top(checked),
    checkedBottom: bottom(checked),
    checkedLines: checked ? checked.querySelectorAll('dt').length : 0,
    checkedText: checked ? checked.innerText : '',
    firstPlotTop: top(firstPlot),
    firstPlotBottom: bottom(firstPlot),
    storyTop: top(document.getElementById('story')),
    storyBottom: bottom(document.getElementById('story')),
    firstSectionTop: top(document.querySelector('main section')),
    quietRows: document.querySelectorAll('tr.quiet-check').length,
    noneBoxes: Array.from(document.querySelectorAll('section.anomaly'))
      .filter(s => s.innerText.includes('none')).length,
  };
"""


@pytest.fixture(scope="module")
def screen():
    try:
        driver = start_chromium(viewport=SCREEN)
    except ChromiumMissing as e:
        pytest.fail(f"the browser tests need headless Chromium and chromedriver: {e}", pytrace=False)
    try:
        yield driver
    finally:
        driver.quit()


def _probe(driver, run_dir: Path) -> dict:
    load(driver, (run_dir / "report.html").resolve().as_uri())
    assert driver.execute_script("return window.innerHeight") == SCREEN[1]
    return driver.execute_script(PROBE)


def test_valid_report_shows_verdict_checks_and_a_plot_first(rendered, screen):
    info = _probe(screen, rendered["valid"])
    two_screens = 2 * SCREEN[1]
    assert info["verdictBottom"] <= SCREEN[1]
    assert info["checkedLines"] == 5
    for words in ("144 acknowledged, 144 of them read back", "completed polls", "elections",
                  "partition", "writes acknowledged in"):
        assert words in info["checkedText"], words
    assert info["checkedBottom"] <= two_screens
    assert info["firstPlotTop"] is not None and info["firstPlotTop"] < two_screens
    # the checks that found nothing: one compact table, no box saying "none" per type
    assert info["quietRows"] > 20 and info["noneBoxes"] == 0


def test_invalid_report_tells_its_story_first(rendered, screen):
    info = _probe(screen, rendered["invalid"])
    assert info["storyTop"] is not None and info["storyBottom"] <= SCREEN[1]
    assert info["storyBottom"] <= info["firstSectionTop"]
    assert info["checkedTop"] > info["storyBottom"]
