"""The code a stage's outputs depend on, fingerprinted so that the code can move and the key stays honest.

A stage's fingerprint covers only the modules on its computing path: the parts that compute
(core, config, data, models, importance, method) as far as the stage's entry modules reach them,
plus the entry modules themselves. The CLI, tracking, reporting of records, launching and the
step store are not on it: they decide where results go and whether a step runs, not what it
computes. Each module counts by its name and its syntax tree without docstrings, so comments,
docstrings and formatting do not re-key a step; anything else that changes (a rename, a line of
code) does, and ``roar provenance verify`` can then prove by recomputation that outputs did not move.

``provenance.yaml`` at the project root holds the current fingerprints (DVC reads them as params,
so ``dvc status`` follows them) and the log of verified code changes.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from importlib import metadata
from pathlib import Path

PACKAGE = "roar"
SRC = Path(__file__).resolve().parents[1]
PROVENANCE_FILE = "provenance.yaml"
# The parts whose code computes outputs wherever a stage reaches them.
COMPUTING_PARTS = ("roar.core", "roar.config", "roar.data", "roar.models", "roar.importance", "roar.method")
# Where each stage kind's computation starts (its CLI command calls these); the chain kind also
# fingerprints per measure, without the other measures' modules.
STAGE_ENTRIES = {
    "prepare": ("roar.data.prepare", "roar.method.masking"),
    "train": ("roar.pipeline.runner",),
    "chain": ("roar.pipeline.chain", "roar.pipeline.runner"),
    "report": ("roar.report.study",),
}
# Parts computed by an entry of that kind beyond COMPUTING_PARTS (the report's tables and figures).
ENTRY_PARTS = {"report": ("roar.report", "roar.pipeline.step_record")}
# DVC stage templates -> the stage kind whose fingerprint they depend on.
STAGE_KINDS = {"prepare": "prepare", "train_k0": "train", "train_all_masked": "train", "recursive": "chain",
               "roar": "chain", "report": "report"}
# Registries that import their members by name (importlib), invisible to the import graph.
REGISTRIES = {"roar.data.prepare": "roar.data", "roar.importance.registry": "roar.importance",
              "roar.models.registry": "roar.models"}
# Libraries whose version can change the numbers a step produces.
NUMERIC_LIBRARIES = ("torch", "transformers", "lightning", "numpy")


def module_file(module: str) -> Path:
    """The source file of a ``roar`` module (a package's ``__init__.py``)."""
    package = SRC.joinpath(*module.split(".")[1:])
    return package / "__init__.py" if package.is_dir() else package.with_suffix(".py")


def _is_module(module: str) -> bool:
    return module.split(".")[0] == PACKAGE and module_file(module).is_file()


@cache
def module_imports(module: str) -> frozenset[str]:
    """Every ``roar`` module that ``module`` imports, at module level or inside functions
    (``from a import b`` counts ``a.b`` when it is a module)."""
    found = set()
    package = module if module_file(module).name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(module_file(module).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return frozenset(m for m in found if _is_module(m))


def package_modules(package: str) -> list[str]:
    folder = module_file(package).parent
    return sorted(f"{package}.{p.stem}" if p.name != "__init__.py" else package for p in folder.glob("*.py"))


def _in_parts(module: str, parts: tuple[str, ...]) -> bool:
    return any(module == part or module.startswith(part + ".") for part in parts)


def _closure(entries: tuple[str, ...], parts: tuple[str, ...], registries: bool) -> set[str]:
    """``entries`` and the modules of ``parts`` they import, transitively (with ``registries``, a
    registry reached counts its whole package)."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen or not (module in entries or _in_parts(module, parts)):
            continue
        seen.add(module)
        todo += module_imports(module)
        if registries and module in REGISTRIES:
            todo += package_modules(REGISTRIES[module])
    return seen


def computing_modules(kind: str) -> set[str]:
    """The modules on the computing path of a stage ``kind``: its entries and what they reach inside
    the computing parts."""
    if kind not in STAGE_ENTRIES:
        raise ValueError(f"unknown stage kind {kind!r}; allowed: {', '.join(STAGE_ENTRIES)}")
    return _closure(STAGE_ENTRIES[kind], COMPUTING_PARTS + ENTRY_PARTS.get(kind, ()), registries=True)


def normalized_code(source: str) -> str:
    """The syntax tree of ``source`` without docstrings and positions: what the code does, not how it
    is written down (comments, docstrings, line breaks and spacing drop out)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=True, include_attributes=False)


def modules_fingerprint(modules: set[str]) -> str:
    """sha256 over the modules' names and normalised sources, in name order."""
    digest = hashlib.sha256()
    for module in sorted(modules):
        digest.update(module.encode() + b"\0" + normalized_code(module_file(module).read_text()).encode() + b"\0")
    return digest.hexdigest()


def chain_modules(measure_module: str) -> set[str]:
    """The chain's computing path for one measure: without the other measures' modules, so that a
    fix to one measure re-keys only that measure's steps."""
    from roar.config.catalog import MEASURE_SPECS

    own = _closure((measure_module,), COMPUTING_PARTS, registries=False)
    others = {spec.module for spec in MEASURE_SPECS.values()} - own
    return computing_modules("chain") - others


def chain_code_fingerprint(measure_module: str) -> str:
    return modules_fingerprint(chain_modules(measure_module))


def code_fingerprints() -> dict:
    """Every stage kind's fingerprint (the chain's per measure): what ``provenance.yaml`` holds."""
    from roar.config.catalog import MEASURE_SPECS

    return {"prepare": modules_fingerprint(computing_modules("prepare")),
            "train": modules_fingerprint(computing_modules("train")),
            "chain": {name: chain_code_fingerprint(MEASURE_SPECS[name].module) for name in sorted(MEASURE_SPECS)},
            "report": modules_fingerprint(computing_modules("report"))}


def fingerprint_key(stage: str, measure: str | None = None) -> str:
    """The ``provenance.yaml`` key that the DVC stage template ``stage`` depends on."""
    if stage not in STAGE_KINDS:
        raise ValueError(f"unknown stage {stage!r}; allowed: {', '.join(STAGE_KINDS)}")
    kind = STAGE_KINDS[stage]
    return f"fingerprints.{kind}.{measure}" if kind == "chain" else f"fingerprints.{kind}"


def read_provenance(root: Path) -> dict:
    """``provenance.yaml``: ``fingerprints`` (as :func:`code_fingerprints`) and ``verified`` (a list of
    code changes shown not to move outputs, each ``{key, from, to, ...}``); empty where there is none
    (a scratch project)."""
    import yaml

    path = root / PROVENANCE_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def write_provenance(root: Path, verified: list[dict] | None = None) -> dict:
    """Write the current code's fingerprints to ``provenance.yaml``, keeping (or replacing with
    ``verified``) its log of verified changes; returns what was written."""
    import yaml

    from roar.core.fileio import write_text_atomic

    if verified is None:
        verified = read_provenance(root).get("verified") or []
    content = {"fingerprints": code_fingerprints(), "verified": verified}
    header = ("# Written by `roar provenance update` / `roar provenance verify`; do not edit by hand.\n"
              "# fingerprints: each stage kind's code (roar.pipeline.provenance), read by dvc.yaml as params.\n"
              "# verified: code changes whose sample steps were recomputed byte-identical under both codes.\n")
    write_text_atomic(root / PROVENANCE_FILE, header + yaml.safe_dump(content, sort_keys=False, width=120))
    return content


def refresh_provenance(root: Path) -> list[str]:
    """Bring ``provenance.yaml`` up to date with the code (so that DVC sees code changes as changed
    params); returns the keys whose fingerprint changed."""
    before = read_provenance(root).get("fingerprints") or {}
    after = code_fingerprints()
    if after == before:
        return []
    write_provenance(root)
    return [key for key in _dotted_keys({"fingerprints": after}) if lookup(before, key) != lookup(after, key)]


def _dotted_keys(node: dict, prefix: str = "") -> list[str]:
    """The dotted key of every string leaf of ``node`` (``fingerprints.chain.gradient``, ...)."""
    return [key for name, value in node.items() for key in (
        _dotted_keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [f"{prefix}{name}"])]


def lookup(fingerprints: dict, key: str) -> str | None:
    """The value of a dotted ``fingerprints.*`` key (as :func:`fingerprint_key` names it)."""
    node: object = {"fingerprints": fingerprints}
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def equivalent_fingerprints(current: str, verified: list[dict], model: str | None = None) -> set[str]:
    """``current`` and every earlier fingerprint verified to compute what it computes (directly or
    through a chain of verified changes) for the model family ``model``. An entry with ``models`` was
    verified only for those families (the change moved another family's outputs); None: only the entries
    verified for every family count."""
    usable = [entry for entry in verified if "models" not in entry or model in entry["models"]]
    found, grew = {current}, True
    while grew:
        before = len(found)
        found |= {entry["from"] for entry in usable if entry.get("to") in found}
        grew = len(found) > before
    return found


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that can change a step's numbers."""
    versions = {}
    for name in NUMERIC_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions
