"""nemesis/quorum.py and broker/quorum_tool.py without a cluster: the refusals
before any cluster starts, the voter picked, the tool's text parsed."""
from __future__ import annotations

import random

import pytest

from broker.config import render_properties
from broker.dump_text import parse_log_entries
from broker.quorum_tool import initial_controllers, parse_replication, parse_status
from infra.errors import UsageError
from nemesis.packages import build_packages, plan
from nemesis.quorum import ACTIVE_CONTROLLER, CONTROLLERS, check_quorum, pick_voter, voter_ids

STATUS = """ClusterId:              5LE0iHz_QCCaLNM4SJHJkA
LeaderId:               3
LeaderEpoch:            2
HighWatermark:          812
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   0
CurrentVoters:          [{"id": 2, "directoryId": "vxDFPN6AS4qZVIAJIhchZQ", "endpoints": ["CONTROLLER://10.77.0.12:9093"]}, {"id": 3, "directoryId": "j0AvmPTuSaClKtkXvp2YRA", "endpoints": ["CONTROLLER://10.77.0.13:9093"]}]
CurrentObservers:       [{"id": 1, "directoryId": "uiAxP20AQjCoz3GTQSqKhg"}]
"""


@pytest.mark.parametrize("quorum, version, controllers, faults, says", [
    ("dynamic", "3.8.1", 3, [], "needs KIP-853"),
    ("static", "4.3.1", 3, ["quorum-changes,kill"], "static quorum cannot"),
    ("dynamic", "4.3.1", 0, ["partition", "quorum-changes"], "needs separate controllers"),
    ("elastic", "4.3.1", 3, [], "unknown quorum"),
])
def test_refusals_come_before_any_cluster(quorum, version, controllers, faults, says):
    with pytest.raises(UsageError, match=says):
        check_quorum(quorum, version, controllers, faults)


def test_a_dynamic_quorum_on_39_with_separate_controllers_is_accepted():
    check_quorum("dynamic", "3.9.1", 3, ["quorum-changes", "partition"])
    check_quorum("static", "3.8.1", 0, ["kill"])


def test_describe_status_is_parsed_and_a_voter_picked():
    status = parse_status(STATUS)
    assert status["leader_id"] == 3 and status["high_watermark"] == 812
    assert voter_ids(status) == [2, 3] and status["observers"][0]["id"] == 1
    assert pick_voter(status, ACTIVE_CONTROLLER, 0) == 3
    assert pick_voter(status, CONTROLLERS, 5) == 3 and pick_voter(status, CONTROLLERS, 4) == 2


def test_describe_replication_rows():
    text = ("NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status\n"
            "3       j0AvmPTuSaClKtkXvp2YRA  812           0    1795444304146       1795444304146          Leader\n"
            "2       vxDFPN6AS4qZVIAJIhchZQ  812           0    1795444304100       1795444304100          Follower\n")
    rows = parse_replication(text)
    assert [(r["NodeId"], r["Status"]) for r in rows] == [("3", "Leader"), ("2", "Follower")]


def test_dynamic_config_names_bootstrap_servers_not_voters():
    voters = [("n4", "10.0.0.4"), ("n5", "10.0.0.5")]
    text = render_properties("n4", "10.0.0.4", voters, role="controller", brokers=3, quorum="dynamic")
    assert "controller.quorum.bootstrap.servers=10.0.0.4:9093,10.0.0.5:9093" in text
    assert "controller.quorum.voters" not in text
    assert "controller.quorum.voters=4@10.0.0.4:9093" in render_properties("n4", "10.0.0.4", voters,
                                                                           role="controller", brokers=3)
    assert initial_controllers([("n4", "10.0.0.4", "AAA"), ("n5", "10.0.0.5", "BBB")]) == \
        "4@10.0.0.4:9093:AAA,5@10.0.0.5:9093:BBB"


def test_the_package_plans_removals_each_followed_by_an_add():
    steps = plan(build_packages(["quorum-changes"]), 60, 8, random.Random(7))
    fs = [op["f"] for _, op in steps]
    assert fs and fs[0] == "remove-controller"
    assert all(a != b for a, b in zip(fs, fs[1:])) and fs[-1] == "add-controller"
    assert {op["value"]["target"] for _, op in steps if op["f"] == "remove-controller"} <= {ACTIVE_CONTROLLER,
                                                                                          CONTROLLERS}


def test_log_entries_digest_record_lines_with_their_batch_epoch():
    text = ("Dumping /x/00000000000000000000.log\n"
            "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
            "partitionLeaderEpoch: 3 isTransactional: false isControl: false position: 0 CreateTime: 17 size: 1\n"
            "| offset: 0 CreateTime: 17 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: {\"a\":1}\n"
            "| offset: 1 CreateTime: 17 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: {\"a\":2}\n")
    entries = parse_log_entries(text)
    assert [(o, e) for o, e, _ in entries] == [(0, 3), (1, 3)] and entries[0][2] != entries[1][2]
    assert parse_log_entries(text.replace("position: 0", "position: 99")) == entries
