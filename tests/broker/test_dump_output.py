"""A dump or listing whose output Docker cut (moby/moby#27289) is read again, and
then is an error: never a log that holds less (infra.node.run_read, broker/log_dump).

The node is a LocalNode whose first answers lose their first or last bytes, as a
Docker exec's sometimes do; the commands and files are real."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from broker import log_dump
from broker.dump_text import RecordReadError, short_batch
from infra.errors import OutputLost
from infra.node import CommandResult, LocalNode, run_read

FIXTURES = Path(__file__).parent / "fixtures"


class CuttingNode(LocalNode):
    """Runs commands here; the first ``cuts`` answers lose bytes of their output."""

    def __init__(self, cuts: int, keep: slice):
        super().__init__("cut")
        self.cuts, self.keep, self.calls = cuts, keep, 0

    def run(self, argv, *args, **kw) -> CommandResult:
        res = super().run(argv, *args, **kw)
        self.calls += 1
        if self.calls <= self.cuts:
            return replace(res, out=res.out[self.keep])
        return res


def files_in(tmp_path: Path, n: int) -> Path:
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    for i in range(n):
        (d / f"{i:020d}.log").write_bytes(b"x" * (i + 1))
    return d


@pytest.mark.parametrize("keep", [slice(40, None), slice(None, -12), slice(0, 0)], ids=["head", "tail", "all"])
def test_a_listing_cut_once_is_read_again_and_whole(tmp_path, keep):
    d = files_in(tmp_path, 5)
    node = CuttingNode(cuts=1, keep=keep)
    listed = log_dump._list_files(node, [str(d)])
    assert node.calls == 2
    assert listed == {str(d): [(str(d / f"{i:020d}.log"), i + 1) for i in range(5)]}


def test_a_listing_cut_every_time_is_an_error_not_fewer_files(tmp_path):
    d = files_in(tmp_path, 5)
    with pytest.raises(RecordReadError, match="output incomplete 3 times"):
        log_dump._list_files(CuttingNode(cuts=99, keep=slice(40, None)), [str(d)])


def test_a_missing_directory_is_left_out_not_an_error(tmp_path):
    d = files_in(tmp_path, 2)
    listed = log_dump._list_files(LocalNode("here"), [str(d), str(tmp_path / "absent")])
    assert list(listed) == [str(d)]


def test_a_whole_dump_passes_and_a_dump_missing_a_batchs_records_is_read_again(tmp_path):
    whole = (FIXTURES / "metadata_dump.txt").read_text()
    assert short_batch(whole) is None
    path = tmp_path / "dump.txt"
    path.write_text(whole)
    node = CuttingNode(cuts=0, keep=slice(None))
    assert log_dump._run(node, ["cat", str(path)], "dumping", short=short_batch) == whole
    # Lines lost after the first batch line: its record is gone, the rest reads whole.
    lines = whole.splitlines(keepends=True)
    cut = "".join(lines[:3] + lines[4:])
    assert short_batch(cut) == "the batch at offset 0 counts 1 records, 0 printed"
    path.write_text(cut)
    with pytest.raises(RecordReadError, match="batch at offset 0 counts 1 records, 0 printed"):
        log_dump._run(node, ["cat", str(path)], "dumping", short=short_batch)
    assert node.calls == 4   # one whole read, then three of the cut file


def test_a_dump_whose_last_batch_lost_records_is_short():
    whole = (FIXTURES / "metadata_dump.txt").read_text()
    assert short_batch(whole.rstrip("\n").rpartition("\n")[0]) == \
        "the batch at offset 635 counts 1 records, 0 printed"


def test_a_failing_command_is_its_exit_code_not_a_retry(tmp_path):
    node = CuttingNode(cuts=0, keep=slice(None))
    with pytest.raises(RecordReadError, match="exited 1"):
        log_dump._run(node, ["sh", "-c", "echo Exception: no such segment >&2; exit 1"], "dumping")
    assert node.calls == 1


def test_run_read_gives_the_commands_own_exit_and_whole_output():
    res = run_read(LocalNode("here"), ["sh", "-c", "printf 'a\\nb'; echo oops >&2; exit 3"])
    assert (res.exit, res.out, res.err.strip()) == (3, "a\nb", "oops")


def test_run_read_cut_every_time_raises_output_lost():
    node = CuttingNode(cuts=99, keep=slice(None, -3))
    with pytest.raises(OutputLost, match="output incomplete 2 times: its output came back cut"):
        run_read(node, ["echo", "hello"], attempts=2)
    assert node.calls == 2


def test_run_read_timeout_is_returned_not_read_again():
    node = CuttingNode(cuts=0, keep=slice(None))
    assert run_read(node, ["sleep", "5"], timeout=1).exit == 124
    assert node.calls == 1
