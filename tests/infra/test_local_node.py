from pathlib import Path

import pytest

from infra.node import LocalNode
from tests.infra.node_contract import NodeContract


class TestLocalNode(NodeContract):
    @pytest.fixture
    def node(self):
        return LocalNode()

    def test_root_confines_files(self, tmp_path: Path):
        node = LocalNode(root=tmp_path)
        src = tmp_path / "a"
        src.write_text("x")
        node.put(src, "/etc/kchaos-test/a")
        assert (tmp_path / "etc/kchaos-test/a").read_text() == "x"
