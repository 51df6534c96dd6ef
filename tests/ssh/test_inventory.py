"""The inventory file: defaults, validation, one-line errors (no hosts needed)."""
from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import UsageError
from infra.inventory import DEFAULT_KNOWN_HOSTS, InventoryError, from_dict, load_inventory


def test_defaults_and_names_by_order(tmp_path: Path):
    (tmp_path / "k").write_text("x")
    f = tmp_path / "hosts.toml"
    f.write_text('key = "k"\n[[hosts]]\naddress = "10.0.0.2"\n[[hosts]]\naddress = "10.0.0.3"\nport = 2222\n'
                 'user = "admin"\nknown_hosts = "kh"\n')
    inv = load_inventory(f)
    a, b = inv.hosts
    assert (a.name, a.address, a.port, a.user, a.key) == ("n1", "10.0.0.2", 22, "root", tmp_path / "k")
    assert a.known_hosts == DEFAULT_KNOWN_HOSTS.expanduser()
    assert (b.name, b.port, b.user, b.known_hosts) == ("n2", 2222, "admin", tmp_path / "kh")
    assert inv.accept_new_host_keys is False and len(inv) == 2 and inv.path == f.resolve()


def test_explicit_names_are_sorted():
    inv = from_dict({"hosts": [{"name": "n2", "address": "b"}, {"name": "n1", "address": "a"}]})
    assert [(h.name, h.address) for h in inv.hosts] == [("n1", "a"), ("n2", "b")]


@pytest.mark.parametrize("data, words", [
    ({}, ["[[hosts]]"]),
    ({"hosts": [{"address": "a", "nmae": "n1"}]}, ["unknown key", "nmae"]),
    ({"hosts": [{"name": "broker1", "address": "a"}]}, ["n1..n1"]),
    ({"hosts": [{"name": "n2", "address": "a"}]}, ["n1..n1"]),
    ({"hosts": [{"address": "a"}, {"address": "a"}]}, ["same host"]),
    ({"hosts": [{"address": "a", "port": 0}]}, ["port"]),
    ({"hosts": [{"address": "a", "key": "/nonexistent/key"}]}, ["/nonexistent/key", "does not exist"]),
    ({"hosts": [{}]}, ["address"]),
    ({"accept_new_host_keys": "yes", "hosts": [{"address": "a"}]}, ["accept_new_host_keys"]),
    ({"hosts": [{"address": str(i)} for i in range(8)]}, ["1 to 7"]),
    ({"hosts": [{"address": "a", "role": "leader"}]}, ["role", "'broker' or 'controller'", "leader"]),
    ({"hosts": [{"address": "a", "role": "broker"}, {"address": "b"}]}, ["n2 has none"]),
    ({"hosts": [{"address": "a", "role": "broker"}]}, ["0 controller hosts of 1"]),
    ({"hosts": [{"address": "a", "role": "controller"}]}, ["1 controller hosts of 1", "at least one broker"]),
    ({"hosts": [{"address": str(i), "role": "broker" if i == 0 else "controller"} for i in range(7)]},
     ["6 controller hosts", "1 to 5"]),
    ({"hosts": [{"address": "a", "role": "controller"}, {"address": "b", "role": "broker"}]},
     ["controllers must be the last hosts (n2..n2)", "n1 controller"]),
])
def test_mistakes_are_one_line_usage_errors(data, words):
    with pytest.raises(InventoryError) as info:
        from_dict(data, "hosts.toml")
    msg = str(info.value)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 64 and "\n" not in msg
    assert all(w in msg for w in words), msg


def test_roles_name_the_controllers():
    inv = from_dict({"hosts": [{"address": a, "role": r} for a, r in
                               (("a", "broker"), ("b", "broker"), ("c", "controller"), ("d", "controller"),
                                ("e", "controller"))]})
    assert inv.controllers == ("n3", "n4", "n5")
    assert [h.role for h in inv.hosts] == ["broker", "broker", "controller", "controller", "controller"]
    assert from_dict({"hosts": [{"address": "a"}, {"address": "b"}]}).controllers == ()


def test_missing_and_malformed_files(tmp_path: Path):
    with pytest.raises(InventoryError, match="does not exist"):
        load_inventory(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[hosts]\n")
    with pytest.raises(InventoryError, match="invalid TOML"):
        load_inventory(bad)


def test_run_config_backend_validation(tmp_path: Path):
    from harness.run_config import RunConfig, WorkloadConfig, validate
    with pytest.raises(UsageError, match="needs an inventory"):
        validate(RunConfig(backend="ssh"))
    with pytest.raises(UsageError, match="valid backends"):
        validate(RunConfig(backend="k8s"))
    with pytest.raises(UsageError, match='backend is "docker"'):
        validate(RunConfig(inventory="hosts.toml"))
    f = tmp_path / "hosts.toml"
    f.write_text('[[hosts]]\naddress = "a"\n[[hosts]]\naddress = "b"\n')
    cfg = validate(RunConfig(backend="ssh", inventory=str(f), nodes=3, topic={"min.insync.replicas": 1},
                             workload=WorkloadConfig(replication_factor=2)))
    assert cfg.nodes == 2 and cfg.inventory == str(f.resolve())
    roles = tmp_path / "roles.toml"
    roles.write_text('[[hosts]]\naddress = "a"\nrole = "broker"\n[[hosts]]\naddress = "b"\nrole = "broker"\n'
                     '[[hosts]]\naddress = "c"\nrole = "controller"\n')
    cfg = validate(RunConfig(backend="ssh", inventory=str(roles), topic={"min.insync.replicas": 1},
                             workload=WorkloadConfig(replication_factor=2)))
    assert (cfg.nodes, cfg.controllers) == (2, 1)
    with pytest.raises(UsageError, match="3 controllers asked, but the inventory has 1 controller hosts"):
        validate(RunConfig(backend="ssh", inventory=str(roles), controllers=3, topic={"min.insync.replicas": 1},
                           workload=WorkloadConfig(replication_factor=2)))


def test_probe_parsing_decides_what_to_install():
    from infra.ssh_provision import parse_probe
    p = parse_probe("missing iptables\nmissing pgrep\nmissing libfaketime\npm apt-get\n"
                    'java openjdk version "11.0.2" 2019-01-15\n')
    assert p.apt and p.java_major == 11
    assert p.packages() == ["jre", "iptables", "procps", "libfaketime"]
    assert parse_probe('java openjdk version "17.0.19" 2026-04-21\n').packages() == []
    assert parse_probe('missing java\n').packages() == ["jre"]
    assert parse_probe('java java version "1.8.0_392"\n').java_major == 8
