"""history/allocator.py: the processes that build big arrays reuse freed memory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from history import allocator, child_process

ROOT = Path(__file__).resolve().parents[2]


def test_the_spark_workers_run_with_the_allocator_settings(spark: Any) -> None:
    def env(_: Any) -> list[tuple[str, str]]:
        return [(k, os.environ.get(k, "")) for k in sorted(allocator.ENV)]
    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(env).collect()
    assert set(seen) == set(allocator.ENV.items())


def test_the_recording_process_s_helpers_start_with_them(monkeypatch: Any) -> None:
    started: dict[str, Any] = {}
    monkeypatch.setattr(child_process.subprocess, "Popen", lambda args, **kw: started.update(kw))
    child_process.start("history.live_copy", {}, text=False)
    assert allocator.ENV.items() <= started["env"].items()


def test_tune_sets_glibc_and_pyarrow_s_pool() -> None:
    code = ("import pyarrow as pa; from history import allocator; "
            "print(allocator.tune(), pa.default_memory_pool().backend_name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.split()
    assert out == ["True", "system"]
