"""The parts of a report that need no verdict, made while the checkers run.

``kchaos run`` and ``kchaos analyze`` wait for the checks and then for the
report (issue 33: the wait a user sees). harness/analysis.py runs
``early_parts`` in a thread beside the checks, on the core the Spark engine
leaves idle part of the time: the history's digest, and from it and
config.json alone the fault-progress table and the latency, unseen-writes
and read-lag plots. The rest (anomalies, elections, and the plots that show
witnesses, elections or the checkers' availability) waits for results.json. A part that fails here is
simply not made: the report makes it again after the checks, and fails or
notes the failure there as it always did, so the report is the same whether
or not its parts were made early (tests/reports/test_digest_beside_checks.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .digest import Digest
from .fault_progress import run_progress
from .faults import fault_timeline
from .load import read_config, read_digest

log = logging.getLogger(__name__)

#: The names of ``EarlyParts.made``: what ``reports.render`` takes instead of making it
#: (the plots' names are ``reports.plots.make_plots``'s).
PROGRESS, LATENCY, UNSEEN, LAG = "progress", "latency", "unseen", "lag"
PLOTS = (LATENCY, UNSEEN, LAG)


@dataclass
class EarlyParts:
    digest: Digest
    notes: list[str]                      # what of the history could not be read
    made: dict[str, Any] = field(default_factory=dict)   # PROGRESS: RunProgress | None; PLOTS: Plot


def early_parts(run_dir: Path) -> EarlyParts:
    """The digest of ``run_dir``'s history and the parts made from it; never raises."""
    d, notes = read_digest(run_dir)
    parts = EarlyParts(d, notes)
    if not notes:
        try:
            parts.made[PROGRESS] = run_progress(d, read_config(Path(run_dir), []))
        except Exception:  # noqa: BLE001 - made again after the checks, where its failure shows
            log.debug("fault progress not made beside the checks", exc_info=True)
        from .plots import latency_plot, plot_context   # matplotlib only when drawing
        from .visibility import lag_plot, unseen_plot
        tl = fault_timeline(d)
        for name, draw in ((LATENCY, latency_plot), (UNSEEN, unseen_plot), (LAG, lag_plot)):
            try:
                with plot_context():
                    parts.made[name] = draw(d, tl)
            except Exception:  # noqa: BLE001 - as above
                log.debug("plot %s not made beside the checks", name, exc_info=True)
    return parts
