"""Checkers: decide from a history whether Kafka kept its promises.

Analysis only: imports history (the contract it reads) and nothing from
harness, nemesis, broker, infra or workloads. The entry points (``check``,
``check_runs``, ``analyze_run`` and their config) are checking.py's; the
definitions are reference.py's (and txn.py, groups.py, settle.py), the Spark
engine spark.py's (docs/design.md, "What the checkers decide").
"""
from .checking import (REFERENCE_MAX_OPS, analyze_run, check, check_runs, choose_engine, history_ops,
                       start_spark_ahead, stored_checker_config, write_results)
from .common import summary
from .result import ANOMALY_TYPES, CheckResult

__all__ = ["ANOMALY_TYPES", "REFERENCE_MAX_OPS", "CheckResult", "analyze_run", "check", "check_runs", "start_spark_ahead",
           "choose_engine", "history_ops", "stored_checker_config", "summary", "write_results"]
