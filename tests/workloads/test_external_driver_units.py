"""``client = "external"`` and ``[workload] driver_command``: an outside
driver's command line, validated before anything starts (one line, exit 64),
checked by the driver itself, and recorded in config.json's client settings."""
from __future__ import annotations

import sys
import textwrap

import pytest

from harness.client_config import client_context, stored_client_settings
from harness.run_config import load, validate
from tests.harness.config_refusals import refused_by_cli, refused_by_validate
from workloads.driver_protocol import DriverClient
from workloads.kinds import kind_of

CHECKING_DRIVER = textwrap.dedent('''
    import json, sys
    req = json.loads(sys.stdin.readline())
    bad = [k for k in req["config"]["producer"] if k.startswith("bogus.")]
    if bad:
        print(json.dumps({"type": "fail", "f": "check", "value": None,
                          "error": f'producer."{bad[0]}": not a setting of the outside client'}), flush=True)
    else:
        print(json.dumps({"type": "ok", "f": "check", "value": {"client": "outside", "version": "1.2"}}), flush=True)
''')


@pytest.fixture
def driver(tmp_path) -> str:
    script = tmp_path / "driver.py"
    script.write_text(CHECKING_DRIVER)
    return f'["{sys.executable}", "{script}"]'


@pytest.mark.parametrize(("toml", "expected"), [
    ('[workload]\nclient = "external"', 'client = "external" needs [workload] driver_command'),
    ('[workload]\nclient = "external"\ndriver_command = []', 'client = "external" needs [workload] driver_command'),
    ('[workload]\nclient = "external"\ndriver_command = ["", "x"]', "every element must be a non-empty string"),
    ('[workload]\nclient = "external"\ndriver_command = [1]', "every element must be a non-empty string"),
    ('[workload]\nclient = "external"\ndriver_command = "drv"', "driver_command"),
    ('[workload]\nclient = "external"\ndriver_command = ["/no/such/driver"]',
     "'/no/such/driver' is not an executable file nor a command on PATH"),
    ('[workload]\ndriver_command = ["/bin/true"]', 'driver_command is for client = "external", not client = "librdkafka"'),
    ('[workload]\nclient = "external"\ndriver_command = ["/bin/true"]\nclient_version = "1"',
     'client_version \'1\' is for client = "java"'),
    ('[workload]\nclient = "external"\ndriver_command = ["/bin/true"]', "the driver could not check the settings"),
])
def test_bad_driver_commands_are_refused(tmp_path, toml, expected):
    assert expected in refused_by_validate(tmp_path, toml)


def test_a_bad_driver_command_is_exit_64_before_anything_starts(tmp_path):
    line = refused_by_cli(tmp_path, '[workload]\nclient = "external"\ndriver_command = ["/no/such/driver"]\n')
    assert "is not an executable file" in line


def test_the_driver_checks_the_settings(tmp_path, driver):
    toml = f'[workload]\nclient = "external"\ndriver_command = {driver}\n[producer]\n"bogus.x" = 1\n'
    assert refused_by_validate(tmp_path, toml) == 'producer."bogus.x": not a setting of the outside client'


def test_a_good_driver_runs_the_driver_kinds_and_is_recorded(tmp_path, driver):
    path = tmp_path / "run.toml"
    path.write_text(f'[workload]\nclient = "external"\ndriver_command = {driver}\nproducer = "pipelined"\n')
    cfg = validate(load(path))
    assert client_context(cfg).driver == tuple(cfg.workload.driver_command)
    kind = kind_of(cfg.workload)
    assert kind.name == "pipelined" and isinstance(kind.make_client(cfg.workload, 1, 0), DriverClient)
    library = stored_client_settings(cfg)["library"]
    assert library == {"name": "external", "command": cfg.workload.driver_command, "client": "outside",
                       "version": "1.2"}
    assert cfg.to_json()["workload"]["driver_command"] == cfg.workload.driver_command
