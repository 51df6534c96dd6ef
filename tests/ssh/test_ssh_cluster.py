"""Provisioning, a whole chaos run over SSH, and `kchaos clean --inventory`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from broker.config import FAKETIME_FILE
from harness.ssh_hosts import provision_hosts
from infra.distribution import KAFKA_LIB
from infra.ssh_claim import CLAIM_DIR

pytestmark = pytest.mark.cluster


def test_provision_uploads_what_differs_and_removes_strays(ssh_env, ssh_nodes):
    node = ssh_nodes[1]
    jars = sorted(p.name for p in ssh_env.dist.lib.glob("*.jar"))
    gone, truncated = jars[0], jars[1]
    node.run(["sh", "-c", f"rm {KAFKA_LIB}/{gone} && truncate -s 10 {KAFKA_LIB}/{truncated} "
                          f"&& touch {KAFKA_LIB}/stray-0.1.jar && echo +60s > {FAKETIME_FILE} "
                          "&& rm -rf /var/log/kafka"])
    t0 = time.monotonic()
    report = provision_hosts([node], ssh_env.dist)[node.name]
    assert time.monotonic() - t0 < 30
    assert (report.installed, report.uploaded, report.removed, report.skipped) == ([], 2, 1, len(jars) - 2)
    listing = node.run(["find", KAFKA_LIB, "-maxdepth", "1", "-type", "f", "-printf", "%s %f\\n"]).out
    remote = {name: int(size) for size, name in (line.split(" ", 1) for line in listing.splitlines())}
    assert remote == {p.name: p.stat().st_size for p in ssh_env.dist.lib.glob("*.jar")}
    assert node.run(["cat", FAKETIME_FILE]).out == "+0s\n"
    node.run(["test", "-d", "/var/log/kafka", "-a", "-d", "/var/lib/kafka/data", "-a", "-d", "/etc/kafka",
              "-a", "-f", "/opt/kafka/config/log4j2.xml"])


def test_a_short_run_with_partitions_over_ssh(ssh_env, inventory, tmp_path):
    from harness.run_cli import build_config
    from harness.runner import Runner
    cfg = build_config(None, nodes=None, kafka_version=None, time_limit=20, rate=100, concurrency=4, seed=4242,
                       nemesis="partition", nemesis_interval=5, name="sshrun", store=str(tmp_path),
                       keep_cluster=None, spark_master=None, inventory=inventory)
    cfg.checker["engine"] = "reference"  # the verdict's definitions, without a Spark session on 2 cores
    assert (cfg.backend, cfg.nodes) == ("ssh", 3)
    t0 = time.monotonic()
    outcome = Runner(cfg).execute()
    took = time.monotonic() - t0
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert outcome.exit_code == 0 and results["valid"] is True, (results.get("errors"), results.get("anomalies"))
    from history.ops import read_history  # skips the format header
    history = list(read_history(outcome.run_dir / "history.jsonl"))
    partitions = [o for o in history if o["process"] == "nemesis" and o["f"] == "start-partition"]
    acked = sum(1 for o in history if o["f"] == "send" and o["type"] == "ok")
    assert partitions and acked >= 10, (len(partitions), acked)  # a loaded 2-core machine manages ~80+
    for n in ("n1", "n2", "n3"):
        assert (outcome.run_dir / "nodes" / n / "server.log").stat().st_size > 0
    stored = json.loads((outcome.run_dir / "config.json").read_text())
    assert stored["backend"] == "ssh" and stored["inventory"] == str(inventory.resolve())
    # Torn down through SSH only: brokers gone, no chain left, clocks true; the hosts remain.
    from nemesis.partition import chain_rules
    from infra.ssh_node import connect_all
    from broker.lifecycle import PROCESS_PATTERN
    for node in connect_all(inventory):
        assert node.run(["pgrep", "-f", PROCESS_PATTERN], check=False).exit == 1
        assert chain_rules(node) is None
        assert node.run(["cat", FAKETIME_FILE]).out == "+0s\n"
        assert node.run(["test", "-e", CLAIM_DIR], check=False).exit == 1, "the run gave its hosts back"
        node.close()
    print(f"ssh run took {took:.1f}s")


def test_clean_with_an_inventory_heals_the_hosts(ssh_env, inventory, ssh_nodes):
    from nemesis.netem_iptables import DELAY_CHAIN, DELAYER_PATTERN, LOSS_CHAIN
    from nemesis.partition import chain_rules
    for node in ssh_nodes:
        node.run(["sh", "-c", "iptables -w -N KCHAOS && iptables -w -I INPUT -j KCHAOS "
                              "&& iptables -w -A KCHAOS -s 192.0.2.1 -j DROP "
                              f"&& echo +3600s > {FAKETIME_FILE}"])
        # the link faults' chains (loss in filter OUTPUT, delay in mangle INPUT)
        node.run(["sh", "-c", f"iptables -w -N {LOSS_CHAIN} && iptables -w -I OUTPUT -j {LOSS_CHAIN} "
                              f"&& iptables -w -A {LOSS_CHAIN} -d 192.0.2.1 -m statistic --mode random "
                              "--probability 0.5 -j DROP "
                              f"&& iptables -w -t mangle -N {DELAY_CHAIN} "
                              f"&& iptables -w -t mangle -I INPUT -j {DELAY_CHAIN}"])
        # Stand-ins for a broker and the netem delayer: processes whose command
        # lines match the patterns heal looks for.
        node.run(["bash", "-c", "exec -a 'java kafka.Kafka /etc/kafka/server.properties' sleep 300"],
                 detach=True)
        node.run(["bash", "-c", "exec -a 'python3 netem_delayer.py --queue 19267' sleep 300"], detach=True)
    assert all(chain_rules(n) for n in ssh_nodes)
    time.sleep(0.5)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "clean", "--inventory", str(inventory),
                           "--name", f"nothing-else-{os.getpid()}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [l.split(":")[0] for l in proc.stdout.splitlines() if "healed" in l] == ["n1", "n2", "n3"], proc.stdout
    for node in ssh_nodes:
        assert chain_rules(node) is None
        assert node.run(["cat", FAKETIME_FILE]).out == "+0s\n"
        assert node.run(["pgrep", "-f", "kafka[.]Kafka"], check=False).exit == 1
        assert node.run(["pgrep", "-f", DELAYER_PATTERN], check=False).exit == 1
        for table, chain in (("filter", LOSS_CHAIN), ("mangle", DELAY_CHAIN)):
            assert node.run(["iptables", "-w", "-t", table, "-S", chain], check=False).exit != 0, chain


def test_heal_hosts_reports_unreachable_hosts_without_raising(ssh_env):
    from harness.ssh_hosts import heal_hosts
    inv = ssh_env.inventory("partly.toml", hosts=[{"address": ssh_env.hosts.hosts[0].address},
                                                  {"address": ssh_env.hosts.hosts[0].address, "port": 2}])
    report = heal_hosts(inv)
    assert report["n1"] == "ok" and "refused" in report["n2"]


@pytest.mark.long
def test_a_run_with_roles_over_ssh_aims_at_the_controller_host(ssh_env, tmp_path):
    """An inventory with roles: n1 and n2 brokers, n3 the controller (isolated
    KRaft over SSH). A short run whose kills aim at the controllers: valid,
    and Kafka's own config says which host had which role."""
    from harness.run_cli import build_config
    from harness.runner import Runner
    hosts = [{"address": h.address, "role": "controller" if i == 2 else "broker"}
             for i, h in enumerate(ssh_env.hosts.hosts)]
    roles = ssh_env.inventory("roles.toml", hosts=hosts)
    config = tmp_path / "roles-run.toml"       # two brokers: two replicas, one enough to write
    config.write_text('[workload]\nreplication_factor = 2\n[topic]\n"min.insync.replicas" = 1\n'
                      '[nemesis]\ntargets = ["controllers"]\n[checker]\nengine = "reference"\n')
    cfg = build_config(config, nodes=None, kafka_version=None, time_limit=15, rate=100, concurrency=4, seed=4243,
                       nemesis="kill", nemesis_interval=4, name="sshroles", store=str(tmp_path),
                       keep_cluster=None, spark_master=None, inventory=roles)
    assert (cfg.backend, cfg.nodes, cfg.controllers) == ("ssh", 2, 1)
    outcome = Runner(cfg).execute()
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert outcome.exit_code == 0 and results["valid"] is True, (results.get("errors"), results.get("anomalies"))
    logs = outcome.run_dir / "nodes"
    assert "process.roles=controller" in (logs / "n3" / "server.properties").read_text()
    assert "process.roles=broker\n" in (logs / "n1" / "server.properties").read_text()
    from history.ops import read_history
    starts = [o["value"] for o in read_history(outcome.run_dir / "history.jsonl")
              if o["process"] == "nemesis" and (o.get("value") or {}).get("action") == "start"]
    assert starts and {n for v in starts for n in v.get("nodes") or []} == {"n3"}, starts
