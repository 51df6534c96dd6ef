"""Is a message that got an error delivery report certainly not written?

``fail`` is a strong claim: the checkers report a ``fail`` send whose value is
ever read as a phantom write. So an error is ``fail`` only when, whatever
happened before it (retries, in-flight timeouts, leader changes), the message
cannot be in the log. Everything else is ``info``.

Why the ``fail`` codes are certain (librdkafka 2.x, src/rdkafka_request.c
``rd_kafka_handle_Produce_error`` and src/rdkafka_topic.c):

* UNKNOWN_TOPIC_OR_PART, UNKNOWN_TOPIC_ID, TOPIC_EXCEPTION and _UNKNOWN_TOPIC
  reach a delivery report only from the unassigned-partition queue, when
  metadata says the topic does not exist (``rd_kafka_topic_assign_uas``):
  those messages never had a leader, so they were never sent. A produce
  *response* with UNKNOWN_TOPIC_OR_PART is retried (refresh, no retry count)
  until the message times out, which reports _MSG_TIMED_OUT instead.
* MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD: the broker
  validated the batch and rejected it. A retry resends the same batch (the
  idempotent producer keeps batches intact), so an earlier attempt of it was
  rejected the same way. (Not certain if the topic's max.message.bytes is
  lowered during a run; kchaos never does that.)
* TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_REQUIRED_ACKS: rejected
  before any append, permanently (ACLs and acks do not change during a run).

Notably ``info``:

* _MSG_TIMED_OUT, _TIMED_OUT, REQUEST_TIMED_OUT, _TRANSPORT, NETWORK_EXCEPTION,
  _PURGE_INFLIGHT: the request may have been appended.
* _PURGE_QUEUE: purged from the client's queue. Not certain: a message whose
  earlier attempt timed out in flight is put back on the partition queue for
  its retry (``rd_kafka_retry_msgq``, status POSSIBLY_PERSISTED), and a purge
  reports it _PURGE_QUEUE too. The Python client does not expose the
  message's persistence status, so this cannot be told apart.
* _UNKNOWN_PARTITION: also reported for messages failed out of a partition
  queue when the partition disappears from metadata (possibly sent before).
* NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended to the leader), NOT_LEADER,
  NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR (retriable: an earlier attempt may
  have been written), OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
  UNKNOWN_PRODUCER_ID, _FATAL and anything fatal, INVALID_TIMESTAMP (depends
  on the broker clock, which the clock nemesis moves between attempts),
  and every code not listed.

Messages that never entered librdkafka's queue (``produce()`` raised, e.g. a
local MSG_SIZE_TOO_LARGE, BufferError, or _UNKNOWN_TOPIC once the topic is
known not to exist) are certainly not written regardless of the code; the
client handles those without this function.
"""
from __future__ import annotations

from confluent_kafka import KafkaError

from workloads.client import FAIL, INFO

CERTAIN_NOT_WRITTEN: frozenset[int] = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_TOPIC_ID,
    KafkaError.TOPIC_EXCEPTION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.INVALID_REQUIRED_ACKS,
})


def classify_delivery_error(err: KafkaError) -> str:
    """``"fail"`` if a delivery report with this error means the message is
    certainly not in the log, else ``"info"`` (see the module docstring)."""
    if err.fatal():
        return INFO
    return FAIL if err.code() in CERTAIN_NOT_WRITTEN else INFO


def error_name(err: KafkaError) -> str:
    try:
        return err.name()
    except Exception:  # pragma: no cover - unnamed codes
        return str(err.code())
