"""junit.xml: one testcase per anomaly type, for CI dashboards.

* a type with a non-allowed count > 0 -> ``<failure>`` with the anomaly summary
* a type that is allowed and occurred -> ``<skipped>`` with the reason
* verdict unknown (checker crash, no results.json) -> ``<error>`` on every
  testcase, carrying the checker errors
* verdict invalid although no type fails -> an extra failing ``verdict`` case,
  so an invalid run can never look green
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .load import INVALID, UNKNOWN, AnomalyRow, RunData
from .view import jtext

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _x(s: Any) -> str:
    """Text safe for XML 1.0 (ElementTree escapes markup but not control chars)."""
    return _XML_BAD.sub("\ufffd", str(s))


def _classname(name: str) -> str:
    return "kchaos." + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "run")


def _witness_lines(a: AnomalyRow, limit: int = 20) -> list[str]:
    lines = []
    for i, w in enumerate(a.witnesses[:limit], 1):
        ops = [o for o in (w.get("ops") or []) if isinstance(o, dict)]
        idx = ", ".join(jtext(o.get("index"), 20) for o in ops[:10])
        lines.append(f"  witness {i}: partition {jtext(w.get('partition'), 40)}, "
                     f"offsets [{jtext(w.get('offsets'), 200).strip('[]')}], "
                     f"values [{jtext(w.get('values'), 200).strip('[]')}], ops #{idx or '-'}")
    if a.count > len(a.witnesses[:limit]):
        lines.append(f"  ({a.count - len(a.witnesses[:limit])} more not listed)")
    return lines


def junit_xml(run: RunData, report_path: str | None = None, reproduce: list[str] | None = None) -> bytes:
    verdict = run.verdict
    rows = run.anomalies()
    checker = (run.results or {}).get("checker") if run.results else None
    seconds = checker.get("seconds") if isinstance(checker, dict) else None
    total_time = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0

    suites = ET.Element("testsuites", name="kchaos")
    suite = ET.SubElement(suites, "testsuite", name=_x(run.name))
    props = ET.SubElement(suite, "properties")
    for key in ("seed", "kafka_version", "nemesis", "nodes"):
        if key in run.config:
            ET.SubElement(props, "property", name=key, value=_x(jtext(run.config[key], 500)))
    ET.SubElement(props, "property", name="verdict", value=verdict)
    ET.SubElement(props, "property", name="run_dir", value=_x(run.run_dir))

    classname = _classname(run.name)
    errors_text = "\n".join(run.errors) or "; ".join(run.notes) or "the checkers gave no verdict"
    tests = failures = errors = skipped = 0
    for a in rows:
        tests += 1
        tc = ET.SubElement(suite, "testcase", classname=classname, name=a.type, time="0")
        if verdict == UNKNOWN:
            errors += 1
            el = ET.SubElement(tc, "error", message=_x(f"verdict unknown: {errors_text.splitlines()[0][:300]}"),
                               type="unknown")
            el.text = _x(errors_text)
        elif a.failing:
            failures += 1
            msg = f"{a.count} {a.type} anomal{'y' if a.count == 1 else 'ies'}: {a.description}"
            el = ET.SubElement(tc, "failure", message=_x(msg), type=a.type)
            el.text = _x("\n".join([msg] + _witness_lines(a) + ([f"report: {report_path}"] if report_path else [])))
        elif a.allowed and a.count > 0:
            skipped += 1
            ET.SubElement(tc, "skipped", message=_x(f"{a.count} {a.type} allowed: {a.reason or 'no reason given'}"))
    if verdict == INVALID and failures == 0:
        tests += 1
        failures += 1
        tc = ET.SubElement(suite, "testcase", classname=classname, name="verdict", time="0")
        el = ET.SubElement(tc, "failure", message="results.json says the run is invalid", type="verdict")
        el.text = _x(errors_text if run.errors else "no anomaly type accounts for it; see results.json")
    out = [f"verdict: {verdict}"]
    if report_path:
        out.append(f"report: {report_path}")
    out += [f"reproduce: {c}" for c in (reproduce or [])]
    out += [f"note: {n}" for n in run.notes]
    ET.SubElement(suite, "system-out").text = _x("\n".join(out))
    for el in (suites, suite):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("errors", str(errors))
        el.set("skipped", str(skipped))
        el.set("time", f"{total_time:.3f}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)
