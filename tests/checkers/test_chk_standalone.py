"""The checkers on a real Spark standalone cluster: a master and two workers
started on this machine with pyspark's own ``spark-class`` (no download, bound
to 127.0.0.1), driven by ``kchaos analyze --spark-master spark://...``; the
verdict and every anomaly count equal local mode's on the same history.

Marked ``long``: three JVMs and the executors take well over a minute on a
loaded 2-core machine. Run it with ``-m long -k standalone``.
"""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import checkers
from checkers.session import _ensure_java
from chk_gen import Params, simulate
from chk_gen_inject import inject

pytestmark = [pytest.mark.long, pytest.mark.spark]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{log.name}: exited {proc.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{log.name}: no {text!r} within {timeout} s:\n{log.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: Any) -> Iterator[str]:
    """spark://127.0.0.1:PORT with two one-core workers; stopped after."""
    import pyspark
    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    assert spark_class.exists(), spark_class
    _ensure_java()
    d = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(d),
           "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": "256m"}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = d / f"{name}.log"
        with open(log, "w") as fh:
            p = subprocess.Popen([str(spark_class), *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                 cwd=d, start_new_session=True)
        procs.append(p)
        return p, log

    try:
        master, mlog = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(port), "--webui-port", str(_free_port()))
        _wait_for(mlog, "I have been elected leader", master)
        for i in (1, 2):
            w, wlog = start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                            "--work-dir", str(d / f"work{i}"), url)
            _wait_for(wlog, "Successfully registered with master", w)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _history(path: Path) -> None:
    """A simulated run with one of each of several anomalies."""
    p = Params(seed=11, partitions=3, clients=4, steps=80, mode="assign", drain=True, p_fail=0.1, p_info=0.1,
               mixed=True)
    ops = simulate(p)
    rng = random.Random(5)
    for typ in ("lost-write", "duplicate", "inconsistent-offset", "phantom-write", "nonmonotonic-send"):
        got = inject(ops, typ, rng)
        ops = got[0] if got else ops
    path.write_text("".join(json.dumps(op) + "\n" for op in ops))


def test_standalone_cluster_agrees_with_local_mode(standalone: str, spark: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _history(run / "history.jsonl")
    local = checkers.analyze_run(run, {"engine": "spark"}, spark=spark).to_json()
    assert local["valid"] is False and sum(a["count"] for a in local["anomalies"].values()) >= 4
    kchaos = Path(sys.executable).with_name("kchaos")
    r = subprocess.run([str(kchaos), "analyze", str(run), "--spark-master", standalone],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr            # invalid, as in local mode
    remote = json.loads((run / "results.json").read_text())
    assert remote["checker"]["engine"] == "spark" and remote["checker"]["master"] == standalone
    assert remote["errors"] == []
    assert remote["valid"] == local["valid"]
    assert {t: a["count"] for t, a in remote["anomalies"].items()} == \
           {t: a["count"] for t, a in local["anomalies"].items()}
    for doc in (local, remote):
        doc.pop("checker")
    assert remote == local
