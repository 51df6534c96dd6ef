"""netem parameters, links, scripts and the delayer's netlink messages: pure, no Kafka."""
from __future__ import annotations

import random
import struct

import pytest

from infra.errors import UsageError
from nemesis import netem_delayer as nd
from nemesis import netem_iptables as ipt
from nemesis.netem import NO_QDISC_EXIT, Shape, heal_script, install_script, links_of, mechanism_of, shape_of


def test_shape_renders_netem_arguments():
    assert shape_of({"delay_ms": 100, "jitter_ms": 10, "loss_pct": 5, "reorder_pct": 25}).netem_args() == [
        "delay", "100ms", "10ms", "loss", "5%", "reorder", "25%"]
    assert shape_of({"loss_pct": 0.5}).netem_args() == ["loss", "0.5%"]
    assert shape_of({"delay_ms": 20}).netem_args() == ["delay", "20ms"]


@pytest.mark.parametrize("value,word", [
    ({"delay_ms": -1}, "delay"), ({"delay_ms": 10 ** 6}, "delay"), ({"loss_pct": 100.5}, "loss"),
    ({"loss_pct": -3}, "loss"), ({"delay_ms": 10, "jitter_ms": 11}, "jitter"),
    ({"delay_ms": 10, "reorder_pct": 101}, "reorder"), ({"loss_pct": 5, "reorder_pct": 5}, "reordering"),
    ({}, "changes nothing"), ({"delay_ms": "soon"}, "number"), ({"delay_ms": float("inf")}, "finite"),
])
def test_out_of_range_shapes_are_one_line_usage_errors(value, word):
    with pytest.raises(UsageError, match=word) as exc:
        shape_of(value)
    assert "\n" not in str(exc.value)


def test_links():
    assert links_of({}) == "all" and links_of({"links": "peers"}) == "peers"
    assert links_of({"links": "client,n2"}) == ["n2", "client"]
    assert links_of({"links": ["n10", "n2"]}) == ["n2", "n10"]
    for bad in ("everything", ["n2", "host"], [], 5):
        with pytest.raises(UsageError):
            links_of({"links": bad})


def test_install_script_shapes_the_interface_or_the_chosen_destinations():
    whole = install_script(Shape(100.0), "10.0.0.12", None)
    assert "root handle 4b43: netem delay 100ms" in whole and "u32" not in whole
    per_link = install_script(Shape(50.0, loss_pct=1.0), "10.0.0.12", ["10.0.0.12", "10.0.0.1"])
    assert "root handle 4b43: prio bands 4" in per_link
    assert "parent 4b43:4 handle 4b44: netem delay 50ms loss 1%" in per_link
    assert per_link.count("u32 match ip dst") == 2 and "10.0.0.1/32 flowid 4b43:4" in per_link
    assert "ip -o route get 10.0.0.12" in per_link


def test_heal_script_removes_only_our_root_qdisc_and_the_iptables_path():
    script = heal_script()
    assert "4b43: root" in script and "tc qdisc del" in script
    assert "command -v tc" in script  # a host without tc has nothing to heal
    assert "-t filter -D OUTPUT -j KCHAOS-LOSS" in script and "-t mangle -D INPUT -j KCHAOS-DELAY" in script
    assert "-t mangle -X KCHAOS-DELAY" in script and "kill -KILL" in script and ipt.PID_FILE in script


def test_install_script_says_when_the_kernel_lacks_the_qdisc():
    assert f"exit {NO_QDISC_EXIT};;" in install_script(Shape(100.0), "10.0.0.12", None)


def test_mechanism():
    assert mechanism_of({}) == "auto" and mechanism_of({"mechanism": "iptables"}) == "iptables"
    with pytest.raises(UsageError, match="mechanism") as exc:
        mechanism_of({"mechanism": "ebpf"})
    assert "\n" not in str(exc.value)


def test_iptables_rules_drop_on_the_way_out_and_queue_on_the_way_in():
    rules = ipt.rule_args(5.0, 100.0, ["10.0.0.2", "10.0.0.3"])
    assert rules == [
        ["KCHAOS-LOSS", "-d", "10.0.0.2/32", "-m", "statistic", "--mode", "random", "--probability", "0.05",
         "-j", "DROP"],
        ["KCHAOS-LOSS", "-d", "10.0.0.3/32", "-m", "statistic", "--mode", "random", "--probability", "0.05",
         "-j", "DROP"],
        ["KCHAOS-DELAY", "-s", "10.0.0.2/32", "-j", "NFQUEUE", "--queue-num", "19267", "--queue-bypass"],
        ["KCHAOS-DELAY", "-s", "10.0.0.3/32", "-j", "NFQUEUE", "--queue-num", "19267", "--queue-bypass"]]
    assert ipt.rule_args(100.0, 0.0, None) == [
        ["KCHAOS-LOSS", "-o", "$dev", "-m", "statistic", "--mode", "random", "--probability", "1", "-j", "DROP"]]
    assert ipt.rule_args(0.0, 20.0, None) == [
        ["KCHAOS-DELAY", "-i", "$dev", "-j", "NFQUEUE", "--queue-num", "19267", "--queue-bypass"]]
    script = ipt.install_script(ipt.rule_args(0.5, 20.0, None))
    assert "iptables -w -t filter -A KCHAOS-LOSS -o $dev -m statistic" in script  # $dev left to the shell
    assert "-t mangle -I INPUT -j KCHAOS-DELAY" in script and "-t filter -I OUTPUT -j KCHAOS-LOSS" in script
    assert "--probability 0.005" in script


def test_delayer_command_line_matches_its_heal_pattern_and_the_pattern_not_itself():
    import re
    argv = ipt.delayer_argv(100.0, 10.0, 25.0, 7)
    assert re.search(ipt.DELAYER_PATTERN, " ".join(argv))
    assert not re.search(ipt.DELAYER_PATTERN, ipt.heal_script())  # pgrep -f must not find the heal shell
    assert argv[argv.index("--seed") + 1] == "7" and argv[argv.index("--reorder-pct") + 1] == "25"


def _packet_message(queue: int, packet_id: int) -> bytes:
    hdr = nd.attr(nd.NFQA_PACKET_HDR, struct.pack(">IHB", packet_id, 0x0800, 1))
    mark = nd.attr(10, struct.pack(">I", 0))
    return nd.message(nd.NFQNL_MSG_PACKET, queue, mark + hdr)


def test_delayer_reads_packet_ids_and_acks_and_writes_verdicts():
    ack = struct.pack("=IHHII", 36, nd.NLMSG_ERROR, 0, 3, 0) + struct.pack("=i", -16) + b"\0" * 16
    ids, errors = nd.parse(_packet_message(19267, 41) + _packet_message(19267, 42) + ack)
    assert ids == [41, 42] and errors == [(3, 16)]
    v = nd.verdict(19267, 42)
    length, kind, flags, _, _ = struct.unpack_from("=IHHII", v)
    assert length == len(v) == 16 + 4 + 12 and kind == (3 << 8) | 1 and flags == nd.NLM_F_REQUEST
    assert struct.unpack_from(">H", v, 18)[0] == 19267  # queue number, big-endian, in nfgenmsg
    assert struct.unpack_from(">II", v, 24) == (nd.NF_ACCEPT, 42)
    assert struct.unpack_from(">II", nd.verdict(1, 5, accept=False), 24) == (nd.NF_DROP, 5)
    bind, params, maxlen, flags_msg = nd.config_messages(19267, 500)
    assert struct.unpack_from("=HHBBH", bind, 20)[1:3] == (nd.NFQA_CFG_CMD, nd.NFQNL_CFG_CMD_BIND)
    assert params[24:29] == struct.pack(">IB", 0, nd.NFQNL_COPY_META)  # metadata only, never payloads
    assert struct.unpack_from(">I", maxlen, 24)[0] == 500
    assert all(struct.unpack_from("=H", m, 6)[0] & nd.NLM_F_ACK for m in (bind, params, maxlen, flags_msg))


def test_delayer_hold_times():
    rng = random.Random(5)
    holds = [nd.hold_s(rng, 100.0, 20.0, 0.0) for _ in range(2000)]
    assert all(0.08 <= h <= 0.12 for h in holds) and max(holds) - min(holds) > 0.03  # uniform over ±jitter
    assert {nd.hold_s(rng, 100.0, 0.0, 0.0) for _ in range(10)} == {0.1}
    mixed = [nd.hold_s(rng, 100.0, 0.0, 25.0) for _ in range(4000)]
    assert set(mixed) == {0.0, 0.1} and 800 < mixed.count(0.0) < 1200  # the reordered share goes at once
    assert {nd.hold_s(rng, 100.0, 0.0, 100.0) for _ in range(10)} == {0.0}
