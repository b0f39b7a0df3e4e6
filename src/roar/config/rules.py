"""Rules for the values of ``params.yaml``: each returns None for a good value, else what the value
must be. Shared by the params schema (:mod:`roar.config.schema`) and the measures' option rules in
the catalog (:mod:`roar.config.catalog`), which the schema imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# A rule returns None for a good value, else what the value must be ("must be an integer >= 1").
Rule = Callable[[object], "str | None"]


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_hint(value: object) -> str:
    """Why a value that looks numeric is not one."""
    if isinstance(value, bool):
        return " (true/false is not a number)"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        if "e" in value.lower() and "." not in value:  # YAML 1.1 reads 1e-3 as a string
            return f" (YAML reads {value} as text; write it with a dot, e.g. 1.0e-3)"
        return " (a quoted number is text; write it without quotes)"
    return ""


def integer(low: int | None = None, high: int | None = None, nullable: bool = False) -> Rule:
    """An int (not a bool) in ``low..high``; ``nullable`` also allows null."""
    wanted = ("null or " if nullable else "") + "an integer" + (
        f" in {low}..{high}" if low is not None and high is not None else
        f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")

    def rule(value: object) -> str | None:
        if value is None and nullable:
            return None
        if not is_int(value):
            return f"must be {wanted}{_number_hint(value)}"
        if (low is not None and value < low) or (high is not None and value > high):
            return f"must be {wanted}"
        return None
    return rule


def number(low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False) -> Rule:
    """A finite int or float (not a bool) within the bounds (open or closed)."""
    if low is not None and high is not None:
        wanted = f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    elif low is not None:
        wanted = f"a number {'>' if low_open else '>='} {low}"
    elif high is not None:
        wanted = f"a number {'<' if high_open else '<='} {high}"
    else:
        wanted = "a number"

    def rule(value: object) -> str | None:
        if not _is_number(value) or not math.isfinite(value):
            return f"must be {wanted}{_number_hint(value)}"
        if low is not None and (value <= low if low_open else value < low):
            return f"must be {wanted}"
        if high is not None and (value >= high if high_open else value > high):
            return f"must be {wanted}"
        return None
    return rule


def text(nullable: bool = False) -> Rule:
    """A non-empty string; ``nullable`` also allows null."""
    wanted = ("null or " if nullable else "") + "a non-empty string"

    def rule(value: object) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value.strip():
            return f"must be {wanted}"
        return None
    return rule


def one_of(allowed: tuple[str, ...]) -> Rule:
    """One of the strings ``allowed``."""
    def rule(value: object) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"
    return rule


def matches(regex: str, wanted: str, nullable: bool = False) -> Rule:
    """A string matching ``regex`` in full (``wanted`` says what that is, with an example)."""
    import re

    compiled = re.compile(regex)

    def rule(value: object) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not compiled.fullmatch(value):
            return f"must be {'null or ' if nullable else ''}{wanted}"
        return None
    return rule


def mapping(value: object) -> str | None:
    return None if isinstance(value, dict) else "must be a mapping (key: value)"


def anything(value: object) -> str | None:
    return None
