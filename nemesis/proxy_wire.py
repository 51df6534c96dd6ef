"""Kafka's wire format, as far as the protocol proxy needs it (docs/design.md,
"Faults inside Kafka's protocol").

Every Kafka message is a frame: a 4-byte big-endian size, then the bytes. A
request starts with its header (API key, API version, correlation id, client
id; flexible versions add tagged fields); a response starts with the
correlation id of its request. Bodies are decoded only where a rule or a
hold's release needs a field: the transactional id of the transaction APIs,
the partitions and producer fields of a Produce, the ``committed`` flag of an
EndTxn, the error code of an EndTxn response. Pure functions on bytes.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

API_KEYS: dict[str, int] = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
    "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
    "DescribeGroups": 15, "ListGroups": 16, "ApiVersions": 18, "CreateTopics": 19, "DeleteRecords": 21,
    "InitProducerId": 22, "OffsetForLeaderEpoch": 23, "AddPartitionsToTxn": 24, "AddOffsetsToTxn": 25,
    "EndTxn": 26, "WriteTxnMarkers": 27, "TxnOffsetCommit": 28, "DescribeConfigs": 32,
    "DescribeCluster": 60, "DescribeProducers": 61, "DescribeTransactions": 65, "ListTransactions": 66,
    "ConsumerGroupHeartbeat": 68, "ConsumerGroupDescribe": 69, "GetTelemetrySubscriptions": 71,
    "PushTelemetry": 72,
}
API_NAMES: dict[int, str] = {key: name for name, key in API_KEYS.items()}

# First flexible version (compact strings, tagged fields) of the APIs whose
# bodies are decoded; their request header is then version 2.
FLEXIBLE_FROM: dict[str, int] = {"Produce": 9, "InitProducerId": 2, "AddPartitionsToTxn": 3,
                                 "AddOffsetsToTxn": 3, "EndTxn": 3, "TxnOffsetCommit": 3}
# The APIs whose first body field is the transactional id (Produce from version 3).
TRANSACTIONAL_APIS = frozenset(FLEXIBLE_FROM)


class WireError(ValueError):
    """Bytes that are not the Kafka frame they should be."""


@dataclass
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int | None = None  # where the body starts; None when the header's end is unknown

    @property
    def api(self) -> str:
        return API_NAMES.get(self.api_key, f"api-{self.api_key}")


@dataclass
class RequestFields:
    """The decoded fields rules and holds use (absent ones stay None/empty)."""

    transactional_id: str | None = None
    committed: bool | None = None            # EndTxn
    partitions: list[int] = field(default_factory=list)  # Produce
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None         # Produce: the first batch's

    def as_value(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [])}


class Reader:
    def __init__(self, data: bytes, offset: int = 0):
        self.data, self.pos = data, offset

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireError(f"frame ends at {len(self.data)}, wanted {n} bytes at {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        out = shift = 0
        while True:
            b = self.take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 35:
                raise WireError("varint too long")

    def string(self, compact: bool) -> str | None:
        n = self.uvarint() - 1 if compact else self.int16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def bytes_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.int32()

    def array_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.int32()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def frame(payload: bytes) -> bytes:
    """A payload with its size prefix."""
    return struct.pack(">i", len(payload)) + payload


def frame_size(prefix: bytes | bytearray) -> int:
    size = struct.unpack(">i", prefix)[0]
    if size < 0 or size > 256 * 1024 * 1024:
        raise WireError(f"implausible frame size {size}")
    return size


def flexible(api: str, version: int) -> bool | None:
    """Whether the request is flexible; None for APIs this module does not know."""
    first = FLEXIBLE_FROM.get(api)
    return None if first is None else version >= first


def parse_request_header(payload: bytes) -> RequestHeader:
    r = Reader(payload)
    api_key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
    client_id = r.string(compact=False)  # nullable non-compact in header versions 1 and 2
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    flex = flexible(header.api, api_version)
    if flex is not None:
        if flex:
            r.skip_tags()
        header.body_offset = r.pos
    return header


def response_correlation_id(payload: bytes) -> int:
    return Reader(payload).int32()


def decode_request(header: RequestHeader, payload: bytes) -> RequestFields:
    """The fields of a transaction API's request body; empty for other APIs,
    for a Produce before version 3 (no transactional id) and on bytes this
    module cannot read (a rule then matches on the header alone)."""
    out = RequestFields()
    if header.body_offset is None or (header.api == "Produce" and header.api_version < 3):
        return out
    compact = bool(flexible(header.api, header.api_version))
    r = Reader(payload, header.body_offset)
    try:
        out.transactional_id = r.string(compact)
        if header.api == "EndTxn":
            out.producer_id, out.producer_epoch, out.committed = r.int64(), r.int16(), bool(r.int8())
        elif header.api in ("AddOffsetsToTxn", "AddPartitionsToTxn") and header.api_version < 4:
            out.producer_id, out.producer_epoch = r.int64(), r.int16()
        elif header.api == "Produce":
            _decode_produce(r, header.api_version, compact, out)
    except (WireError, struct.error, UnicodeError):
        pass
    return out


def _decode_produce(r: Reader, version: int, compact: bool, out: RequestFields) -> None:
    r.int16()  # acks
    r.int32()  # timeout
    for _ in range(r.array_len(compact)):
        if version >= 13:
            r.take(16)  # topic id
        else:
            r.string(compact)
        for _ in range(r.array_len(compact)):
            out.partitions.append(r.int32())
            n = r.bytes_len(compact)
            records = r.take(n) if n > 0 else b""
            if out.producer_id is None and len(records) >= 61:
                # RecordBatch v2: ... attributes(2) lastOffsetDelta(4) baseTimestamp(8)
                # maxTimestamp(8) producerId(8) producerEpoch(2) baseSequence(4)
                out.producer_id, out.producer_epoch, out.base_sequence = struct.unpack(">qhi", records[43:57])
            if compact:
                r.skip_tags()
        if compact:
            r.skip_tags()


def produce_response_partitions(payload: bytes, api_version: int) -> list[list[int]] | None:
    """[[partition, error code, base offset], ...] of a Produce response;
    None when unreadable."""
    compact = api_version >= FLEXIBLE_FROM["Produce"]
    r = Reader(payload)
    out: list[list[int]] = []
    try:
        r.int32()
        if compact:
            r.skip_tags()
        for _ in range(r.array_len(compact)):
            if api_version >= 13:
                r.take(16)
            else:
                r.string(compact)
            for _ in range(r.array_len(compact)):
                index, error, base_offset = r.int32(), r.int16(), r.int64()
                out.append([index, error, base_offset])
                r.int64()  # log append time
                if api_version >= 5:
                    r.int64()  # log start offset
                if api_version >= 8:
                    for _ in range(r.array_len(compact)):  # record errors
                        r.int32()
                        r.string(compact)
                    r.string(compact)  # error message
                if compact:
                    r.skip_tags()
            if compact:
                r.skip_tags()
    except (WireError, UnicodeError):
        return None
    return out


def produce_refused(payload: bytes, api_version: int) -> bool:
    """Whether a Produce response refuses every partition it names (none
    written). An answer this module cannot read, or one naming no partition,
    is not a refusal."""
    parts = produce_response_partitions(payload, api_version)
    return bool(parts) and all(error != 0 for _, error, _ in parts)


def endtxn_response_error(payload: bytes, api_version: int) -> int | None:
    """The error code of an EndTxn response (after the correlation id, the
    response header's tagged fields when flexible, and the throttle time)."""
    r = Reader(payload)
    try:
        r.int32()
        if api_version >= FLEXIBLE_FROM["EndTxn"]:
            r.skip_tags()
        r.int32()
        return r.int16()
    except WireError:
        return None


# Retriable errors the proxy can answer with (Kafka's error codes).
RETRIABLE_ERRORS: dict[str, int] = {
    "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7, "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16, "NOT_ENOUGH_REPLICAS": 19,
    "CONCURRENT_TRANSACTIONS": 51,
}
# The APIs whose whole response is the throttle time, the error code and
# fields that have a "none" value: answered without the request's body.
# Each maps to the fields after the error code, by first version: -1 for
# an int64 producer id and an int16 epoch (EndTxn from version 5,
# InitProducerId always).
ERROR_ANSWERABLE: dict[str, tuple[int | None, str]] = {
    "EndTxn": (5, ">qh"), "AddOffsetsToTxn": (None, ""), "InitProducerId": (0, ">qh"),
}


def error_response(header: RequestHeader, error_code: int) -> bytes:
    """The framed response to ``header``'s request that refuses it with
    ``error_code`` and asks for nothing else (throttle time 0; producer id
    and epoch -1 where the version has them). ``header.api`` must be one of
    ERROR_ANSWERABLE."""
    tail_from, tail_format = ERROR_ANSWERABLE[header.api]
    flex = bool(flexible(header.api, header.api_version))
    out = struct.pack(">i", header.correlation_id)
    if flex:
        out += b"\x00"  # response header v1: no tagged fields
    out += struct.pack(">ih", 0, error_code)
    if tail_from is not None and header.api_version >= tail_from:
        out += struct.pack(tail_format, -1, -1)
    if flex:
        out += b"\x00"  # body: no tagged fields
    return frame(out)
