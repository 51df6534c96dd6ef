"""The recording process's helper processes: the history's columnar copy
(``history.live_copy``) and the final drain's readers
(``workloads.drain_process``).

Each is ``python -m <module> '<its settings as one JSON argument>'``, started
from this checkout with the parent's interpreter. It reports to its parent in
JSON lines on stdout (``say``): ``{"log": level, "msg": ...}`` for the parent
to log as its own (``LogLines``, ``relay_log``), and whatever else the module
defines. Its stdin is the parent's: when it closes without a word, the parent
died, and the helper exits at once (``exit_when_closed``) rather than outlive
the run. Ctrl-C is the parent's to handle (``ignore_interrupt``).

Processes, not threads, because each does per-message Python work (pairing
the history, reading back every message) that in a thread of the recording
process would share its GIL with the clients or with each other.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from history import allocator

ROOT = Path(__file__).resolve().parents[1]     # the checkout the helper's module is imported from


def start(module: str, settings: dict[str, Any], *, text: bool) -> subprocess.Popen:
    """``python -m module settings`` with pipes on stdin and stdout (raises
    OSError); its memory allocated as ``history.allocator`` says."""
    env = dict(os.environ, **allocator.ENV,
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.Popen([sys.executable, "-m", module, json.dumps(settings)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, cwd=str(ROOT), text=text)


_say_lock = threading.Lock()


def say(obj: dict) -> None:
    """One JSON line to the parent (whole lines, from any thread)."""
    say_line(json.dumps(obj, separators=(",", ":")))


def say_line(line: str) -> None:
    """One line (without its newline) to the parent, whole, from any thread."""
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class LogLines(logging.Handler):
    """Log records, as ``{"log": level, "msg": ..., "logger": name}`` lines, for
    the parent to log under the same logger (so its console shows or hides
    them as it would its own: the client libraries' only at -vv)."""

    def emit(self, record: logging.LogRecord) -> None:
        say({"log": record.levelno, "msg": record.getMessage(), "logger": record.name})


def relay_log(msg: dict, log: logging.Logger) -> bool:
    """Log a helper's ``{"log": ...}`` line as the parent's own, under its
    logger's name (else ``log``); False for any other line."""
    if "log" not in msg:
        return False
    name = msg.get("logger")
    (logging.getLogger(name) if isinstance(name, str) and name else log).log(int(msg["log"]), "%s", msg.get("msg"))
    return True


def ignore_interrupt() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_when_closed(stream: Iterable[str], on_line: Callable[[dict], bool] | None = None) -> None:
    """Read the parent's lines (in a thread of the helper's own); ``on_line``
    returning True means the parent said its last word. End of stream before
    that: the parent died, exit now (status 3)."""
    for line in stream:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if on_line is not None and on_line(msg):
            return
    os._exit(3)


def watch_parent(on_line: Callable[[dict], bool] | None = None) -> None:
    """``exit_when_closed`` on stdin, in a daemon thread."""
    threading.Thread(target=exit_when_closed, args=(sys.stdin, on_line), daemon=True,
                     name="kchaos-parent").start()
