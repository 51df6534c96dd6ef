"""A run that fails before its workload leaves ``store/latest`` and
``store/<name>/latest`` where they were, says why in its folder, and exits
as that failure always did (issue 33). No cluster: the failure is provoked
where the Kafka jars resolve, the step before any container starts."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import harness.runner as runner_mod
from harness.cli import main
from harness.store import EARLY_FAILURE, link_latest, new_run_dir
from infra.errors import KafkaVersionNotFound, KchaosError

FIXTURE = Path(__file__).parents[1] / "reports" / "fixtures" / "valid"


def _earlier_run(store: Path, name: str) -> Path:
    """A finished run already in the store, linked as latest."""
    run_dir = new_run_dir(store, name)
    shutil.copytree(FIXTURE, run_dir, dirs_exist_ok=True)
    link_latest(store, run_dir)
    return run_dir


def _run(store: Path, name: str, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--store", str(store), "--name", name, "--kafka-version", "0.0.1", "--time-limit", "1"])
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("error, code", [
    (KafkaVersionNotFound("Kafka version 0.0.1 does not resolve from Maven Central"), 64),
    (KchaosError("mvn failed to fetch Kafka 0.0.1: no network"), 3),
])
def test_a_failure_before_the_workload_leaves_latest_alone(tmp_path, monkeypatch, capsys, error, code) -> None:
    def refuse(version, *args, **kwargs):
        raise error

    monkeypatch.setattr(runner_mod, "sweep_dead_runs", lambda: (0, 0))
    monkeypatch.setattr(runner_mod, "resolve_kafka", refuse)
    store = tmp_path / "store"
    earlier = _earlier_run(store, "r")
    exit_code, err = _run(store, "r", capsys)
    assert exit_code == code
    assert str(error) in err
    assert (store / "latest").resolve() == earlier.resolve()
    assert (store / "r" / "latest").resolve() == earlier.resolve()
    failed = [p for p in (store / "r").iterdir() if p.name != "latest" and p != earlier]
    assert len(failed) == 1
    assert str(error) in (failed[0] / EARLY_FAILURE).read_text()
    # and kchaos report on latest still reports the earlier run; on the failed folder it says why
    with pytest.raises(SystemExit) as report:
        main(["report", str(store / "latest")])
    assert report.value.code == 0
    with pytest.raises(SystemExit) as refused:
        main(["report", str(failed[0])])
    assert refused.value.code == 64
    assert "failed before its workload" in capsys.readouterr().err


def test_the_first_run_failing_early_makes_no_latest(tmp_path, monkeypatch, capsys) -> None:
    def refuse(version, *args, **kwargs):
        raise KafkaVersionNotFound("Kafka version 0.0.1 does not resolve from Maven Central")

    monkeypatch.setattr(runner_mod, "sweep_dead_runs", lambda: (0, 0))
    monkeypatch.setattr(runner_mod, "resolve_kafka", refuse)
    store = tmp_path / "store"
    assert _run(store, "r", capsys)[0] == 64
    assert not (store / "latest").is_symlink() and not (store / "r" / "latest").is_symlink()


def test_link_latest_points_both_links(tmp_path) -> None:
    store = tmp_path / "store"
    first, second = new_run_dir(store, "a"), new_run_dir(store, "b")
    assert not (store / "latest").exists()
    link_latest(store, first)
    link_latest(store, second)
    assert (store / "latest").resolve() == second.resolve()
    assert (store / "a" / "latest").resolve() == first.resolve()
    assert (store / "b" / "latest").resolve() == second.resolve()
