"""``kchaos nemesis proxy``: rules from words and files, bad input in one
line with exit 64 before any cluster is looked up, and a cluster with no
proxy listener refused by name."""
from __future__ import annotations

import pytest

from harness.nemesis_cli import parse_rule_words, proxy_rules_from
from infra.errors import UsageError


def test_rule_words_take_toml_values_and_bare_strings():
    assert parse_rule_words('api=EndTxn action=hold until=next-produce max_hold_ms=30000 committed=true '
                            'window_s=[10,90] client_id="kchaos-*"') == {
        "api": "EndTxn", "action": "hold", "until": "next-produce", "max_hold_ms": 30000, "committed": True,
        "window_s": [10, 90], "client_id": "kchaos-*"}


def test_rules_from_a_run_config_and_words(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[nemesis.proxy]]\napi = "Produce"\naction = "late-response"\ndelay_ms = 100\n')
    rules = proxy_rules_from(("api=EndTxn action=close",), str(path))
    assert [(r.api, r.action) for r in rules] == [("EndTxn", "close"), ("Produce", "late-response")]


@pytest.mark.parametrize("argv,needle", [
    (["nemesis", "proxy"], "needs at least one --rule"),
    (["nemesis", "proxy", "--rule", "api=Fetchh action=close"], "unknown API 'Fetchh'"),
    (["nemesis", "proxy", "--rule", "api=EndTxn action=explode"], "unknown action 'explode'"),
    (["nemesis", "proxy", "--rule", "api=Fetch action=hold until=txn-end"], "can never happen for Fetch"),
    (["nemesis", "proxy", "--rule", "api=EndTxn nonsense"], "KEY=VALUE"),
    (["nemesis", "proxy", "--rules", "/no/such/file.toml"], "--rules /no/such/file.toml"),
    (["nemesis", "proxy", "--rule", "api=EndTxn action=close", "--for", "0"], "--for takes a positive"),
    (["nemesis", "proxy", "--rule", "api=EndTxn action=close"], "advertises no proxy listener"),
])
def test_bad_input_exits_64_in_one_line(argv, needle, capsys, monkeypatch, tmp_path):
    from harness.cli import main
    monkeypatch.setenv("KCHAOS_CACHE", str(tmp_path))  # no kept cluster records
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--name", "no-such-cluster-for-tests"])
    assert exc.value.code == 64
    err = capsys.readouterr().err.strip()
    assert err.startswith("kchaos:") and len(err.splitlines()) == 1 and needle in err, err
    assert "no kchaos cluster" not in err, "input must be checked before the cluster is looked up"


def test_words_refused_in_one_line():
    with pytest.raises(UsageError):
        proxy_rules_from(("api=EndTxn action=error-response error=NOPE",), None)


def test_forwards_with_rules_armed_and_prints_each_action(monkeypatch, tmp_path):
    """On loopback: a kept cluster record names the proxy port, a fake broker
    stands behind it; a rule closes the first Metadata, the second passes."""
    import json
    import socket
    import threading
    import types

    from click.testing import CliRunner

    from harness import nemesis_cli
    from nemesis.proxy_wire import frame
    from tests.nemesis.test_proxy_loopback import FakeBroker, answer
    from tests.nemesis.test_proxy_rules import header

    broker = FakeBroker()
    threading.Thread(target=broker.serve_forever, daemon=True).start()
    monkeypatch.setenv("KCHAOS_CACHE", str(tmp_path))
    from nemesis.kafka_proxy import free_ports
    port = free_ports(["n1"])["n1"]
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "t.json").write_text(json.dumps({"name": "t", "proxy_ports": {"n1": port}}))
    node = types.SimpleNamespace(name="n1", address="127.0.0.1")
    monkeypatch.setattr(nemesis_cli, "cluster_attach",
                        lambda name: types.SimpleNamespace(kafka=types.SimpleNamespace(broker_nodes=[node])))
    monkeypatch.setattr(nemesis_cli, "PROXY_PORT", broker.server_address[1])
    answers: list = []

    def client():
        for _ in range(50):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                threading.Event().wait(0.05)
        s.sendall(frame(header("Metadata", 1, 5, "c", False)))
        answers.append(answer(s))  # closed by the rule
        s2 = socket.create_connection(("127.0.0.1", port), timeout=5)
        s2.sendall(frame(header("Metadata", 1, 6, "c", False)))
        answers.append(answer(s2))

    t = threading.Thread(target=client)
    t.start()
    result = CliRunner().invoke(nemesis_cli.nemesis_group, ["proxy", "--rule", "api=Metadata action=close nth=1",
                                                            "--for", "1.5", "--seed", "3", "--name", "t"])
    t.join(5)
    broker.shutdown()
    broker.server_close()
    assert result.exit_code == 0, result.output
    assert answers == [None, 6]
    lines = result.output.splitlines()
    assert lines[0].startswith(f"proxy for cluster t: bootstrap servers 127.0.0.1:{port}; 1 rule(s) armed, seed 3")
    assert any(" close n1 Metadata v1 corr 5 c rule=rule-1" in line for line in lines)
    assert lines[-1].startswith("healed: everything passes through; 0 held")
