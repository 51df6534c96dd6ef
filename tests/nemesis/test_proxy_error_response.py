"""The proxy's error-response action: the answers it writes in the broker's
place, byte for byte per version, and refusals of rules it cannot serve."""
from __future__ import annotations

import struct

import pytest

from infra.errors import UsageError
from nemesis.proxy_rules import parse_rule
from nemesis.proxy_wire import (RETRIABLE_ERRORS, RequestHeader, endtxn_response_error, error_response,
                                response_correlation_id)


def payload_of(framed: bytes) -> bytes:
    assert struct.unpack(">i", framed[:4])[0] == len(framed) - 4
    return framed[4:]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_endtxn_error_answer_reads_back(version):
    answer = payload_of(error_response(RequestHeader(26, version, 77, "c"), RETRIABLE_ERRORS["NOT_COORDINATOR"]))
    assert response_correlation_id(answer) == 77
    assert endtxn_response_error(answer, version) == 16


@pytest.mark.parametrize("version,expected", [
    # correlation id | throttle | error
    (2, struct.pack(">iih", 9, 0, 14)),
    # correlation id | header tags | throttle | error | body tags
    (3, struct.pack(">ibih", 9, 0, 0, 14) + b"\x00"),
    # version 5 adds the producer id and epoch (-1: none)
    (5, struct.pack(">ibihqh", 9, 0, 0, 14, -1, -1) + b"\x00"),
])
def test_endtxn_error_answer_bytes(version, expected):
    assert payload_of(error_response(RequestHeader(26, version, 9, None), 14)) == expected


@pytest.mark.parametrize("api_key,version,expected", [
    (22, 1, struct.pack(">iihqh", 4, 0, 15, -1, -1)),                   # InitProducerId, classic
    (22, 4, struct.pack(">ibihqh", 4, 0, 0, 15, -1, -1) + b"\x00"),     # InitProducerId, flexible
    (25, 2, struct.pack(">iih", 4, 0, 15)),                            # AddOffsetsToTxn, classic
    (25, 3, struct.pack(">ibih", 4, 0, 0, 15) + b"\x00"),              # AddOffsetsToTxn, flexible
])
def test_other_error_answers(api_key, version, expected):
    assert payload_of(error_response(RequestHeader(api_key, version, 4, "c"), 15)) == expected


def test_rule_takes_an_error_by_name():
    rule = parse_rule({"api": "EndTxn", "action": "error-response", "error": "CONCURRENT_TRANSACTIONS"}, 0)
    assert rule.error_code == 51


@pytest.mark.parametrize("raw,needle", [
    ({"api": "Produce", "action": "error-response", "error": "NOT_LEADER_OR_FOLLOWER"}, "cannot answer Produce"),
    ({"api": "EndTxn", "action": "error-response"}, "needs error"),
    ({"api": "EndTxn", "action": "error-response", "error": "UNKNOWN"}, "got 'UNKNOWN'"),
    ({"api": "EndTxn", "action": "close", "error": "NOT_COORDINATOR"}, "error applies to error-response only"),
])
def test_refusals(raw, needle):
    with pytest.raises(UsageError) as info:
        parse_rule(raw, 0)
    assert needle in str(info.value) and "\n" not in str(info.value)
