"""junit.xml: parses with ElementTree and has the common JUnit shape."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from checkers.result import ANOMALY_TYPES
from reports import render_run
from reports.junit import junit_xml
from reports.load import load_run

N = len(ANOMALY_TYPES)


def _parse(run_dir):
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    for attr in ("name", "tests", "failures", "errors", "skipped", "time"):
        assert attr in suite.attrib, attr
    float(suite.get("time"))
    cases = suite.findall("testcase")
    for c in cases:
        for attr in ("classname", "name", "time"):
            assert attr in c.attrib
        outcomes = [e.tag for e in c if e.tag in ("failure", "error", "skipped")]
        assert len(outcomes) <= 1
    # the counts agree with the testcases
    assert int(suite.get("tests")) == len(cases)
    assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
    assert int(suite.get("errors")) == len(suite.findall("testcase/error"))
    assert int(suite.get("skipped")) == len(suite.findall("testcase/skipped"))
    for attr in ("tests", "failures", "errors", "skipped"):
        assert root.get(attr) == suite.get(attr)
    return suite, {c.get("name"): c for c in cases}


def _counts(suite):
    return tuple(int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped"))


def test_valid(rendered):
    suite, cases = _parse(rendered["valid"])
    assert _counts(suite) == (N, 0, 0, 1)
    assert set(cases) == set(ANOMALY_TYPES)
    skipped = cases["poll-skip"].find("skipped")
    assert "consumers subscribe" in skipped.get("message")
    assert cases["lost-write"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["seed"] == "11" and props["kafka_version"] == "4.1.1" and props["verdict"] == "valid"


def test_invalid(rendered):
    suite, cases = _parse(rendered["invalid"])
    assert _counts(suite) == (N, 3, 0, 0)
    res = json.loads((rendered["invalid"] / "results.json").read_text())
    for typ in ("lost-write", "inconsistent-offset", "unclean-election"):
        f = cases[typ].find("failure")
        assert f is not None and f.get("type") == typ
        assert f.get("message").startswith(f"{res['anomalies'][typ]['count']} {typ} anomal")
        assert "witness 1: partition 0" in f.text
    assert cases["duplicate"].find("failure") is None
    assert "reproduce: kchaos reproduce" in suite.find("system-out").text
    assert suite.find("testcase").get("classname") == "kchaos.leader-isolation-unclean"


def test_unknown(rendered):
    suite, cases = _parse(rendered["unknown"])
    assert _counts(suite) == (N, 0, N, 0)
    err = cases["lost-write"].find("error")
    assert "OutOfMemoryError" in err.text and "<script>alert(1)</script>" in err.text
    assert err.get("message").startswith("verdict unknown")


def test_missing_results(fixture_copy):
    run_dir = fixture_copy("invalid")
    (run_dir / "results.json").unlink()
    render_run(run_dir)
    suite, cases = _parse(run_dir)
    assert _counts(suite) == (N, 0, N, 0)
    assert "results.json is missing" in cases["duplicate"].find("error").text


def test_invalid_without_failing_type_still_fails(fixture_copy):
    run_dir = fixture_copy("valid")
    res = json.loads((run_dir / "results.json").read_text())
    res["valid"] = False
    (run_dir / "results.json").write_text(json.dumps(res))
    root = ET.fromstring(junit_xml(load_run(run_dir)))
    suite = root.find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == str(N + 1)
    assert root.find("testsuite/testcase[@name='verdict']/failure") is not None


def test_control_characters_are_dropped(fixture_copy):
    run_dir = fixture_copy("unknown")
    res = json.loads((run_dir / "results.json").read_text())
    res["errors"] = ["bad \x00 byte \x1b[31m and \ud800"]
    (run_dir / "results.json").write_text(json.dumps(res))
    root = ET.fromstring(junit_xml(load_run(run_dir)))
    assert "byte" in root.find("testsuite/testcase/error").text
