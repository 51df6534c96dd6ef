"""Client library lines reach kchaos.log, never the console."""
from __future__ import annotations

import logging
from pathlib import Path

from harness.cli import setup_console_logging
from harness.store import attach_log_file


def test_client_library_lines_stay_off_the_console(tmp_path: Path, capsys) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []        # as in a fresh `kchaos` process (pytest adds its own)
    try:
        setup_console_logging()
        handler = attach_log_file(tmp_path)
        logging.getLogger("kchaos.librdkafka").error("FAIL [p0#producer-1]: Connect to ipv4#10.77.0.12:9092 failed")
        logging.getLogger("py4j.clientserver").error("py4j noise")
        logging.getLogger("harness.runner").warning("a harness warning")
        handler.flush()
    finally:
        for h in root.handlers:
            h.close()
        root.handlers, root.level = saved_handlers, saved_level
    console = capsys.readouterr().err
    assert "Connect to" not in console and "py4j noise" not in console
    assert "a harness warning" in console
    logged = (tmp_path / "kchaos.log").read_text()
    assert "Connect to ipv4#10.77.0.12:9092 failed" in logged and "py4j noise" in logged
