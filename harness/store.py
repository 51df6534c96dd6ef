"""The store: one folder per run, ``store/<name>/<timestamp>/``, and ``latest`` links."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from infra.errors import UsageError

LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"


def new_run_dir(store: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    base = Path(store) / name
    run_dir = base / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{n}"
    run_dir.mkdir(parents=True)
    for link, target in ((base / "latest", run_dir.name), (Path(store) / "latest", Path(name) / run_dir.name)):
        tmp = link.with_name(f".{link.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)
    return run_dir


def write_json(path: Path, data: Any) -> None:
    """Write-then-rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def attach_log_file(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "kchaos.log")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
        for h in root.handlers:
            if h is not handler and not isinstance(h, logging.FileHandler):
                h.setLevel(max(h.level, logging.WARNING))
    return handler


def resolve_run_dir(path: Path) -> Path:
    """A run folder, or a store/name folder whose ``latest`` is used."""
    path = Path(path)
    if (path / "latest").exists() and not (path / "history.jsonl").exists():
        path = (path / "latest").resolve()
    if not path.is_dir():
        raise UsageError(f"{path} is not a run folder")
    if not (path / "history.jsonl").exists():
        raise UsageError(f"{path} has no history.jsonl: not a kchaos run folder")
    return path
