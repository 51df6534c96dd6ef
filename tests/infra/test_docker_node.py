"""The Node contract on real containers, plus what only the Docker backend promises."""
import ipaddress

import pytest

from tests.infra.node_contract import NodeContract

pytestmark = pytest.mark.cluster


class TestDockerNode(NodeContract):
    @pytest.fixture
    def node(self, kafka_cluster):
        return kafka_cluster.nodes[0]


def test_containers_are_on_an_internal_network_with_fixed_addresses(kafka_cluster):
    from infra.engine import docker_client
    client = docker_client()
    net = client.networks.get(f"kchaos-{kafka_cluster.name}")
    assert net.attrs["Internal"] is True
    subnet = ipaddress.ip_network(net.attrs["IPAM"]["Config"][0]["Subnet"])
    for i, node in enumerate(kafka_cluster.nodes, start=1):
        assert node.name == f"n{i}"
        assert ipaddress.ip_address(node.address) in subnet
        assert node.address.endswith(f".{10 + i}")
        c = client.containers.get(f"kchaos-{kafka_cluster.name}-{node.name}")
        host = c.attrs["HostConfig"]
        assert host["Privileged"] is False and host["CapAdd"] == ["NET_ADMIN"]
        assert list(c.attrs["NetworkSettings"]["Networks"]) == [net.name]  # never the default bridge
        assert c.labels["kchaos"] == "1" and c.labels["kchaos.cluster"] == kafka_cluster.name


def test_nodes_resolve_each_other_by_name(kafka_cluster):
    n1, n2 = kafka_cluster.nodes[:2]
    assert n2.address in n1.run(["getent", "hosts", n2.name]).out


def test_broker_is_not_the_main_process(kafka_cluster):
    node = kafka_cluster.nodes[0]
    comm = node.run(["cat", "/proc/1/comm"]).out.strip()
    assert comm in ("tini", "sleep")
