"""Checkers: decide from a history whether Kafka kept its promises.
Imports nothing from harness, nemesis, broker or infra: a stored history is all they read.

Entry points:

* ``check(history, config)`` - one history (JSONL or Parquet) -> CheckResult.
* ``check_runs(parquet, config)`` - a Parquet file with a ``run`` column ->
  one CheckResult per run, in one Spark pass.
* ``analyze_run(run_dir, config)`` - what ``kchaos analyze`` does: the run's
  history.parquet (converted from history.jsonl unless it is current) ->
  results.json.
* ``write_results``, ``summary``, ``choose_engine``.

Config (a plain dict, every key optional): ``engine`` ("auto" | "spark" |
"reference"; auto: the reference up to ``REFERENCE_MAX_OPS`` ops, else Spark),
``spark_master`` ("local[2]"), ``spark_conf`` (extra Spark settings),
``max_witnesses`` (20), ``allowed`` ({anomaly type: reason}; a falsy reason
takes a default allowance away).
"""
from .checking import (REFERENCE_MAX_OPS, analyze_run, check, check_runs, choose_engine, history_ops,
                       stored_checker_config, write_results)
from .common import summary
from .result import ANOMALY_TYPES, CheckResult

__all__ = ["ANOMALY_TYPES", "REFERENCE_MAX_OPS", "CheckResult", "analyze_run", "check", "check_runs",
           "choose_engine", "history_ops", "stored_checker_config", "summary", "write_results"]
