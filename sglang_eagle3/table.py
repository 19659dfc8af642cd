"""The one table renderer: aligned plain text and GitHub Markdown (pure: standard library only).

The launcher's wiring table, the trained-settings table, the doctor's candidate table, the
benchmark's and the demo's Markdown all render here, so they align alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_ALIGNS = ("<", ">")


def text_table(
    rows: Sequence[Sequence[str]], *, align: str = "", sep: str = "  ", indent: str = ""
) -> list[str]:
    """One line per row, each column as wide as its widest padded cell.

    ``align[i]`` is ``<`` (left, the default for columns it does not cover) or ``>`` (right).
    A row's last cell is never padded and does not widen its column, so a shorter row (a
    remark where the numbers would be) ends where its text does. Trailing spaces are dropped.
    """
    bad = [a for a in align if a not in _ALIGNS]
    if bad:
        raise ValueError(f"align takes only '<' and '>', got {align!r}")
    for row in rows:
        if not all(isinstance(c, str) for c in row):
            raise TypeError(f"table cells must be str, got {list(row)!r}")
    n = max((len(r) for r in rows), default=0)
    widths = [max((len(r[i]) for r in rows if i < len(r) - 1), default=0) for i in range(n)]
    lines = []
    for row in rows:
        cells = [
            c if i == len(row) - 1 else _pad(c, widths[i], align[i] if i < len(align) else "<")
            for i, c in enumerate(row)
        ]
        lines.append((indent + sep.join(cells)).rstrip())
    return lines


def _pad(cell: str, width: int, how: str) -> str:
    return cell.rjust(width) if how == ">" else cell.ljust(width)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """``| a | b |`` lines: the header, a ``|---|`` rule, then the rows (an empty cell is
    written ``| |``). Every row must have as many cells as the header."""
    lines = [_md_line(header), "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells under a {len(header)}-column header")
        lines.append(_md_line(row))
    return "\n".join(lines)


def _md_line(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"
