"""Headless system Chromium under Selenium, for looking at reports as a user's
browser shows them: the browser tests and ``scripts/report_screenshot.py``.

Debian's ``chromium`` and ``chromium-driver`` (same version, same archive) do
the work; both paths are passed explicitly so Selenium Manager never runs and
nothing is downloaded. A few Chromium-only calls go through
``execute_cdp_cmd``: classic WebDriver has no fixed CSS viewport, no clipped or
beyond-the-viewport screenshot and no script that runs before a page's own.

Not part of the kchaos package: only development tools use it.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver",)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


class ChromiumMissing(RuntimeError):
    """Chromium or chromedriver is not installed; the message says how to fix it."""


def _find(env: str, candidates: tuple[str, ...], name: str) -> str | None:
    """$env if set (and only it), else a known location, else ``name`` on PATH."""
    path = os.environ.get(env)
    if path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which(name)


def find_chromium() -> str | None:
    """$KCHAOS_CHROMIUM, else Debian's chromium or another known browser."""
    return _find("KCHAOS_CHROMIUM", CHROMIUM_CANDIDATES, "chromium")


def find_chromedriver() -> str | None:
    """$KCHAOS_CHROMEDRIVER, else Debian's chromium-driver."""
    return _find("KCHAOS_CHROMEDRIVER", CHROMEDRIVER_CANDIDATES, "chromedriver")


def start_chromium(viewport: tuple[int, int] = (1280, 900), logs: bool = False,
                   timeout: float = 30.0) -> webdriver.Chrome:
    """A headless Chromium showing ``viewport`` CSS pixels at scale 1.

    ``logs`` records the page's console, exceptions and CSP reports
    (``get_log("browser")``) and its Network/Page events (``page_events``).
    Raises ChromiumMissing when either binary is absent."""
    chromium, chromedriver = find_chromium(), find_chromedriver()
    if chromium is None:
        raise ChromiumMissing("headless Chromium not found (expected /usr/bin/chromium: install Debian's "
                              "'chromium' package, or point KCHAOS_CHROMIUM at a Chromium binary)")
    if chromedriver is None:
        raise ChromiumMissing("chromedriver not found (expected /usr/bin/chromedriver: install Debian's "
                              "'chromium-driver' package, or point KCHAOS_CHROMEDRIVER at a chromedriver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*FLAGS, f"--window-size={viewport[0]},{viewport[1]}"]:
        options.add_argument(flag)
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": True})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        driver.set_page_load_timeout(timeout)
        driver.set_script_timeout(timeout)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": viewport[0], "height": viewport[1], "deviceScaleFactor": 1,
                                "mobile": False})
    except BaseException:
        driver.quit()
        raise
    return driver


def load(driver: webdriver.Chrome, url: str) -> None:
    """Navigate, wait for the load event (WebDriver's default) and then two
    frames, so what a screenshot or a probe sees has been laid out and painted."""
    driver.get(url)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "requestAnimationFrame(() => requestAnimationFrame(done));")


def page_events(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """The DevTools Network/Page events ({"method", "params"}) since the last
    call; needs ``start_chromium(logs=True)``."""
    return [json.loads(e["message"])["message"] for e in driver.get_log("performance")]


def screenshot(driver: webdriver.Chrome, path: Path, full_page: bool = True,
               clip: tuple[float, float, float, float] | None = None) -> Path:
    """The viewport, the whole page (at most 16000 px high), or ``clip`` =
    (x, y, width, height) in page pixels, as a PNG at ``path``."""
    params: dict[str, Any] = {"format": "png"}
    if clip is None and full_page:
        m = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = m.get("cssContentSize") or m["contentSize"]
        clip = (0, 0, size["width"], min(size["height"], 16000))
    if clip is not None:
        x, y, w, h = clip
        params["clip"] = {"x": x, "y": y, "width": w, "height": h, "scale": 1}
        params["captureBeyondViewport"] = True
    data = base64.b64decode(driver.execute_cdp_cmd("Page.captureScreenshot", params)["data"])
    Path(path).write_bytes(data)
    return Path(path)
