"""A tiny builder for hand-written histories in the harness's JSONL format."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MS = 1_000_000


class History:
    """Appends ops with increasing index and time (1 ms apart by default)."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.t = 0

    def add(self, process: Any, type: str, f: str, value: Any = None, *, dt: int = MS, **kw: Any) -> dict:
        self.t += dt
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f,
              "value": value, **kw}
        self.ops.append(op)
        return op

    # client ops, invoke and completion back to back
    def send(self, process: int, msgs: list[tuple[int, int, int | None]], type: str = "ok", **kw: Any) -> None:
        """msgs: (partition, value, offset)."""
        self.add(process, "invoke", "send", [[p, v, None] for p, v, _ in msgs], **kw)
        self.add(process, type, "send", [[p, v, o if type == "ok" else None] for p, v, o in msgs], **kw)

    def poll(self, process: int, reads: dict[int, list[tuple[int, int]]], type: str = "ok",
             drain: bool = False) -> None:
        """reads: partition -> [(offset, value)]."""
        extra = {"drain": True} if drain else {}
        self.add(process, "invoke", "poll", None, **extra)
        self.add(process, type, "poll",
                 {str(p): [[o, v] for o, v in rs] for p, rs in reads.items()} if type == "ok" else None,
                 **extra)

    def assign(self, process: int, partitions: list[int], f: str = "assign") -> None:
        self.add(process, "invoke", f, partitions)
        self.add(process, "ok", f, partitions)

    def sample(self, parts: dict[int, tuple[int | None, list[int]]], epoch: int = 0,
               controller: int | None = 1) -> None:
        self.add("sampler", "ok", "sample", {"controller": controller, "partitions": {
            str(p): {"leader": ld, "isr": isr, "epoch": epoch} for p, (ld, isr) in parts.items()}})

    def nemesis(self, f: str, value: dict[str, Any]) -> None:
        self.add("nemesis", "invoke", f, value)
        self.add("nemesis", "info", f, value)

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.write_text("".join(json.dumps(op) + "\n" for op in self.ops), encoding="utf-8")
        return path


def small_history(nemesis: bool = True) -> History:
    """One sample, a send to two partitions, an assign and the poll that reads
    both back (and a partition fault): the smallest valid run."""
    h = History()
    h.sample({0: (1, [1, 2, 3])})
    h.send(0, [(0, 1, 0), (1, 1, 0)])
    h.assign(5, [0, 1])
    h.poll(5, {0: [(0, 1)], 1: [(0, 1)]})
    if nemesis:
        h.nemesis("start-partition", {"nodes": ["n1"]})
    return h
