"""Sphinx roles in roar's docstrings (:func:`x`, :class:`~a.B`, ...) as mkdocstrings cross-references.

The docstrings keep the roles that read well in source and in ``help()``; the docs site turns each into
an autorefs link (``[`B`][a.B]``), so a role naming nothing documented fails ``mkdocs build --strict``.
Unqualified names resolve in the docstring's own scope (``scoped_crossrefs`` in mkdocs.yml).
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|exc|obj):`(~?)([\w.]+)`")


def crossref(match: re.Match) -> str:
    short, target = match.groups()
    title = target.rsplit(".", 1)[-1] if short else target
    return f"[`{title}`][{target}]"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(crossref, obj.docstring.value)
