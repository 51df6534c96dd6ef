"""The contract every Node implementation must keep.

Subclass ``NodeContract`` and provide a ``node`` fixture; the SSH backend's
tests reuse it unchanged.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import NodeCommandError
from infra.node import Node


class NodeContract:
    def test_is_a_node(self, node):
        assert isinstance(node, Node)
        assert node.name and node.address

    def test_run_captures_stdout_and_exit(self, node):
        res = node.run(["sh", "-c", "echo hello; echo oops >&2; exit 0"])
        assert res.exit == 0 and res.out == "hello\n" and res.err == "oops\n"

    def test_nonzero_exit_raises_only_when_checked(self, node):
        res = node.run(["sh", "-c", "exit 3"], check=False)
        assert res.exit == 3 and not res.ok
        with pytest.raises(NodeCommandError) as info:
            node.run(["sh", "-c", "echo broken >&2; exit 3"])
        assert info.value.exit == 3 and "broken" in str(info.value)

    def test_arguments_are_not_reinterpreted_by_a_shell(self, node):
        tricky = "a b; echo $HOME 'quoted' \"double\" `x`"
        assert node.run(["printf", "%s", tricky]).out == tricky

    def test_large_output_comes_back_whole(self, node):
        # a replica dump prints this much and more (broker/log_dump.py); both streams, interleaved
        res = node.run(["sh", "-c", "seq 1 3000000; seq 1 1000 >&2"], timeout=120)
        lines = res.out.splitlines()
        assert len(res.out) > 20_000_000 and lines[0] == "1" and lines[-1] == "3000000" and len(lines) == 3_000_000
        assert res.err.splitlines()[-1] == "1000"

    def test_stdin_reaches_the_command(self, node):
        assert node.run(["cat"], stdin=b"from stdin\n").out == "from stdin\n"

    def test_environment(self, node):
        assert node.run(["sh", "-c", "echo $KCHAOS_X"], env={"KCHAOS_X": "42", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}).out == "42\n"

    def test_timeout_kills_and_reports_124(self, node):
        res = node.run(["sleep", "30"], timeout=1, check=False)
        assert res.exit == 124
        with pytest.raises(NodeCommandError):
            node.run(["sleep", "30"], timeout=1)

    def test_missing_command(self, node):
        res = node.run(["kchaos-no-such-command"], check=False)
        assert res.exit in (126, 127)

    def test_put_then_get_round_trips_bytes(self, node, tmp_path: Path):
        data = bytes(range(256)) * 64
        src = tmp_path / "src.bin"
        src.write_bytes(data)
        remote = f"/tmp/kchaos-contract/{node.name}/deep/file.bin"
        node.put(src, remote)
        back = tmp_path / "back.bin"
        node.get(remote, back)
        assert back.read_bytes() == data

    def test_get_missing_file_raises(self, node, tmp_path: Path):
        with pytest.raises(NodeCommandError):
            node.get("/tmp/kchaos-contract/does-not-exist", tmp_path / "x")

    def test_detach_returns_at_once_and_keeps_running(self, node):
        import time
        marker = f"/tmp/kchaos-contract-detach-{time.monotonic_ns()}"
        t0 = time.monotonic()
        node.run(["sh", "-c", f"sleep 1; touch {marker}"], detach=True)
        assert time.monotonic() - t0 < 1.0
        deadline = time.monotonic() + 10
        while node.run(["test", "-e", marker], check=False).exit != 0:
            assert time.monotonic() < deadline, "detached command never finished"
            time.sleep(0.2)
