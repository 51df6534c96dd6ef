"""Reports: pure renderers of a stored run folder.
Imports only checkers among kchaos packages (never harness, nemesis, broker or infra).

* ``render_run(run_dir) -> Path``: writes ``report.html`` (self-contained,
  offline) and ``junit.xml`` into the run folder and returns the report path.
* ``console_summary(run_dir, console=None)``: a rich table of anomaly counts,
  the verdict and the report's path.
"""
from .console import console_summary
from .render import render_run

__all__ = ["render_run", "console_summary"]
