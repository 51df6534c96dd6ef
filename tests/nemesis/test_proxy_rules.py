"""The protocol proxy's pure parts: frames and headers from hand-written
bytes, rule parsing and refusals, matching and seeded triggers."""
from __future__ import annotations

import struct

import pytest

from infra.errors import UsageError
from nemesis.proxy_rules import RuleSet, brokers_impaired, matches, parse_rule, parse_rules
from nemesis.proxy_wire import (API_KEYS, decode_request, endtxn_response_error, parse_request_header,
                                produce_refused, produce_response_partitions,
                                response_correlation_id)
from tests.harness.config_refusals import refused_by_cli


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text)) + text.encode()


def compact(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()  # lengths below 127: one varint byte


def header(api: str, version: int, corr: int, client: str | None, flexible: bool) -> bytes:
    out = struct.pack(">hhi", API_KEYS[api], version, corr) + s16(client)
    return out + (b"\x00" if flexible else b"")


def endtxn(version: int, txn: str, committed: bool, corr: int = 7) -> bytes:
    flex = version >= 3
    body = (compact(txn) if flex else s16(txn)) + struct.pack(">qhb", 42, 3, int(committed))
    return header("EndTxn", version, corr, "kchaos-p1", flex) + body + (b"\x00" if flex else b"")


def record_batch(pid: int, epoch: int, seq: int) -> bytes:
    return (struct.pack(">qiibih", 0, 49, 0, 2, 0, 0x10) + struct.pack(">iqq", 0, 0, 0)
            + struct.pack(">qhii", pid, epoch, seq, 1))


def produce_v7(txn: str, partition: int) -> bytes:
    batch = record_batch(1001, 2, 17)
    body = (s16(txn) + struct.pack(">hi", -1, 30000) + struct.pack(">i", 1) + s16("kchaos")
            + struct.pack(">i", 1) + struct.pack(">ii", partition, len(batch)) + batch)
    return header("Produce", 7, 11, "kchaos-p2", False) + body


def produce_v9(txn: str, partition: int) -> bytes:
    batch = record_batch(5, 0, 3)
    body = (compact(txn) + struct.pack(">hi", -1, 30000) + bytes([2]) + compact("kchaos") + bytes([2])
            + struct.pack(">i", partition) + bytes([len(batch) + 1]) + batch + b"\x00" + b"\x00" + b"\x00")
    return header("Produce", 9, 12, "kchaos-p3", True) + body


@pytest.mark.parametrize("version", [1, 3])
def test_endtxn_header_and_fields(version):
    payload = endtxn(version, "kchaos-1-w0", committed=True)
    h = parse_request_header(payload)
    assert (h.api, h.api_version, h.correlation_id, h.client_id) == ("EndTxn", version, 7, "kchaos-p1")
    f = decode_request(h, payload)
    assert (f.transactional_id, f.producer_id, f.producer_epoch, f.committed) == ("kchaos-1-w0", 42, 3, True)


@pytest.mark.parametrize("build,pid,seq", [(produce_v7, 1001, 17), (produce_v9, 5, 3)])
def test_produce_fields(build, pid, seq):
    payload = build("kchaos-1-w4", 2)
    f = decode_request(parse_request_header(payload), payload)
    assert f.transactional_id == "kchaos-1-w4" and f.partitions == [2]
    assert f.producer_id == pid and f.base_sequence == seq


def test_unknown_api_header_only_and_truncated_body():
    payload = struct.pack(">hhi", 1, 16, 99) + s16(None)
    h = parse_request_header(payload)
    assert (h.api, h.client_id, h.body_offset) == ("Fetch", None, None)
    cut = endtxn(1, "t", True)[:-5]
    f = decode_request(parse_request_header(cut), cut)
    assert f.committed is None  # unreadable: matched on the header alone


def test_response_fields():
    assert response_correlation_id(struct.pack(">ihh", 77, 0, 0)) == 77
    assert endtxn_response_error(struct.pack(">iih", 5, 0, 48), 1) == 48
    assert endtxn_response_error(struct.pack(">ibih", 5, 0, 0, 47), 3) == 47


def test_matching_and_nth_every_probability_window():
    payload = endtxn(1, "kchaos-1-w0", committed=False)
    h = parse_request_header(payload)
    f = decode_request(h, payload)
    rule = parse_rule({"api": "EndTxn", "action": "close", "committed": False, "transactional_id": "kchaos-*",
                       "broker": "n2"}, 0)
    assert matches(rule, "n2", h, f) and not matches(rule, "n1", h, f)
    assert not matches(parse_rule({"api": "EndTxn", "action": "close", "committed": True}, 0), "n2", h, f)
    nth = RuleSet(parse_rules([{"api": "EndTxn", "action": "close", "nth": 3}]), seed=1)
    assert [nth.decide("n1", h, f, 0.0) is not None for _ in range(5)] == [False, False, True, False, False]
    every = RuleSet(parse_rules([{"api": "EndTxn", "action": "close", "every": 2, "limit": 2}]), seed=1)
    assert [every.decide("n1", h, f, 0.0) is not None for _ in range(7)] == [False, True, False, True] + [False] * 3
    window = RuleSet(parse_rules([{"api": "EndTxn", "action": "close", "window_s": [10, 20]}]), seed=1)
    assert [window.decide("n1", h, f, t) is not None for t in (5, 10, 19.9, 20)] == [False, True, True, False]

    def draws(seed):
        rs = RuleSet(parse_rules([{"api": "EndTxn", "action": "close", "probability": 0.3}]), seed=seed)
        return [rs.decide("n1", h, f, 0.0) is not None for _ in range(200)]
    assert draws(4) == draws(4) and draws(4) != draws(5) and 30 < sum(draws(4)) < 90


@pytest.mark.parametrize("raw,needle", [
    ({"api": "Fetchh", "action": "close"}, "unknown API 'Fetchh'"),
    ({"api": "Fetch", "action": "explode"}, "unknown action 'explode'"),
    ({"api": "Fetch", "action": "hold", "until": "txn-end"}, "can never happen for Fetch"),
    ({"api": "EndTxn", "action": "hold", "until": "tomorrow"}, "unknown hold event 'tomorrow'"),
    ({"api": "EndTxn", "action": "hold"}, "hold needs until"),
    ({"api": "Metadata", "action": "close", "transactional_id": "x"}, "carries no transactional id"),
    ({"api": "EndTxn", "action": "delay-request"}, "needs delay_ms"),
    ({"api": "EndTxn", "action": "close", "probability": 2}, "probability must be between 0 and 1"),
    ({"api": "EndTxn", "action": "close", "colour": "red"}, "unknown key 'colour'"),
])
def test_refusals_are_one_line(raw, needle):
    with pytest.raises(UsageError) as info:
        parse_rule(raw, 0)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_bad_rule_exits_64_before_any_cluster(tmp_path):
    toml = ('[workload]\ntransactions = true\n[nemesis]\nfaults = ["proxy"]\n'
            '[[nemesis.proxy]]\napi = "Fetch"\naction = "hold"\nuntil = "txn-end"\n')
    assert "can never happen for Fetch" in refused_by_cli(tmp_path, toml)


def test_rules_and_fault_come_together(tmp_path):
    assert "need the \"proxy\" fault" in refused_by_cli(
        tmp_path, '[[nemesis.proxy]]\napi = "EndTxn"\naction = "close"\n')


def test_produce_response_partitions():
    v7 = struct.pack(">ii", 3, 1) + s16("kchaos") + struct.pack(">i", 1) + struct.pack(">ihqqq", 2, 45, -1, -1, 0) \
        + struct.pack(">i", 0)
    assert produce_response_partitions(v7, 7) == [[2, 45, -1]]
    v9 = struct.pack(">i", 3) + b"\x00" + bytes([2]) + compact("kchaos") + bytes([2]) \
        + struct.pack(">ihqqq", 0, 0, 1286, -1, 0) + bytes([1]) + b"\x00" + b"\x00" + b"\x00" + b"\x00"
    assert produce_response_partitions(v9, 9) == [[0, 0, 1286]]


def test_produce_refused_only_when_every_partition_errs():
    def v7(*parts):
        body = b"".join(struct.pack(">ihqqq", p, err, -1, -1, 0) for p, err in parts)
        return struct.pack(">ii", 3, 1) + s16("kchaos") + struct.pack(">i", len(parts)) + body + struct.pack(">i", 0)
    assert produce_refused(v7((0, 51)), 7)                      # CONCURRENT_TRANSACTIONS: nothing written
    assert not produce_refused(v7((0, 51), (1, 0)), 7)          # one partition written
    assert not produce_refused(v7((0, 0)), 7)
    assert not produce_refused(struct.pack(">iih", 3, 0, 0), 7)  # no partition named
    assert not produce_refused(b"\x00", 7)                       # unreadable


@pytest.mark.parametrize("tables,n,impaired", [
    ([{"api": "Produce", "action": "close"}], 3, 3),                                  # any broker
    ([{"api": "Produce", "action": "close", "broker": "n2"}], 3, 1),
    ([{"api": "Produce", "action": "close", "broker": ["n1", "n2"]},
      {"api": "Fetch", "action": "close", "broker": ["n2"]}], 5, 2),                  # the same brokers once
    ([{"api": "EndTxn", "action": "close", "nth": 2}], 3, 1),                         # one request: one broker
    ([{"api": "Produce", "action": "close", "limit": 2}], 5, 2),
    ([{"api": "Produce", "action": "close", "limit": 1, "broker": ["n1", "n2"]},
      {"api": "Fetch", "action": "close", "broker": "n1"}], 3, 2),                    # bounded: counted apart
    ([{"api": "Produce", "action": "close", "probability": 0}], 3, 0),                # never fires
    ([{"api": "Produce", "action": "close", "limit": 9},
      {"api": "Fetch", "action": "close", "broker": "n1"}], 3, 3),                    # never above n
])
def test_brokers_impaired_is_an_upper_bound_on_the_brokers_rules_reach(tables, n, impaired):
    assert brokers_impaired(parse_rules(tables), n) == impaired
