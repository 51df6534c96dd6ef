"""The workload kinds registry (workloads/kinds.py): each kind resolves from
its config, no two kinds claim one config, their checks are the checkers'
anomaly types, and the runner drives a kind it has never heard of."""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
import threading
import time
from pathlib import Path

import pytest

from checkers.result import ANOMALY_TYPES
from harness.run_config import MODES, PRODUCERS, RunConfig, WorkloadConfig, validate, workload_kind
from harness.runner import Runner
from harness.worker_loops import WorkerLoops
from history.ops import read_history
from history.recorder import Recorder
from history.writer import HistoryWriter
from infra.errors import UsageError
from workloads.client import Client, ClientContext, SendPump
from workloads.kinds import KINDS, PumpHooks, WorkloadKind, claimants, kind_of, workload_names
from workloads.op_streams import PlannedOp, StreamSpec

ROOT = Path(__file__).resolve().parents[2]


def config_of(kind: WorkloadKind) -> RunConfig:
    return RunConfig(seed=5, workload=WorkloadConfig(**dict(kind.claims)))


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_resolves_from_its_config(name):
    kind = KINDS[name]
    cfg = config_of(kind)
    if kind.bind is None:
        for got in (kind_of(cfg.workload), workload_kind(cfg)):
            # a group kind's members come wrapped, a fresh wrapper per run (workloads/group.py member_clients)
            assert got is kind or kind.group_members and dataclasses.replace(got, make_client=kind.make_client) == kind
    else:       # a kind with fields made from the [workload] table: those fields filled in
        bound = kind_of(cfg.workload)
        assert bound.name == kind.name and bound.bind is kind.bind
        assert all(getattr(bound, f) is not None for f in kind.bind(cfg.workload))


def test_no_two_kinds_claim_one_config_and_every_accepted_config_has_one():
    seen = set()
    for wname, mode, producer, transactions in itertools.product(
            (*workload_names(), "other"), MODES, PRODUCERS, (False, True)):
        w = WorkloadConfig(name=wname, mode=mode, producer=producer, transactions=transactions)
        found = claimants(w)
        assert len(found) <= 1, (w, [k.name for k in found])
        try:
            validate(RunConfig(seed=1, workload=w))
        except UsageError:
            continue
        assert len(found) == 1, w
        seen.add(found[0].name)
    assert seen == set(KINDS)     # every kind runs some accepted config


def test_the_kind_named_today():
    def kind(**w):
        return kind_of(WorkloadConfig(**w)).name
    assert kind() == "assign"
    assert kind(mode="subscribe") == "group"
    assert kind(producer="pipelined") == "pipelined"
    assert kind(producer="pipelined", mode="subscribe") == "pipelined-group"
    assert kind(transactions=True) == "transactions"


def test_an_unclaimed_config_says_which_fields_and_kinds():
    with pytest.raises(ValueError, match=r"no workload kind runs \[workload\] name = 'queue'.*kinds: assign"):
        kind_of(WorkloadConfig(transactions=True, producer="pipelined"))


def test_checks_are_the_checkers_anomaly_types_and_cover_them():
    for kind in KINDS.values():
        assert kind.checks and set(kind.checks) <= set(ANOMALY_TYPES), kind.name
        assert len(set(kind.checks)) == len(kind.checks), kind.name
    assert set().union(*(k.checks for k in KINDS.values())) == set(ANOMALY_TYPES)
    stored = KINDS["group"].stored()
    assert stored["name"] == "group" and "commit-backwards" in stored["checks"]
    json.dumps(stored)


def test_the_runner_has_no_workload_branches_left():
    """Neither the runner nor the worker loops ask what kind of workload runs."""
    for path in (ROOT / "harness" / "runner.py", ROOT / "harness" / "worker_loops.py"):
        src = path.read_text()
        assert "getattr(" not in src and "hasattr(" not in src, path
        assert not re.search(r"\.(transactions|mode|producer)\b", src), path
        assert not re.search(r"""["'](pipelined|subscribe|assign|txn|group)["']""", src), path
        assert not re.search(r"^\s*(from|import) workloads\.(queue|group|txn|pipelined)\b", src, re.M), path


# -- a kind the runner has never heard of -------------------------------------
class DummyClient(Client):
    opened: list[int] = []

    def open(self, ctx: ClientContext) -> None:
        self.ctx = ctx
        self.events = []
        DummyClient.opened.append(ctx.process)

    def invoke(self, op):
        if op["f"] == "boom":
            raise RuntimeError("boom")
        self.events.append({"type": "ok", "f": "dummy-event", "value": op["f"]})
        return {"type": "ok", "f": op["f"], "value": op["value"], "tagged": op.get("abort", False)}

    def close(self) -> None:
        pass

    def op_fields(self, f: str) -> dict:
        return {"dummy": f}

    def take_events(self) -> list:
        events, self.events = self.events, []
        return events


class DummyPump(SendPump):
    def __init__(self, hooks: PumpHooks):
        self.hooks, self.name = hooks, "d0"

    def pump(self, messages, stop) -> None:
        for p, v in messages:
            if stop():
                return
            process = self.hooks.new_process()
            self.hooks.record({"process": process, "type": "invoke", "f": "send", "value": [[p, v, None]]})
            self.hooks.record({"process": process, "type": "ok", "f": "send", "value": [[p, v, 0]]})
            time.sleep(0.005)

    def crash(self) -> None:
        pass

    def close(self, flush_s: float = 0.0, abandon=lambda: False) -> None:
        pass


def dummy_ops(spec: StreamSpec, rng):
    yield PlannedOp(0.0, "hello", spec.worker)
    for i in itertools.count():
        f = ("send", "poke", "boom")[i % 3] if i < 6 else ("send", "poke")[i % 2]
        yield PlannedOp(0.005, f, [[0, i * spec.concurrency + spec.worker, None]] if f == "send" else i,
                        abort=True if f == "poke" else None)


def dummy_kind(pump: bool) -> WorkloadKind:
    return WorkloadKind("dummy", "a kind the runner does not know", {"name": "dummy"},
                        lambda w, seed, worker: DummyClient(), dummy_ops, ("duplicate",),
                        make_pump=(lambda ctx, w, hooks: DummyPump(hooks)) if pump else None)


@pytest.mark.parametrize("pump", [False, True])
def test_a_registered_dummy_kind_runs_through_the_registry(tmp_path, monkeypatch, pump):
    monkeypatch.setitem(KINDS, "dummy", dummy_kind(pump))
    cfg = RunConfig(seed=3, concurrency=2, workload=WorkloadConfig(name="dummy"))
    assert Runner(cfg).kind.name == "dummy"
    DummyClient.opened = []
    recorder = Recorder(HistoryWriter(tmp_path / "history.jsonl"))
    stop, threads = threading.Event(), []

    def start(target, name, *args):
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        threads.append(t)
        t.start()
        return t

    loops = WorkerLoops(cfg, KINDS["dummy"], recorder, lambda p: ClientContext("", "t", 1, process=p), stop,
                        threading.Event(), start, time.monotonic())
    for w in range(cfg.concurrency):
        start(loops.run, f"worker-{w}", w)
    time.sleep(0.6)
    stop.set()
    for t in threads:
        t.join(5)
    recorder.writer.close()
    ops = list(read_history(tmp_path / "history.jsonl"))
    fs = {o["f"] for o in ops}
    assert {"hello", "poke", "boom", "dummy-event"} <= fs
    sends = [o for o in ops if o["f"] == "send" and o["type"] == "invoke"]
    assert sends
    # With a pump, sends are its own ops (no client fields); without, the client's invokes.
    assert all(("dummy" in o) is (not pump) for o in sends)
    pokes = [o for o in ops if o["f"] == "poke" and o["type"] == "invoke"]
    assert pokes and all(o["abort"] is True and o["dummy"] == "poke" for o in pokes)
    booms = [o for o in ops if o["f"] == "boom" and o["type"] != "invoke"]
    assert booms and all(o["type"] == "info" and o["error"].startswith("crash:") for o in booms)
    # A crashed process is retired: each worker opened a second process, replaying "hello".
    assert len(DummyClient.opened) >= 4 and set(DummyClient.opened[:2]) == {0, 1}
    hellos = [o for o in ops if o["f"] == "hello" and o["type"] == "invoke"]
    assert len(hellos) == len(DummyClient.opened)
