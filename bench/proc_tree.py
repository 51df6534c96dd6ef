"""The resident memory and CPU time of a command and everything it started,
read from /proc: what a bench reports as "peak memory" and "CPU" of a command
a user waits for (the Python process, the Spark driver JVM and its workers,
the Java client drivers together). Shared by the benches that time a whole
command (checker_throughput.py, soak.py)."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field


def tree_usage(pid: int) -> dict[int, tuple[int, float]]:
    """{process: (resident bytes, CPU seconds)} of ``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    stat: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        stat[int(d)] = (int(fields[21]) * page, (int(fields[11]) + int(fields[12])) / tick)
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in stat:
            out[p] = stat[p]
        todo += children.get(p, [])
    return out


@dataclass
class Watched:
    """What ``watch`` saw of a finished command."""
    rc: int
    wall: float
    peak_rss: int                      # the tree's resident memory, summed at each sample, at most
    cpu: float                         # CPU seconds of every process the tree ever held
    output: list[str] = field(default_factory=list)


def watch(argv: list[str], cwd: str | os.PathLike, every: float = 0.1,
          on_sample=None) -> Watched:
    """Run ``argv`` to its end, sampling its process tree every ``every`` seconds;
    ``on_sample(elapsed_s, rss_bytes)`` is called at each sample (e.g. to note
    when a run's workload ended). Output (stdout and stderr) is kept, not shown."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    peak, cpu = 0, {}
    while proc.poll() is None:
        tree = tree_usage(proc.pid)
        rss = sum(r for r, _ in tree.values())
        peak = max(peak, rss)
        cpu.update({p: max(c, cpu.get(p, 0.0)) for p, (_, c) in tree.items()})
        if on_sample is not None:
            on_sample(time.monotonic() - t0, rss)
        time.sleep(every)
    wall = time.monotonic() - t0
    reader.join()
    return Watched(proc.returncode, wall, peak, sum(cpu.values()), out)
