"""The human reports' markdown: one table renderer and the number formats of its cells."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

MISSING = "—"  # a cell whose number is undefined (NaN) or absent


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: the header row, the ``|---|`` rule, then one line per row.

    Args:
        header: the column names.
        rows: the cells of each row, as text, one per column.

    Returns:
        The table's lines, without a trailing blank line.
    """
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def number(x: float | None, spec: str) -> str:
    """``x`` formatted with the format ``spec`` (e.g. ``".1f"``, ``"+.2f"``); :data:`MISSING` for None or NaN."""
    if x is None or math.isnan(x):
        return MISSING
    return format(x, spec)


def percent(x: float | None, digits: int = 1) -> str:
    """A fraction in percent with ``digits`` decimals, without the sign: ``0.4567`` -> ``45.7``;
    :data:`MISSING` for None or NaN."""
    return number(None if x is None else 100 * x, f".{digits}f")
