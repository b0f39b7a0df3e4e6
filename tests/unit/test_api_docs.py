"""Every module of the package has its page section in the docs site's API reference (docs/api/), so a
docstring's cross-reference to it resolves (`mkdocs build --strict` fails on one that does not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_is_in_the_api_reference() -> None:
    modules = {".".join(path.relative_to(ROOT / "src").with_suffix("").parts)
               for path in (ROOT / "src/roar").rglob("*.py") if path.stem not in ("__init__", "__main__")}
    documented = {match for page in (ROOT / "docs/api").glob("*.md")
                  for match in re.findall(r"^::: (roar[\w.]*)$", page.read_text(), flags=re.M)}
    assert sorted(modules - documented) == []
    assert sorted(documented - modules) == []  # no section for a module that is gone
