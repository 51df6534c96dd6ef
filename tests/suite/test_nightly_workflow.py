"""The example nightly CI workflow cannot run here: check its shape by parsing it."""
from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML: dev extra

ROOT = Path(__file__).resolve().parents[2]


def test_nightly_workflow_shape():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert on["schedule"] and all("cron" in s and len(s["cron"].split()) == 5 for s in on["schedule"])
    assert "workflow_dispatch" in on
    (job,) = wf["jobs"].values()
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    uses = [s.get("uses", "") for s in steps]
    assert uses[0].startswith("actions/checkout@")
    setup = next(i for i, r in enumerate(runs) if "./scripts/bootstrap.sh" in r)
    suite = next(i for i, r in enumerate(runs) if "./kchaos" in r and "examples/suites/nightly.toml" in r
                 and "suite" in r)
    upload = next(i for i, u in enumerate(uses) if u.startswith("actions/upload-artifact@"))
    assert setup < suite < upload
    assert steps[upload].get("if") == "always()"
    assert "store/suites" in steps[upload]["with"]["path"]
    assert (ROOT / "examples" / "suites" / "nightly.toml").is_file()
    assert (ROOT / "scripts" / "bootstrap.sh").is_file()
