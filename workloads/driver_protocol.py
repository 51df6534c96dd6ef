"""The client protocol: a workload client that runs in a child process.

A driver (any program, in any language, on any Kafka client) is one logical
process's Kafka handles. The runner's side, ``DriverClient``, starts it from
a command line (``ClientContext.driver``), writes one JSON request a line to
its stdin and reads one JSON completion a line from its stdout, in order.
docs/design.md, "The client protocol", is the specification: the requests,
the history fields each completion carries, and how timeouts, fenced
producers and aborts are classified. This module only moves the lines:

* ``open`` first, with the process's settings (``open_config``); a ``fail``
  completion makes ``open`` raise, so the worker tries a new process later.
* every op the worker invokes, as its history invoke (``f``, ``value``,
  ``abort``, ``async``); the completion comes back as the driver wrote it,
  plus ``node`` and the op's fields (``op_fields``). Rebalance events ride
  in the completion's ``events`` list.
* ``close``: the driver drops its handles without flushing and exits.
* a crash is no request: the driver process is killed (SIGKILL), as a
  crashed client would be. Its successor is a new process.

A driver that does not answer within the op timeout plus ``ANSWER_GRACE_S``
is killed and the op raises: the runner records ``info`` and retires the
process (workloads/client.py).
"""
from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
from typing import Any

from history.ops import FAIL, INFO, OK, Op
from workloads.client import Client, ClientContext

log = logging.getLogger(__name__)

#: Seconds a driver may take beyond the op timeout to answer (a JVM's start, a close's wait).
ANSWER_GRACE_S = 20.0
_EOF = object()


class DriverError(Exception):
    """The driver did not answer as the protocol says (exited, timed out, wrote no JSON)."""


class DriverProcess:
    """One driver child process and its two pipes."""

    def __init__(self, argv: list[str], name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, encoding="utf-8", bufsize=1)
        self._lines: queue.Queue = queue.Queue()
        self.exited = False
        threading.Thread(target=self._read_stdout, name=f"{name}-out", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"{name}-err", daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(_EOF)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:       # the client's own log (warnings and errors)
            log.info("%s: %s", self.name, line.rstrip())

    def write(self, message: dict[str, Any]) -> None:
        """Write one request line; DriverError when the driver is gone."""
        try:
            self.proc.stdin.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise DriverError(f"{self.name} is gone ({exc})") from None

    def lines(self, timeout_s: float) -> list[str]:
        """The lines the driver wrote, waiting up to ``timeout_s`` for the first
        (pipelined sends' ``sent`` lines: workloads/java_pipelined.py); [] when
        none came. ``exited`` is set once the driver's stdout ended."""
        try:
            first = self._lines.get(timeout=timeout_s) if timeout_s > 0 else self._lines.get_nowait()
        except queue.Empty:
            return []
        out = [first]
        while True:
            try:
                out.append(self._lines.get_nowait())
            except queue.Empty:
                break
        if _EOF in out:
            self.exited = True
            self._lines.put(_EOF)
            out = [line for line in out if line is not _EOF]
        return out

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Write ``message``, return the completion it answers; DriverError otherwise."""
        self.write(message)
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise DriverError(f"{self.name} did not answer {message.get('f')} within {timeout_s:g} s") from None
        if line is _EOF:
            raise DriverError(f"{self.name} exited ({self.proc.wait()}) before answering {message.get('f')}")
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise DriverError(f"{self.name} wrote no JSON: {line[:120]!r}") from None
        if not isinstance(answer, dict) or answer.get("type") not in (OK, FAIL, INFO):
            self.kill()
            raise DriverError(f"{self.name} wrote no completion: {line[:120]!r}")
        return answer

    def kill(self) -> None:
        """SIGKILL, then reap; never raises."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except Exception as exc:
            log.debug("%s: kill: %s", self.name, exc)


class DriverClient(Client):
    """A workload client in a driver process (the module docstring).

    ``extra`` goes into the ``open`` request as it is (a transactional id,
    send_offsets); ``member_ops`` are the ops that record ``group`` and
    ``isolation`` (a group member's)."""

    def __init__(self, open_config, extra: dict[str, Any] | None = None,
                 member_ops: tuple[str, ...] = ()) -> None:
        self._open_config = open_config        # (ctx) -> the open request's "config"
        self._extra = dict(extra or {})
        self._member_ops = member_ops
        self._proc: DriverProcess | None = None
        self._events: list[Op] = []
        self.ctx: ClientContext | None = None
        self.identity: dict[str, Any] = {}    # what the driver said it is (client, version)

    def open(self, ctx: ClientContext) -> None:
        if not ctx.driver:
            raise ValueError("no driver command line in the client context")
        self.ctx = ctx
        config = {**self._open_config(ctx), **self._extra}
        self._fields = {"group": config.get("consumer", {}).get("group.id"),
                        "isolation": config.get("consumer", {}).get("isolation.level", "read_committed")}
        self._proc = DriverProcess(list(ctx.driver), f"driver-{ctx.process}")
        try:
            answer = self._proc.request({"f": "open", "config": config}, ctx.op_timeout_s + ANSWER_GRACE_S)
        except DriverError:
            self._proc.kill()
            raise
        if answer.get("type") != OK:
            self._proc.kill()
            raise DriverError(f"driver-{ctx.process} could not open: {answer.get('error')}")
        self.identity = dict(answer.get("value") or {})

    def op_fields(self, f: str) -> dict[str, Any]:
        return dict(self._fields) if f in self._member_ops else {}

    def invoke(self, op: Op) -> Op:
        if self._proc is None:
            raise DriverError("the driver is not open")
        answer = self._proc.request(op, self.ctx.op_timeout_s + ANSWER_GRACE_S)
        events = answer.pop("events", None) or []
        self._events.extend({**ev, **self.op_fields(str(ev.get("f")))} for ev in events)
        if self.ctx.node is not None:
            answer["node"] = self.ctx.node
        if op.get("f") == "txn":
            answer["isolation"] = self._fields["isolation"]
        return {**answer, **self.op_fields(op["f"])}

    def take_events(self) -> list[Op]:
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """Ask the driver to drop its handles (no flush) and exit; kill it if it does not."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            answer = proc.request({"f": "close"}, ANSWER_GRACE_S)
            self._events.extend({**ev, **self.op_fields(str(ev.get("f")))} for ev in answer.get("events") or [])
            proc.proc.wait(timeout=5)
        except Exception as exc:
            log.debug("%s: close: %s", proc.name, exc)
        finally:
            proc.kill()

    def crash(self) -> None:
        """Kill the driver: its handles vanish mid-flight, as a crashed client's would."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
