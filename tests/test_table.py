"""The one table renderer: aligned text and Markdown (pure)."""

from __future__ import annotations

import pytest

from sglang_eagle3.table import markdown_table, text_table


def test_text_columns_align_and_the_last_cell_is_not_padded():
    rows = [("setting", "trained", "served"), ("a", "longer value", "x"), ("bb", "", "y  ")]
    assert text_table(rows, indent="  ") == [
        "  setting  trained       served",
        "  a        longer value  x",
        "  bb                     y",  # trailing spaces dropped
    ]


def test_right_alignment_and_short_rows():
    rows = [["name", "step1", "note"], ["long name", "9.5%", "-"], ["x", "n/a", "a remark " * 3]]
    assert text_table(rows, align="<>", sep=" ") == [
        "name      step1 note",
        "long name  9.5% -",
        "x           n/a a remark a remark a remark",
    ]
    assert text_table([]) == []


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="align"):
        text_table([["a"]], align="^")
    with pytest.raises(TypeError, match="must be str"):
        text_table([["a", 1]])
    with pytest.raises(ValueError, match="2 cells under a 3-column header"):
        markdown_table(["a", "b", "c"], [["1", "2"]])


def test_markdown_rows_and_empty_cells():
    assert markdown_table(["server", "tok/s"], [["plain", "1.0"], ["failed: x", ""]]) == (
        "| server | tok/s |\n|---|---|\n| plain | 1.0 |\n| failed: x | |"
    )


def test_renderer_stays_pure_python():
    import subprocess
    import sys

    code = (
        "import sys, sglang_eagle3.table\n"
        "assert not {'torch', 'numpy', 'sglang'} & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
