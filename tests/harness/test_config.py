"""Run configs: TOML in, precise one-line errors out."""
import subprocess
import sys

import pytest

from harness.run_config import RunConfig, from_dict, load, validate
from infra.errors import UsageError


def write(tmp_path, text, name="run.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_loads_nested_tables(tmp_path):
    cfg = load(write(tmp_path, 'name = "x"\ntime_limit = 5\n[workload]\npartitions = 2\n[producer]\nacks = "1"\n"enable.idempotence" = false\n'
                               '[nemesis]\nfaults = ["kill"]\n'))
    assert cfg.name == "x" and cfg.time_limit == 5.0 and cfg.workload.partitions == 2
    assert cfg.producer == {"acks": "1", "enable.idempotence": False} and cfg.nemesis.faults == ["kill"]
    validate(cfg)


def test_malformed_toml_names_file_and_line(tmp_path):
    p = write(tmp_path, 'name = "x"\ntime_limit = = 5\n')
    with pytest.raises(UsageError) as info:
        load(p)
    assert str(p) in str(info.value) and "line 2" in str(info.value)


@pytest.mark.parametrize("data, needle", [
    ({"bogus": 1}, "unknown key 'bogus'; valid keys:"),
    ({"workload": {"nme": "queue"}}, "unknown key workload.'nme'"),
    ({"time_limit": "long"}, "must be a number"),
])
def test_unknown_or_mistyped_keys(data, needle):
    with pytest.raises(UsageError) as info:
        from_dict(data)
    assert needle in str(info.value)


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: setattr(c.workload, "name", "bank"), "valid workloads: queue"),
    (lambda c: setattr(c.workload, "mode", "steal"), "valid modes: assign, subscribe"),
    (lambda c: setattr(c.workload, "replication_factor", 5), "replication factor 5"),
    (lambda c: setattr(c, "time_limit", 0), "time limit must be positive"),
    (lambda c: setattr(c, "time_limit", -3), "time limit must be positive"),
    (lambda c: setattr(c, "nodes", 9), "nodes must be between 1 and 7"),
    (lambda c: c.topic.__setitem__("min.insync.replicas", 4), "min.insync.replicas 4"),
    (lambda c: setattr(c.nemesis, "faults", ["flood"]), "flood"),
])
def test_impossible_settings(mutate, needle):
    cfg = RunConfig()
    mutate(cfg)
    with pytest.raises(UsageError) as info:
        validate(cfg)
    assert needle in str(info.value)


@pytest.mark.parametrize("args, toml, needle", [
    (["--time-limit", "0"], None, "time limit must be positive"),
    (["--nodes", "2"], "[workload]\nreplication_factor = 3\n", "replication factor 3"),
    ([], "[workload]\nname = 'bank'\n", "valid workloads"),
    ([], "oops = [\n", "invalid TOML"),
    ([], "surprise = 1\n", "unknown key 'surprise'"),
    (["--nemesis", "partition,flood"], None, "flood"),
])
def test_cli_rejects_bad_input_with_one_line_and_64(tmp_path, args, toml, needle):
    if toml is not None:
        args = [*args, "--config", str(write(tmp_path, toml))]
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", *args, "--store", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert needle in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing started, nothing stored


def test_missing_config_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load(tmp_path / "nope.toml")


@pytest.mark.parametrize("table, key, value", [
    ("producer", "acks", "sometimes"),
    ("producer", "compression.typo", "lz4"),
    ("consumer", "auto.offset.reset", "sideways"),
    ("consumer", "isolation.level", "dirty"),
])
def test_client_settings_are_validated_by_librdkafka(table, key, value):
    cfg = RunConfig()
    getattr(cfg, table)[key] = value
    with pytest.raises(UsageError) as info:
        validate(cfg)
    msg = str(info.value)
    assert msg.startswith(f"{table}.") and key in msg and "\n" not in msg
