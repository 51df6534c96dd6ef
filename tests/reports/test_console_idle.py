"""The end-of-run table leaves out the checks a run gave nothing to check."""
from __future__ import annotations

from checkers.groups import GROUP_TYPES
from checkers.txn import TXN_TYPES
from reports.console import idle_types


def test_families_without_ops_are_idle_and_with_ops_are_not() -> None:
    queue = {"stats": {"ops": {"send": {"ok": 3}, "poll": {"ok": 2}}}}
    assert idle_types(queue) == set(TXN_TYPES) | set(GROUP_TYPES)
    txn = {"stats": {"ops": {"txn": {"ok": 3}, "poll": {"ok": 1}}}}
    assert idle_types(txn) == set(GROUP_TYPES)
    group = {"stats": {"ops": {"poll": {"ok": 3}, "rebalance": {"ok": 1}}}}
    assert idle_types(group) == set(TXN_TYPES)
    assert "lost-write" not in idle_types({})
