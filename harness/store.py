"""The store: one folder per run, ``store/<name>/<timestamp>/``, and ``latest`` links."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from infra.errors import UsageError

LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"


# What a run folder holds when the run failed before its workload (docs/design.md,
# "The store"): the error, one line; the folder is never linked as latest.
EARLY_FAILURE = "failed-before-workload.txt"


def new_run_dir(store: Path, name: str) -> Path:
    """A new, empty run folder. ``latest`` is not moved here: a run that fails
    before its workload must leave it at the last run worth a report
    (``link_latest``)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    base = Path(store) / name
    run_dir = base / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{n}"
    run_dir.mkdir(parents=True)
    return run_dir


def link_latest(store: Path, run_dir: Path) -> None:
    """Point ``store/<name>/latest`` and ``store/latest`` at ``run_dir``
    (``store/<name>/<stamp>``), each by an atomic rename."""
    run_dir = Path(run_dir)
    base = run_dir.parent
    for link, target in ((base / "latest", run_dir.name), (Path(store) / "latest", os.path.relpath(run_dir, store))):
        tmp = link.with_name(f".{link.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)


def record_early_failure(run_dir: Path, exc: BaseException) -> None:
    """Say in the folder why the run stopped before its workload, so it is not
    an unexplained empty run (its kchaos.log and nodes/ hold the rest)."""
    with contextlib.suppress(OSError):
        (Path(run_dir) / EARLY_FAILURE).write_text(f"{type(exc).__name__}: {exc}\n")


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
    if (path / EARLY_FAILURE).exists():
        why = (path / EARLY_FAILURE).read_text(errors="replace").strip()
        raise UsageError(f"{path}: the run failed before its workload ({why}); see its kchaos.log")
    if not (path / "history.jsonl").exists():
        raise UsageError(f"{path} has no history.jsonl: not a kchaos run folder")
    return path
