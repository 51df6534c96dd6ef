"""Time from nothing to a cluster where every broker is ready.

cold: node images removed first, so debootstrap + image build are included
      (the Maven cache of Kafka jars is kept; pass --cold-maven to drop it too).
warm: images cached, the usual case.

    .venv/bin/python bench/cluster_start.py [--nodes 3 5] [--repeat 2] [--no-cold] [--cds on|off|ab]

--cds ab alternates starts with and without the brokers' CDS archive in the
same load window (jvm_start + started_log is the JVM's own start).
Aim (issue 17): warm 3-node start in 12 s, 5-node in 20 s, on the 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.lifecycle import BrokerSettings  # noqa: E402
from harness.run_cluster import cluster_down, cluster_up  # noqa: E402
from infra.distribution import DEFAULT_KAFKA_VERSION, cache_root  # noqa: E402
from infra.engine import docker_client  # noqa: E402


def drop_images(maven: bool) -> None:
    client = docker_client()
    for image in client.images.list(filters={"label": "kchaos=1"}):
        for tag in image.tags:
            client.images.remove(tag, force=True)
    if maven:
        shutil.rmtree(cache_root() / "kafka", ignore_errors=True)


def timed_start(nodes: int, version: str, cds: bool = True) -> dict[str, float]:
    name = f"bench-start-{nodes}-{os.getpid()}"
    t0 = time.monotonic()
    try:
        handle = cluster_up(name, nodes, version, settings=BrokerSettings(cds=cds))
        total = time.monotonic() - t0
        return {**handle.timings, "total_s": total}
    finally:
        cluster_down(name)


PHASES = ("image_s", "containers_s", "configure_s", "format_s", "jvm_start_s", "started_log_s", "registered_s",
          "total_s", "cds_record_s")


def row(n: int, kind: str, t: dict[str, float]) -> str:
    load = os.getloadavg()[0]
    return f"{n:>5} {kind:>8} " + " ".join(f"{t.get(k, float('nan')):>{max(7, len(k) - 2)}.1f}" for k in PHASES) + \
        f" {load:>6.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--repeat", type=int, default=2, help="warm starts per node count")
    ap.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--cold-maven", action="store_true")
    ap.add_argument("--cds", choices=("on", "off", "ab"), default="on",
                    help="brokers start from the CDS archive, without it, or alternately (A/B)")
    args = ap.parse_args()
    print(f"Kafka {args.kafka_version}; seconds per phase: image (resolve jars + build images), containers "
          "(network + containers), configure (server.properties), format (bootstrap checkpoint from the host "
          "cache, or StorageTool on one node on a miss; copied with the CDS archive to every node), jvm_start "
          "(broker JVMs launched), started_log (every broker logged it started), registered (the admin API lists "
          "every broker), cds_record (first start only: recording the CDS archive, included in total); "
          "load = 1-min load average when the start ended")
    print(f"{'nodes':>5} {'kind':>8} " + " ".join(f"{k[:-2]:>{max(7, len(k) - 2)}}" for k in PHASES) + f" {'load':>6}")
    for n in args.nodes:
        if not args.no_cold:
            drop_images(args.cold_maven)
            print(row(n, "cold", timed_start(n, args.kafka_version, args.cds != "off")), flush=True)
        modes = {"on": [True], "off": [False], "ab": [True, False]}[args.cds]
        warm: dict[bool, list[dict[str, float]]] = {m: [] for m in modes}
        for i in range(args.repeat):
            for cds in modes if i % 2 == 0 else modes[::-1]:
                t = timed_start(n, args.kafka_version, cds)
                warm[cds].append(t)
                print(row(n, "warm+cds" if cds else "warm", t), flush=True)
        for cds, ts in warm.items():
            print(f"{n:>5} {'warm+cds' if cds else 'warm'} median total {statistics.median(t['total_s'] for t in ts):.1f}s"
                  f", JVM's own start (jvm_start + started_log) "
                  f"{statistics.median(t['jvm_start_s'] + t['started_log_s'] for t in ts):.1f}s", flush=True)


if __name__ == "__main__":
    main()
