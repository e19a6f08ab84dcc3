"""fairseq_plugins.lab.common.files.write_atomically: outputs whole or not at all, also when two
processes write the same outputs at once (two recipe runs into one folder)."""

import os

import pytest

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import text_writer, write_atomically


def test_a_failed_writer_changes_nothing(tmp_path):
    (tmp_path / "a.md").write_text("old\n")

    def fail(path):
        with open(path, "w") as f:
            f.write("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_atomically({str(tmp_path / "a.md"): text_writer("new"), str(tmp_path / "b.json"): fail})
    assert os.listdir(tmp_path) == ["a.md"] and (tmp_path / "a.md").read_text() == "old\n"


def test_two_writers_of_the_same_outputs_at_once_both_finish(tmp_path):
    """A second write of the same table that starts and ends while the first is still writing its
    other output (as a second process would): each keeps its own temporary files, both succeed,
    the later rename wins and no temporary file is left."""
    table, figures = str(tmp_path / "facts.md"), str(tmp_path / "facts.json")

    def figures_writer(path):
        write_atomically({table: text_writer("second")})  # the other process, start to end
        with open(path, "w") as f:
            f.write("{}\n")

    assert write_atomically({table: text_writer("first"), figures: figures_writer}) == [table, figures]
    assert (tmp_path / "facts.md").read_text() == "first\n" and (tmp_path / "facts.json").read_text() == "{}\n"
    assert sorted(os.listdir(tmp_path)) == ["facts.json", "facts.md"]


def test_an_output_that_cannot_be_renamed_into_place_leaves_no_temporary_file(tmp_path):
    """A folder where an output goes: refused in one line before any output is replaced, and no
    hidden temporary file is left behind (of this output or of the others)."""
    (tmp_path / "b.txt").mkdir()
    (tmp_path / "a.txt").write_text("old\n")
    with pytest.raises(ConfigError, match=r"b\.txt is a folder; remove it or choose another output"):
        write_atomically({str(tmp_path / "a.txt"): text_writer("new"), str(tmp_path / "b.txt"): text_writer("x")})
    assert (tmp_path / "a.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_a_failed_rename_removes_every_temporary_file(tmp_path, monkeypatch):
    """The rename itself failing (a full disk, a permission) leaves no temporary file either."""


    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        write_atomically({str(tmp_path / "a.txt"): text_writer("new"), str(tmp_path / "c.txt"): text_writer("x")})
    assert list(tmp_path.iterdir()) == []
