"""Suite files: parsed, validated and expanded into planned runs, all before
the first cluster starts (``harness.suite`` runs them).

A suite is a matrix of runs, one after another on fresh clusters.

A suite file is TOML::

    name = "nightly"              # lowercase letters, digits, '.', '_', '-'
    description = "..."           # optional, shown on the index page
    time_budget = 3600            # optional: seconds for the whole suite
    run_overhead = 90             # optional: seconds a run takes beyond its time_limit
                                  # (cluster start, drain, checkers) until one is measured
    trend = 10                    # optional: earlier suite runs shown per matrix cell

    [base]                        # a run config (the keys of `kchaos run --config`)
    time_limit = 60
    [base.producer]
    acks = "all"

    [matrix]                      # every axis is optional; the runs are the cross product
    kafka_version = ["4.3.1", "4.1.1"]
    nemesis = [["partition"], ["kill", "pause"], "none"]
    seeds = [1, 2]                # or: repeat = 2 (the base seed, or a fresh one per run)

    [[matrix.variant]]            # broker/client/topic config variants
    name = "acks-all"
    producer = { acks = "all" }

    [[matrix.variant]]
    name = "unclean"
    broker = { "unclean.leader.election.enable" = true }
    topic = { "min.insync.replicas" = 1 }

A variant's tables are merged key by key into the base's; its other keys
replace the base's. Runs are ordered Kafka version, variant, nemesis, seed.
Every run's config is built and validated before the first cluster starts.

Each run is stored as usual (``store/<name>/<timestamp>/``); the suite's own
folder is ``store/suites/<suite name>/<timestamp>/`` with ``suite.json``,
``index.html`` and ``junit.xml``, rewritten after every run.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import run_config as cfgmod
from harness.run_config import RunConfig
from infra.distribution import validate_version
from infra.tomlfile import load_toml
from infra.errors import UsageError
from nemesis.packages import build_packages

SUITES_DIR = "suites"   # the store's folder of suite runs: not a suite name
DEFAULT_RUN_OVERHEAD = 90.0
DEFAULT_TREND = 10
SUITE_KEYS = ("name", "description", "time_budget", "run_overhead", "trend", "base", "matrix")
MATRIX_KEYS = ("kafka_version", "nemesis", "seeds", "repeat", "variant")
# Keys the suite decides for every run: not for [base] or a variant.
_RESERVED = {"name": "the suite names its runs",
             "keep_cluster": "every suite run gets a fresh cluster that is removed afterwards"}
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")


@dataclass(frozen=True)
class Variant:
    name: str
    description: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    name: str
    base: dict[str, Any]
    kafka_versions: list[str] | None = None      # None: the base's
    nemesis: list[list[str]] | None = None       # None: the base's
    seeds: list[int] | None = None
    repeat: int = 1
    variants: list[Variant] = field(default_factory=list)
    description: str = ""
    time_budget: float | None = None
    run_overhead: float = DEFAULT_RUN_OVERHEAD
    trend: int = DEFAULT_TREND
    source: str = "suite"


@dataclass
class PlannedRun:
    index: int                      # 1-based position in the suite
    cell: str                       # stable key of the matrix cell (across suite runs)
    axes: dict[str, Any]            # kafka_version, variant, nemesis, seed | repeat
    config: RunConfig               # validated; its name is the run's name

    @property
    def name(self) -> str:
        return self.config.name


# ---- parsing -------------------------------------------------------------------

def _number(where: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"{where} must be a number, got {v!r}")
    if positive and v <= 0:
        raise UsageError(f"{where} must be positive, got {v!r}")
    return float(v)


def _int(where: str, v: Any, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"{where} must be an integer, got {v!r}")
    if v < minimum:
        raise UsageError(f"{where} must be at least {minimum}, got {v}")
    return v


def _nonempty_list(where: str, v: Any) -> list:
    if not isinstance(v, list) or not v:
        raise UsageError(f"{where} must be a non-empty list, got {v!r}")
    return v


def _slug_name(where: str, v: Any) -> str:
    if not isinstance(v, str) or not _NAME_RE.fullmatch(v):
        raise UsageError(f"{where} {v!r} must be 1-40 lowercase letters, digits, '.', '_' or '-'")
    return v


def _faults(where: str, v: Any) -> list[str]:
    """One nemesis set: a list of fault names, or one string ("partition,kill", "none")."""
    if isinstance(v, str):
        items = [v]
    elif isinstance(v, list) and all(isinstance(x, str) for x in v):
        items = v
    else:
        raise UsageError(f"{where} must be a list of fault names or a string, got {v!r}")
    out: list[str] = []
    for item in items:
        for name in item.split(","):
            name = name.strip().lower()
            if name and name != "none" and name not in out:
                out.append(name)
    if out:
        try:
            build_packages(out)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return out


def _check_config_keys(where: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table")
    for key, why in _RESERVED.items():
        if key in table:
            raise UsageError(f"{where}: {key!r} cannot be set in a suite ({why})")
    return table


def parse(data: dict[str, Any], source: str = "suite") -> Suite:
    """A suite from a parsed TOML table; every mistake is one UsageError line."""
    unknown = sorted(set(data) - set(SUITE_KEYS))
    if unknown:
        raise UsageError(f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(SUITE_KEYS)}")
    if "name" not in data:
        raise UsageError(f"{source}: a suite needs a name (name = \"nightly\")")
    name = _slug_name(f"{source}: suite name", data["name"])
    if name in (SUITES_DIR, "latest"):
        raise UsageError(f"{source}: the suite name {name!r} is reserved (a folder of the store)")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"{source}: description must be a string")
    suite = Suite(name=name, base={}, description=description, source=source)
    if "time_budget" in data:
        suite.time_budget = _number(f"{source}: time_budget", data["time_budget"])
    if "run_overhead" in data:
        suite.run_overhead = _number(f"{source}: run_overhead", data["run_overhead"], positive=False)
        if suite.run_overhead < 0:
            raise UsageError(f"{source}: run_overhead must not be negative")
    if "trend" in data:
        suite.trend = _int(f"{source}: trend", data["trend"], 0)

    base = _check_config_keys(f"{source}: [base]", data.get("base", {}))
    cfgmod.from_dict(base, f"{source}: [base]")  # unknown keys and wrong types, at once
    suite.base = copy.deepcopy(base)

    matrix = data.get("matrix", {})
    if not isinstance(matrix, dict):
        raise UsageError(f"{source}: [matrix] must be a table")
    bad = sorted(set(matrix) - set(MATRIX_KEYS))
    if bad:
        raise UsageError(f"{source}: unknown key matrix.{bad[0]!r}; valid keys: {', '.join(MATRIX_KEYS)}")

    if "kafka_version" in matrix:
        versions = _nonempty_list(f"{source}: matrix.kafka_version", matrix["kafka_version"])
        for v in versions:
            if not isinstance(v, str):
                raise UsageError(f"{source}: matrix.kafka_version entries must be strings, got {v!r}")
            try:
                validate_version(v)
            except UsageError as exc:
                raise UsageError(f"{source}: matrix.kafka_version: {exc}") from None
        if len(set(versions)) != len(versions):
            raise UsageError(f"{source}: matrix.kafka_version lists a version twice")
        suite.kafka_versions = list(versions)

    if "nemesis" in matrix:
        sets = _nonempty_list(f"{source}: matrix.nemesis", matrix["nemesis"])
        suite.nemesis = [_faults(f"{source}: matrix.nemesis[{i}]", s) for i, s in enumerate(sets)]
        if len({tuple(s) for s in suite.nemesis}) != len(suite.nemesis):
            raise UsageError(f"{source}: matrix.nemesis lists the same fault set twice")

    if "seeds" in matrix and "repeat" in matrix:
        raise UsageError(f"{source}: matrix.seeds and matrix.repeat exclude each other; give one")
    if "seeds" in matrix:
        if "seed" in base:
            raise UsageError(f"{source}: base.seed and matrix.seeds exclude each other; give seeds in one place")
        seeds = _nonempty_list(f"{source}: matrix.seeds", matrix["seeds"])
        suite.seeds = [_int(f"{source}: matrix.seeds entry", s, 0) for s in seeds]
        if len(set(suite.seeds)) != len(suite.seeds):
            raise UsageError(f"{source}: matrix.seeds lists a seed twice")
    if "repeat" in matrix:
        suite.repeat = _int(f"{source}: matrix.repeat", matrix["repeat"], 1)

    if "variant" in matrix:
        entries = matrix["variant"]
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise UsageError(f"{source}: matrix.variant must be one or more [[matrix.variant]] tables")
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"{source}: matrix.variant[{i}]"
            if "name" not in entry:
                raise UsageError(f"{where} needs a name")
            vname = _slug_name(f"{where}: name", entry["name"])
            if vname in seen:
                raise UsageError(f"{where}: variant name {vname!r} is used twice")
            seen.add(vname)
            vdesc = entry.get("description", "")
            if not isinstance(vdesc, str):
                raise UsageError(f"{where}: description must be a string")
            overrides = {k: v for k, v in entry.items() if k not in ("name", "description")}
            _check_config_keys(where, overrides)
            for key in ("seed", "store"):
                if key in overrides:
                    raise UsageError(f"{where}: {key!r} belongs in [base]" + (" or matrix.seeds" if key == "seed" else ""))
            cfgmod.from_dict(overrides, f"{source}: variant {vname!r}")
            suite.variants.append(Variant(vname, vdesc, copy.deepcopy(overrides)))
    return suite


def load(path: Path) -> Suite:
    path = Path(path)
    return parse(load_toml(path, "suite"), str(path))


# ---- expansion -----------------------------------------------------------------

def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A variant's tables are merged key by key; its other keys replace."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    return out


def nemesis_label(faults: list[str]) -> str:
    return "+".join(faults) if faults else "none"


def expand(suite: Suite, store: str | None = None) -> list[PlannedRun]:
    """The cross product, each cell's RunConfig built and validated."""
    versions = suite.kafka_versions or [None]
    variants = suite.variants or [None]
    nemeses = suite.nemesis if suite.nemesis is not None else [None]
    if suite.seeds is not None:
        reps: list[tuple[str, int]] = [("seed", s) for s in suite.seeds]
    else:
        reps = [("repeat", i) for i in range(1, suite.repeat + 1)]
    varying = {"kafka_version": len(versions) > 1, "variant": len(variants) > 1,
               "nemesis": len(nemeses) > 1, "rep": len(reps) > 1}
    planned: list[PlannedRun] = []
    for version in versions:
        for variant in variants:
            for faults in nemeses:
                for rep_kind, rep in reps:
                    data = _merge(suite.base, variant.overrides if variant else {})
                    if version is not None:
                        data["kafka_version"] = version
                    if faults is not None:
                        data.setdefault("nemesis", {})
                        data["nemesis"] = {**data["nemesis"], "faults": list(faults)}
                    if rep_kind == "seed":
                        data["seed"] = rep
                    vname = variant.name if variant else "base"
                    where = f"{suite.source}: run {vname}" if variant else f"{suite.source}: [base]"
                    cfg = cfgmod.from_dict(data, where)
                    eff_faults = _faults(f"{where}: nemesis.faults", cfg.nemesis.faults)
                    cfg.nemesis.faults = eff_faults
                    axes = {"kafka_version": cfg.kafka_version, "variant": vname,
                            "nemesis": eff_faults, rep_kind: rep}
                    cell = (f"kafka={cfg.kafka_version} variant={vname} nemesis={nemesis_label(eff_faults)} "
                            f"{rep_kind}={rep}")
                    parts = [suite.name]
                    if varying["kafka_version"]:
                        parts.append(cfg.kafka_version.lower())
                    if varying["variant"]:
                        parts.append(vname)
                    if varying["nemesis"]:
                        parts.append("_".join(eff_faults) or "none")
                    if varying["rep"]:
                        parts.append(f"s{rep}" if rep_kind == "seed" else f"r{rep}")
                    cfg.name = "-".join(parts)
                    if store is not None:
                        cfg.store = store
                    try:
                        cfgmod.validate(cfg)
                    except UsageError as exc:
                        raise UsageError(f"{suite.source}: run {cell}: {exc}") from None
                    planned.append(PlannedRun(len(planned) + 1, cell, axes, cfg))
    return planned
