"""What a run ran on (harness/provenance.py)."""
from __future__ import annotations

import re

from harness.provenance import differences, harness_side


def test_the_harness_side_names_kchaos_the_packages_and_the_jdk():
    ran_on = harness_side()
    assert re.fullmatch(r"[0-9a-f]{40}", ran_on["kchaos"]["commit"] or "0" * 40)
    assert ran_on["packages"]["librdkafka"] and ran_on["packages"]["confluent-kafka"]
    assert ran_on["packages"]["pyspark"] and ran_on["packages"]["pyarrow"] and ran_on["packages"]["numpy"]
    assert "version" in (ran_on["jdk"] or "")


def test_differences_are_one_line_per_entry_either_run_recorded():
    a = {"kafka": {"version": "4.3.1", "jars": {"kafka-clients-4.3.1.jar": "aa"}}, "python": "3.11.2"}
    b = {"kafka": {"version": "4.3.1", "jars": {"kafka-clients-4.3.1.jar": "bb"}}, "jdk": "openjdk 17"}
    assert differences(a, b) == ["jdk: not recorded != openjdk 17",
                                 "kafka.jars.kafka-clients-4.3.1.jar: aa != bb",
                                 "python: 3.11.2 != not recorded"]
    assert differences(a, a) == []
    assert differences(None, a) == ["original recorded no software versions (ran_on)"]
