"""The pipelined producer mode's config: accepted, scheduled, refused with one line."""
from pathlib import Path

import pytest

from harness import schedule
from harness.run_config import RunConfig, WorkloadConfig, load, validate
from infra.errors import UsageError
from tests.harness.config_refusals import refused_by_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelined.toml"


def test_example_config_is_valid_and_pipelined():
    cfg = validate(load(EXAMPLE))
    assert cfg.workload.producer == "pipelined" and cfg.workload.in_flight == 500


def test_pipelined_sends_are_one_message_and_batch_sends_are_not():
    def sends(producer: str) -> list:
        cfg = RunConfig(seed=3, workload=WorkloadConfig(producer=producer, max_batch=4))
        ops = schedule.worker_ops(cfg, 0)
        return [op.value for op in (next(ops) for _ in range(300)) if op.f == "send"]
    assert {len(v) for v in sends("pipelined")} == {1}
    assert max(len(v) for v in sends("batch")) > 1


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: setattr(c.workload, "producer", "async"), "valid producers: batch, pipelined"),
    (lambda c: setattr(c.workload, "in_flight", 0), "in_flight must be between 1 and"),
    (lambda c: setattr(c.workload, "in_flight", 100000), "in_flight must be between 1 and"),
    (lambda c: (setattr(c.workload, "producer", "pipelined"),
                c.producer.__setitem__("max.in.flight.requests.per.connection", 6)),
     "producer.\"max.in.flight.requests.per.connection\""),
])
def test_bad_pipelined_settings(mutate, needle):
    cfg = RunConfig()
    mutate(cfg)
    with pytest.raises(UsageError) as info:
        validate(cfg)
    assert needle in str(info.value)


@pytest.mark.parametrize("toml, needle", [
    ("[workload]\nproducer = 'async'\n", "valid producers"),
    ("[workload]\nin_flight = 0\n", "in_flight must be between 1 and"),
    ("[workload]\nin_flight = 'many'\n", "workload.in_flight must be a number"),
])
def test_cli_refuses_bad_pipelined_config_with_64(tmp_path, toml, needle):
    assert needle in refused_by_cli(tmp_path, toml)
