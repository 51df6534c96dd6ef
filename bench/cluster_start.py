"""Time from nothing to a cluster where every broker is ready.

cold: node images removed first, so debootstrap + image build are included
      (the Maven cache of Kafka jars is kept; pass --cold-maven to drop it too).
warm: images cached, the usual case.

    .venv/bin/python bench/cluster_start.py [--nodes 3 5] [--repeat 2] [--no-cold]
Aim (issue 2): warm 3-node start under 30 s on the 2-core machine.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cluster import cluster_down, cluster_up  # noqa: E402
from infra.distribution import DEFAULT_KAFKA_VERSION, cache_root  # noqa: E402
from infra.engine import docker_client  # noqa: E402


def drop_images(maven: bool) -> None:
    client = docker_client()
    for image in client.images.list(filters={"label": "kchaos=1"}):
        for tag in image.tags:
            client.images.remove(tag, force=True)
    if maven:
        shutil.rmtree(cache_root() / "kafka", ignore_errors=True)


def timed_start(nodes: int, version: str) -> dict[str, float]:
    name = f"bench-start-{nodes}"
    t0 = time.monotonic()
    try:
        handle = cluster_up(name, nodes, version)
        total = time.monotonic() - t0
        return {**handle.timings, "total_s": total}
    finally:
        cluster_down(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--repeat", type=int, default=2, help="warm starts per node count")
    ap.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--cold-maven", action="store_true")
    args = ap.parse_args()
    print(f"Kafka {args.kafka_version}; times in seconds (image = resolve jars + build images; start = "
          "containers + format + brokers ready)")
    print(f"{'nodes':>5} {'kind':>5} {'image':>7} {'start':>7} {'total':>7}")
    for n in args.nodes:
        if not args.no_cold:
            drop_images(args.cold_maven)
            t = timed_start(n, args.kafka_version)
            print(f"{n:>5} {'cold':>5} {t['image_s']:7.1f} {t['start_s']:7.1f} {t['total_s']:7.1f}", flush=True)
        warm = [timed_start(n, args.kafka_version) for _ in range(args.repeat)]
        for t in warm:
            print(f"{n:>5} {'warm':>5} {t['image_s']:7.1f} {t['start_s']:7.1f} {t['total_s']:7.1f}", flush=True)
        print(f"{n:>5} warm median total {statistics.median(t['total_s'] for t in warm):.1f}s", flush=True)


if __name__ == "__main__":
    main()
