"""The curve figures' panels (roar.report.figures)."""

from __future__ import annotations

import pandas as pd

from roar.report.figures import panel_curves


def _curves(chains: list[tuple[str, bool]]) -> pd.DataFrame:
    return pd.DataFrame([{"measure": measure, "recursive": recursive, "k": k, "mean": 0.5}
                         for measure, recursive in chains for k in (0, 10)])


def _lines(panel: pd.DataFrame) -> list[tuple[str, bool, int]]:
    return sorted((m, r, n) for (m, r), n in panel.groupby(["measure", "recursive"]).size().items())


def test_each_panel_draws_one_random_line_its_own_or_the_other_modes() -> None:
    """Random masks are the same in both modes: a panel without its own random chain borrows the other mode's,
    and a panel with its own does not draw the other's too (it drew both, two points per k, before)."""
    default = _curves([("random", True), ("gradient", True), ("gradient", False)])  # random run recursively only
    assert _lines(panel_curves(default, recursive=False)) == [("gradient", False, 2), ("random", True, 2)]
    assert _lines(panel_curves(default, recursive=True)) == [("gradient", True, 2), ("random", True, 2)]
    official = _curves([("random", False), ("gradient", True), ("gradient", False)])  # plain ROAR random only
    assert _lines(panel_curves(official, recursive=True)) == [("gradient", True, 2), ("random", False, 2)]
    both = _curves([("random", True), ("random", False), ("gradient", False)])
    assert _lines(panel_curves(both, recursive=False)) == [("gradient", False, 2), ("random", False, 2)]
