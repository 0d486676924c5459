"""`opgen lint --fix` rewrites a file whole or not at all (issue 29): the edits of a file land together, in the
file's own encoding, keeping its mode; a file that cannot take them is left byte for byte and said why."""

from __future__ import annotations

import os
import stat

import pytest

from opgen.lint.fix import Edit, apply_edits

CODE = 'lib.define("fx::fill(Tensor x) -> ()")\nlib.impl("fill", fill, "npu")\n'


def edits(path) -> list[Edit]:
    return [Edit(str(path), 1, 12, 16, "", "drop fx::"), Edit(str(path), 1, 27, 27, "(a!)", "mark written"),
            Edit(str(path), 2, 23, 28, '"PrivateUse1"', "key")]


def test_every_edit_of_a_file_lands_and_the_mode_is_kept(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(CODE)
    path.chmod(0o750)
    failed: dict[str, str] = {}
    assert apply_edits(edits(path), failed) == 3 and not failed
    assert path.read_text() == 'lib.define("fill(Tensor(a!) x) -> ()")\nlib.impl("fill", fill, "PrivateUse1")\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert [p.name for p in tmp_path.iterdir()] == ["ops.py"]  # no staged file left


def test_a_file_in_its_declared_encoding_is_written_back_in_it(tmp_path):
    path = tmp_path / "ops.py"
    data = ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + CODE).encode("latin-1")
    path.write_bytes(data)
    moved = [Edit(e.path, e.line + 2, e.start, e.end, e.text, e.message) for e in edits(path)]
    assert apply_edits(moved) == 3
    assert path.read_bytes().decode("latin-1").startswith("# -*- coding: latin-1 -*-\n# caf\xe9\nlib.define(\"fill(")


def test_a_line_whose_columns_its_encoding_moves_leaves_the_whole_file_as_it_was(tmp_path):
    """Latin-1 'Ã©' is two characters, but the collector read the bytes as UTF-8 ('é', one): the columns on that
    line would be off by one, so no edit of the file is made."""
    path = tmp_path / "ops.py"
    data = ("# -*- coding: latin-1 -*-\n" + CODE.replace('"npu")', '"npu")  # \xc3\xa9')).encode("latin-1")
    path.write_bytes(data)
    moved = [Edit(e.path, e.line + 1, e.start, e.end, e.text, e.message) for e in edits(path)]
    failed: dict[str, str] = {}
    assert apply_edits(moved, failed) == 0
    assert path.read_bytes() == data
    assert "line 3 reads differently in its encoding (iso-8859-1) and in UTF-8" in failed[str(path)]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_file_is_reported_not_replaced(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(CODE)
    path.chmod(0o444)
    failed: dict[str, str] = {}
    assert apply_edits(edits(path), failed) == 0
    assert failed == {str(path): "it is read-only"} and path.read_text() == CODE


def test_a_file_that_changed_since_the_check_is_left_alone(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text("x = 1\n")
    failed: dict[str, str] = {}
    assert apply_edits([Edit(str(path), 7, 0, 1, "y", "gone")], failed) == 0
    assert "no line 7" in failed[str(path)] and path.read_text() == "x = 1\n"
