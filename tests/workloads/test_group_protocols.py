"""KIP-848 in the group workload, offline: the protocol each member takes
(the run's, or a migration's turn per worker), rebalance events stamped
with it, and the settings the consumer protocol refuses refused in one line
(exit 64) before any cluster starts."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.run_config import RunConfig, WorkloadConfig, load, validate
from harness.samplers import offsets_value
from tests.harness.config_refusals import refused_by_cli, refused_by_validate
from workloads.client import Client, ClientContext, consumer_settings
from workloads.group import CLASSIC_ONLY_SETTINGS, ProtocolMember, member_clients
from workloads.kinds import kind_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Recording(Client):
    """A stand-in member: remembers the consumer settings it opened with, and has one rebalance to report."""

    def __init__(self) -> None:
        self.opened: dict[str, Any] = {}

    def open(self, ctx: ClientContext) -> None:
        self.opened = consumer_settings(ctx)

    def invoke(self, op: dict) -> dict:
        return {"type": "ok", "f": op["f"], "value": None,
                "events": [{"type": "ok", "f": "rebalance", "value": {"assigned": [0], "revoked": []}}]}

    def take_events(self) -> list[dict]:
        return [{"type": "ok", "f": "rebalance", "value": {"assigned": [], "revoked": [0]}}]

    def close(self) -> None:
        pass


def ctx(**consumer: Any) -> ClientContext:
    return ClientContext(bootstrap="", topic="t", partitions=1, mode="subscribe", consumer_config=consumer)


def test_a_member_runs_the_tables_protocol_and_stamps_it_on_its_rebalances():
    member = ProtocolMember(Recording())
    member.open(ctx(**{"group.protocol": "consumer"}))
    assert member.inner.opened["group.protocol"] == "consumer"
    out = member.invoke({"f": "poll", "value": None})
    assert [e["value"]["protocol"] for e in out["events"] + member.take_events()] == ["consumer", "consumer"]
    classic = ProtocolMember(Recording())
    classic.open(ctx())
    assert "group.protocol" not in classic.inner.opened
    assert classic.take_events()[0]["value"]["protocol"] == "classic"


def test_a_migration_gives_each_workers_successors_the_other_protocol_in_turn():
    make = member_clients(lambda w, seed, worker: Recording(), ("classic", "consumer"))
    taken: dict[int, list[str]] = {0: [], 1: []}
    for worker in (0, 1, 0, 0, 1, 0):
        member = make(None, 5, worker)
        member.open(ctx())
        taken[worker].append(member.inner.opened["group.protocol"])
    assert taken == {0: ["classic", "consumer", "classic", "consumer"], 1: ["classic", "consumer"]}
    # a new run (a new kind) starts its count again
    again = member_clients(lambda w, seed, worker: Recording(), ("consumer", "classic"))(None, 5, 0)
    again.open(ctx())
    assert again.inner.opened["group.protocol"] == "consumer"


def test_group_kinds_wrap_their_members_and_others_do_not():
    kind = kind_of(WorkloadConfig(mode="subscribe", group_protocols=["classic", "consumer"]))
    assert kind.group_members and isinstance(kind.make_client(None, 1, 0), ProtocolMember)
    assert not kind_of(WorkloadConfig()).group_members


@pytest.mark.parametrize("key", sorted(CLASSIC_ONLY_SETTINGS))
def test_classic_only_settings_are_refused_with_the_consumer_protocol(tmp_path: Path, key: str):
    toml = f'[workload]\nmode = "subscribe"\n[consumer]\n"group.protocol" = "consumer"\n"{key}" = "1"\n'
    assert f'consumer."{key}" is not a setting of the consumer group protocol' in refused_by_validate(tmp_path, toml)
    migration = f'[workload]\nmode = "subscribe"\ngroup_protocols = ["classic", "consumer"]\n[consumer]\n"{key}" = "1"\n'
    assert "KIP-848" in refused_by_validate(tmp_path, migration)


@pytest.mark.parametrize("toml, needle", [
    ('[workload]\nmode = "subscribe"\ngroup_protocols = ["classic", "eager"]\n', "unknown protocol 'eager'"),
    ('[workload]\ngroup_protocols = ["consumer"]\n', 'needs mode = "subscribe"'),
    ('[workload]\nmode = "subscribe"\ngroup_protocols = ["consumer"]\n[consumer]\n"group.protocol" = "classic"\n',
     "set one"),
    ('kafka_version = "3.9.1"\n[workload]\nmode = "subscribe"\n[consumer]\n"group.protocol" = "consumer"\n',
     "needs Kafka 4.0 or later"),
])
def test_bad_protocol_configs_are_refused(tmp_path: Path, toml: str, needle: str):
    assert needle in refused_by_validate(tmp_path, toml)


def test_the_cli_refuses_a_classic_setting_with_exit_64(tmp_path: Path):
    toml = '[workload]\nmode = "subscribe"\n[consumer]\n"group.protocol" = "consumer"\n"session.timeout.ms" = 6000\n'
    assert "session.timeout.ms" in refused_by_cli(tmp_path, toml)


@pytest.mark.parametrize("name", ["consumer-group-848.toml", "group-migration.toml"])
def test_the_examples_validate(name: str):
    cfg = validate(load(EXAMPLES / name))
    assert cfg.workload.mode == "subscribe" and kind_of(cfg.workload).group_members


class _TP:
    def __init__(self, partition: int, offset: int, error: Any = None):
        self.partition, self.offset, self.error = partition, offset, error


def test_an_offsets_answer_keeps_offsets_nulls_none_and_drops_errors():
    got = offsets_value([_TP(2, 7), _TP(0, -1001), _TP(1, 3, error="COORDINATOR_LOAD_IN_PROGRESS")])
    assert got == {"0": None, "2": 7}
    assert list(got) == ["0", "2"]
    assert RunConfig().workload.group_protocols == []
