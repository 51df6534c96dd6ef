"""Workloads: clients that turn history ops into Kafka calls.
Imports neither nemesis nor infra: clients reach Kafka through bootstrap addresses only.

The workload kinds (``workloads.kinds``: assign, group, pipelined,
pipelined-group, transactions), each a client and an op stream; the queue
workload (``QueueClient``) after Jepsen's Kafka queue test, its
delivery-error classification, and the final drain. See ``workloads.client``
for the Client protocol the runner drives.
"""
from workloads.classify import CERTAIN_NOT_WRITTEN, classify_delivery_error
from workloads.client import (Client, ClientContext, consumer_settings, delivery_timeout_ms, merge_settings,
                            producer_settings)
from workloads.drain import DRAIN_PROCESS_BASE, drain
from workloads.queue import QueueClient, shape_poll

__all__ = ["CERTAIN_NOT_WRITTEN", "Client", "ClientContext", "DRAIN_PROCESS_BASE", "QueueClient",
           "classify_delivery_error", "consumer_settings", "delivery_timeout_ms", "drain", "merge_settings",
           "producer_settings", "shape_poll"]
