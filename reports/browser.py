"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Used to look at reports as a user's browser shows them: the browser tests and
``scripts/report_screenshot.py``.

Standard library only: Chromium reads commands from fd 3 and writes replies
and events to fd 4, each message a JSON object terminated by a NUL byte. No
port, no websocket, no chromedriver.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
         "--remote-debugging-pipe"]


def find_chromium() -> str | None:
    """$KCHAOS_CHROMIUM if set (and only it), else Debian's chromium or another
    known location, else ``chromium`` on PATH; None when there is none."""
    env = os.environ.get("KCHAOS_CHROMIUM")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    for c in CHROMIUM_CANDIDATES:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("chromium")


class CDPError(Exception):
    pass


class Browser:
    """One headless Chromium with one page target attached (flattened session)."""

    def __init__(self, binary: str, timeout: float = 30.0, window: tuple[int, int] = (1280, 900)):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="kchaos-chromium-")
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()

        def child_fds() -> None:  # runs in the child between fork and exec
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={window[0]},{window[1]}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            close_fds=False, preexec_fn=child_fds)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self._listeners: list[Any] = []
        self._stderr: list[bytes] = []
        threading.Thread(target=self._read_loop, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.session: str | None = None

    # ---- plumbing ----------------------------------------------------------
    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _read_loop(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child_r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cond:
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                        for fn in list(self._listeners):
                            fn(msg)
                    self._cond.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None | bool = True,
             timeout: float | None = None) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        sid = self.session if session is True else (session or None)
        if sid:
            msg["sessionId"] = sid
        os.write(self._to_child_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise CDPError(f"no reply to {method} (chromium exit {self.proc.poll()}): "
                                   + b"".join(self._stderr[-20:]).decode(errors="replace"))
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float | None = None, since: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while True:
                for ev in self.events[since:]:
                    if ev.get("method") == method:
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"timed out waiting for {method}")
                self._cond.wait(min(left, 0.5))

    def on_event(self, fn) -> None:
        self._listeners.append(fn)

    # ---- page helpers ------------------------------------------------------
    def open_page(self, viewport: tuple[int, int] | None = None) -> str:
        """A page target to drive, optionally with a fixed CSS viewport (w, h) at scale 1."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=None)["sessionId"]
        if viewport is not None:
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": viewport[0], "height": viewport[1], "deviceScaleFactor": 1, "mobile": False})
        return self.session

    def load(self, url: str) -> int:
        """Navigate and wait for the load event and two frames; returns where this page's events start."""
        start = len(self.events)
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", since=start)
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        return start

    def evaluate(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise CDPError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True,
                   clip: tuple[float, float, float, float] | None = None) -> Path:
        """The viewport, the whole page, or ``clip`` = (x, y, width, height) in page pixels."""
        params: dict[str, Any] = {"format": "png"}
        if clip is None and full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            clip = (0, 0, size["width"], min(size["height"], 16000))
        if clip is not None:
            x, y, w, h = clip
            params["clip"] = {"x": x, "y": y, "width": w, "height": h, "scale": 1}
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        Path(path).write_bytes(data)
        return Path(path)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=None, timeout=5)
                except CDPError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            for fd in (self._to_child_w, self._from_child_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
