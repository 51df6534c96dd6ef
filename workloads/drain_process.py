"""One partition's final drain, in a process of its own (``workloads.drain``).

Started by ``workloads.drain._drain_in_process`` as a helper process of the
recording process (``history.child_process``), with its settings as one JSON
argument: ``bootstrap``, ``topic``, ``partition``, ``consumer_config``,
``seconds`` (until the drain's deadline), ``process``, ``batch``, ``node``,
``max_acked``, ``wait`` and ``log_level``. It runs the same drain of one
partition as a thread would (``workloads.drain._drain_partition``) and, instead
of recording its ops, hands each to the parent as a line (``record``)::

    {"process": q, "type": "ok", "f": "poll", "watermarks": {...}, "end": 120}<TAB>{...the op...}

then, last, ``{"completed": true|false}``; log records as
``{"log": level, "msg": ...}``. The parent records the ops in order, so the
history is the same as a drain in threads would write; the op's text is
encoded here, once, and written as it is (``HistoryWriter.append_text``).

Why a process: the drain reads every message a run wrote back in Python
(about 1 us each); in threads of the recording process its partitions shared
one GIL with each other and with the record's readers and the samplers, and
read at a third of the speed they read alone (docs/benchmarks.md, "The final
drain in processes").
"""
from __future__ import annotations

import json
import logging
import sys
import time

from history.child_process import LogLines, ignore_interrupt, say, say_line, watch_parent
from history.ops import INVOKE
from history.writer import op_text
from workloads.drain import _drain_partition


def record(op: dict) -> dict:
    """Hand ``op`` to the parent: what it counts (``Recorder.append_text``) and
    follows (a completion's ``watermarks`` and ``end``) as JSON, a tab, and the
    op as the history writes it (JSON holds no raw tab)."""
    head = {"process": op["process"], "type": op["type"], "f": op["f"]}
    if op["type"] != INVOKE:
        head.update(watermarks=op.get("watermarks"), end=op.get("end"))
    say_line(json.dumps(head, separators=(",", ":")) + "\t" + op_text(op))
    return op


def main(argv: list[str]) -> int:
    ignore_interrupt()
    conf = json.loads(argv[0])
    root = logging.getLogger()
    root.addHandler(LogLines())
    root.setLevel(int(conf.get("log_level", logging.INFO)))
    watch_parent()
    deadline = time.monotonic() + float(conf["seconds"])
    completed = _drain_partition(conf["bootstrap"], conf["topic"], int(conf["partition"]), conf["consumer_config"],
                                 record, deadline, int(conf["process"]), int(conf["batch"]), conf["node"],
                                 conf["max_acked"], conf["wait"])
    say({"completed": completed})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
