"""The one exception type for bad input: a one-line message that names the key or file, what is
wrong, and what is allowed or what to do. The command line prints it (no traceback) and exits 2.

It subclasses ``ValueError`` so that code catching ``ValueError`` keeps working.
"""

from __future__ import annotations


class RoarError(ValueError):
    """Bad input (params, files, arguments), with a message meant for the user as it is."""


def one_line(message: str) -> str:
    """``message`` on one line: inner line breaks become ``; ``, surrounding space is dropped."""
    parts = [part.strip() for part in str(message).splitlines() if part.strip()]
    return "; ".join(parts)


def shorten(text: str, limit: int = 240) -> str:
    """``text`` on one line, cut after at most ``limit`` characters at a ``; `` boundary (``...`` marks the cut)."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    cut = text.rfind("; ", 0, limit)
    return (text[:cut] if cut > 0 else text[:limit]) + " ..."
