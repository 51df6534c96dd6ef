"""Loading a stored run folder, tolerating every missing or broken piece.

Reports are pure renderers of a run folder: ``config.json``, ``history.jsonl``
(or its current ``history.parquet``), ``results.json`` and ``nodes/<node>/``.
Nothing here raises for a missing or corrupt file; the problem becomes a
``note`` shown at the top of the report. The history is read only when a
report needs it (``RunData.digest``).
"""
from __future__ import annotations

import json
import logging
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.result import ANOMALY_TYPES, DESCRIPTIONS

from .availability import WriteAvailability, write_availability
from .digest import Digest
from .history_source import run_digest

log = logging.getLogger(__name__)

VALID, INVALID, UNKNOWN = "valid", "invalid", "unknown"

@dataclass
class AnomalyRow:
    type: str
    count: int
    allowed: bool
    reason: str | None
    description: str
    witnesses: list[dict[str, Any]]
    present: bool  # the type was in results.json
    error: str | None = None  # this type's checker error, if results.json gives one

    @property
    def failing(self) -> bool:
        return self.count > 0 and not self.allowed


def read_digest(run_dir: Path) -> tuple[Digest, list[str]]:
    """The digest of a run folder's history (``reports.history_source``) and notes
    on what of it could not be read; never raises: a report is still written,
    saying why it has no plots."""
    try:
        return run_digest(Path(run_dir))
    except Exception as e:  # noqa: BLE001
        log.exception("reading the history of %s failed", run_dir)
        return Digest(), [f"The history could not be read: {type(e).__name__}: {e}"]


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)  # problems with the folder itself
    history_present: bool = False
    # parts of the report made from the digest before the verdict (reports/early.py), by name
    made: dict[str, Any] = field(default_factory=dict, repr=False)
    _digest: Digest | None = field(default=None, repr=False)

    # ---- the history, read on first use ----------------------------------
    def digest(self) -> Digest:
        """The history's digest (every op; ``reports.history_source``): read on
        first use, so a verdict line or a console table never reads the history.
        What of it could not be read joins ``notes``."""
        if self._digest is None:
            self.use_digest(*read_digest(self.run_dir) if self.history_present else (Digest(), []))
        return self._digest

    def use_digest(self, d: Digest, notes: list[str]) -> None:
        """Take the history's digest (``read_digest``), read elsewhere or beforehand:
        harness/analysis.py reads it while the checkers run."""
        self._digest = d
        self.notes.extend(notes)
        _AVAILABILITY.clear()
        _AVAILABILITY[_history_key(self.run_dir)] = (write_availability(d), notes)

    def write_availability(self) -> WriteAvailability | None:
        """The share of the workload with acknowledged writes: remembered, with
        the notes on what of the history could not be read, from the last digest
        of this history (the console's lines after its report), else from a digest."""
        key = _history_key(self.run_dir)
        if key in _AVAILABILITY and self._digest is None:
            wa, notes = _AVAILABILITY[key]
            self.notes.extend(n for n in notes if n not in self.notes)
            return wa
        return write_availability(self.digest())

    # ---- derived views -------------------------------------------------
    @property
    def name(self) -> str:
        name = self.config.get("name")
        return str(name) if name not in (None, "") else self.run_dir.name

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def verdict(self) -> str:
        return verdict_of(self.results)

    @property
    def errors(self) -> list[str]:
        errs = (self.results or {}).get("errors") or []
        if not isinstance(errs, list):
            errs = [errs]
        return [e if isinstance(e, str) else json.dumps(e, default=str) for e in errs]

    @property
    def unclean_elections(self) -> list[dict[str, Any]]:
        ue = (self.results or {}).get("unclean_elections") or []
        return [e for e in ue if isinstance(e, dict)] if isinstance(ue, list) else []

    @property
    def stats(self) -> dict[str, Any]:
        s = (self.results or {}).get("stats") or {}
        return s if isinstance(s, dict) else {}

    def anomalies(self) -> list[AnomalyRow]:
        return anomaly_rows(self.results)

    def reproduce_commands(self) -> list[str]:
        d = str(self.run_dir.resolve())
        cfg = str((self.run_dir / "config.json").resolve())
        cmds = [f"kchaos reproduce {shlex.quote(d)}"]
        seed = self.seed
        run = f"kchaos run --config {shlex.quote(cfg)}"
        if seed is not None and seed != "":
            run += f" --seed {shlex.quote(str(seed))}"
        cmds.append(run)
        return cmds


# The write availability of the last history digested, by its files' identity: `kchaos analyze`
# prints it on the console after the report has read the history, and reading it again would
# cost as much as the report's digest (a 10M-op history: seconds).
_AVAILABILITY: dict[tuple[Any, ...], tuple[WriteAvailability | None, list[str]]] = {}


def _history_key(run_dir: Path) -> tuple[Any, ...]:
    def ident(p: Path) -> tuple[int, int] | None:
        try:
            st = p.stat()
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns
    return str(run_dir.resolve()), ident(run_dir / "history.jsonl"), ident(run_dir / "history.parquet")


def verdict_of(results: dict[str, Any] | None) -> str:
    if not results:
        return UNKNOWN
    v = results.get("valid")
    if v is True:
        return VALID
    if v is False:
        return INVALID
    return UNKNOWN


def _as_int(x: Any, default: int = 0) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def anomaly_rows(results: dict[str, Any] | None) -> list[AnomalyRow]:
    """Every known anomaly type (in the canonical order), then any extra type
    results.json carries."""
    anomalies = (results or {}).get("anomalies") or {}
    if not isinstance(anomalies, dict):
        anomalies = {}
    types = list(ANOMALY_TYPES) + sorted(str(k) for k in anomalies if k not in ANOMALY_TYPES)
    rows = []
    for t in types:
        a = anomalies.get(t)
        present = isinstance(a, dict)
        a = a if present else {}
        witnesses = a.get("witnesses") or []
        if not isinstance(witnesses, list):
            witnesses = []
        witnesses = [w for w in witnesses if isinstance(w, dict)]
        count = _as_int(a.get("count"), len(witnesses))
        reason = a.get("reason")
        rows.append(AnomalyRow(
            type=t,
            count=count,
            allowed=bool(a.get("allowed", False)),
            reason=None if reason is None else str(reason),
            description=str(a.get("description") or DESCRIPTIONS.get(t, "")),
            witnesses=witnesses,
            present=present,
            error=None if a.get("error") is None else str(a.get("error")),
        ))
    return rows


def _read_json(path: Path, what: str, notes: list[str]) -> Any:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as e:
        notes.append(f"{what} ({path.name}) could not be read: {e}")
        return None


def read_config(run_dir: Path, notes: list[str]) -> dict[str, Any]:
    """The run's config.json, or {} with a note on why it could not be had."""
    cfg_path = Path(run_dir) / "config.json"
    cfg = _read_json(cfg_path, "The run config", notes)
    if cfg is None and not cfg_path.exists():
        notes.append("config.json is missing: the configuration and seed are unknown.")
    if cfg is not None and not isinstance(cfg, dict):
        notes.append("config.json is not a JSON object; ignored.")
        cfg = None
    return cfg or {}


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    run = RunData(run_dir=run_dir)
    if not run_dir.is_dir():
        run.notes.append(f"Run folder {run_dir} does not exist.")
        return run

    run.config = read_config(run_dir, run.notes)

    res_path = run_dir / "results.json"
    res = _read_json(res_path, "The checker results", run.notes)
    if res is None and not res_path.exists():
        run.notes.append("results.json is missing: the checkers did not run or did not finish, so the "
                         f"verdict is unknown. Run `kchaos analyze {run_dir}` to check the stored history.")
    if res is not None and not isinstance(res, dict):
        run.notes.append("results.json is not a JSON object; the verdict is unknown.")
        res = None
    run.results = res

    run.history_present = (run_dir / "history.jsonl").exists()
    if not run.history_present:
        run.notes.append("history.jsonl is missing: there is nothing to plot.")
    return run


# ---- node logs -------------------------------------------------------------

NOTABLE = re.compile(r"\b(ERROR|FATAL|Unclean|unclean|Shrinking ISR|Expanding ISR|Exception)\b")
_MAX_FILES_PER_NODE = 20
_SCAN_BYTES = 4 << 20
_TAIL_LINES = 25
_MAX_NOTABLE = 40
_MAX_LINE = 400


@dataclass
class LogFile:
    rel: str          # relative to the run folder (for a link)
    size: int
    notable: list[str]
    tail: list[str]
    is_log: bool


@dataclass
class NodeLogs:
    node: str
    files: list[LogFile]
    more: int  # files not listed


def _clip(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + " …"


def _scan_log(path: Path, size: int) -> tuple[list[str], list[str]]:
    with open(path, "rb") as fh:
        if size > _SCAN_BYTES:
            fh.seek(size - _SCAN_BYTES)
            fh.readline()  # drop the partial first line
        text = fh.read().decode("utf-8", errors="replace")
    lines = text.splitlines()
    notable = [_clip(l) for l in lines if NOTABLE.search(l)][-_MAX_NOTABLE:]
    tail = [_clip(l) for l in lines[-_TAIL_LINES:]]
    return notable, tail


def node_logs(run_dir: Path) -> list[NodeLogs]:
    nodes_dir = Path(run_dir) / "nodes"
    if not nodes_dir.is_dir():
        return []
    out = []
    for node_dir in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
        files = sorted(p for p in node_dir.rglob("*") if p.is_file())
        listed = []
        for p in files[:_MAX_FILES_PER_NODE]:
            try:
                size = p.stat().st_size
                is_log = ".log" in p.name or p.suffix in (".out", ".err", ".txt")
                notable, tail = _scan_log(p, size) if is_log else ([], [])
            except OSError as e:
                size, is_log, notable, tail = 0, False, [], [f"(unreadable: {e})"]
            listed.append(LogFile(rel=p.relative_to(run_dir).as_posix(), size=size,
                                  notable=notable, tail=tail, is_log=is_log))
        out.append(NodeLogs(node=node_dir.name, files=listed,
                            more=max(0, len(files) - _MAX_FILES_PER_NODE)))
    return out
