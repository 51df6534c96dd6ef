"""A PNG of chosen parts of a run's report, as headless Chromium shows them.

A report is long (up to 20 witnesses per anomaly), so a whole-page picture
hides what matters; this one stacks the parts you name (CSS selectors: the
report's sections have ids such as #summary, #anomaly-<type>, #plots,
#plot-<name>, #unclean-elections, #faults), each cut at ``--max-height``.

    .venv/bin/python scripts/report_screenshot.py RUN_DIR OUT.png [--part SELECTOR ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from PIL import Image

from browser import ChromiumMissing, load, screenshot, start_chromium  # scripts/browser.py, next to this file

DEFAULT_PARTS = ("header", "#anomalies > table", "#anomaly-lost-write", "#unclean-elections", "#plot-leaders")
WIDTH = 1280

BOXES = """
return arguments[0].map(sel => {
  const el = document.querySelector(sel);
  if (!el) return null;
  const r = el.getBoundingClientRect();
  return [r.left + scrollX, r.top + scrollY, r.width, r.height];
});
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--part", action="append", dest="parts",
                    help=f"a CSS selector; repeat for more (default: {', '.join(DEFAULT_PARTS)})")
    ap.add_argument("--max-height", type=int, default=760)
    args = ap.parse_args()
    report = args.run_dir / "report.html"
    if not report.is_file():
        print(f"error: no report at {report} (make one with: kchaos report {args.run_dir})", file=sys.stderr)
        return 64
    ids = args.parts or list(DEFAULT_PARTS)
    parts: list[Image.Image] = []
    try:
        driver = start_chromium(viewport=(WIDTH, 900))
    except ChromiumMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    with driver, tempfile.TemporaryDirectory() as tmp:
        load(driver, report.resolve().as_uri())
        for i, box in enumerate(driver.execute_script(BOXES, ids)):
            if box is None:
                continue
            x, y, w, h = box
            pad = 8
            clip = (max(x - pad, 0), max(y - pad, 0), min(w + 2 * pad, WIDTH), min(h + 2 * pad, args.max_height))
            parts.append(Image.open(screenshot(driver, Path(tmp) / f"{i}.png", clip=clip)).convert("RGB"))
    missing = len(ids) - len(parts)
    if not parts:
        print(f"error: none of {', '.join(ids)} is in {report}", file=sys.stderr)
        return 64
    gap = 12
    width = max(p.width for p in parts)
    sheet = Image.new("RGB", (width, sum(p.height for p in parts) + gap * (len(parts) - 1)), "#ffffff")
    y = 0
    for p in parts:
        sheet.paste(p, (0, y))
        y += p.height
        sheet.paste("#dee2e6", (0, y, width, y + gap))
        y += gap
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out, optimize=True)
    print(f"wrote {args.out} ({sheet.width}x{sheet.height}, {len(parts)} parts"
          + (f", {missing} not in this report" if missing else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
