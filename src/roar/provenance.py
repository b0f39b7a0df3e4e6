"""Which source files a pipeline stage runs, and fingerprints of that code and of the libraries.

A step may only be reused when the code that made it is the code that would make it now. The
files a stage runs are derived from the imports of its CLI command, followed through ``roar``'s
modules (imports inside functions too, since the package imports lazily). Registries that import
by name at run time (dataset loaders, importance measures) count as importing their whole
package. ``dvc.yaml`` lists the same files as each stage's dependencies; a test keeps the two equal.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from importlib import metadata
from pathlib import Path

PACKAGE = "roar"
SRC = Path(__file__).resolve().parent
# Registries that import their members by name (importlib), invisible to the import graph.
REGISTRIES = {"roar.data.prepare": "roar.data", "roar.importance.registry": "roar.importance",
              "roar.models.registry": "roar.models"}
# The CLI command each DVC stage template runs.
STAGE_COMMANDS = {"prepare": "prepare", "train_k0": "train_reference", "train_all_masked": "train_reference",
                  "recursive": "chain", "roar": "chain", "report": "report"}
# Libraries whose version can change the numbers a step produces.
NUMERIC_LIBRARIES = ("torch", "transformers", "lightning", "numpy")


def module_file(module: str) -> Path:
    """The source file of a ``roar`` module (a package's ``__init__.py``)."""
    parts = module.split(".")[1:]
    package = SRC.joinpath(*parts)
    return package / "__init__.py" if package.is_dir() else package.with_suffix(".py")


def _is_module(module: str) -> bool:
    return module.split(".")[0] == PACKAGE and module_file(module).is_file()


def _imports(nodes: list[ast.AST], current: str) -> set[str]:
    """``roar`` modules imported anywhere inside ``nodes`` (``from a import b`` counts ``a.b`` when it
    is a module)."""
    found = set()
    package = current if module_file(current).name == "__init__.py" else current.rpartition(".")[0]
    for node in (n for root in nodes for n in ast.walk(root)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if _is_module(m)}


@cache
def module_imports(module: str) -> frozenset[str]:
    """Every ``roar`` module that ``module`` imports, at module level or inside functions."""
    tree = ast.parse(module_file(module).read_text())
    return frozenset(_imports([tree], module))


def _with_parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def module_closure(modules: set[str], registries: bool = True) -> set[str]:
    """``modules`` and everything they import, transitively, with their parent packages and (with
    ``registries``) the whole package of any registry reached. ``roar.cli`` is not followed: each
    command imports only its own part of the package (:func:`command_imports`)."""
    seen: set[str] = set()
    todo = [p for m in modules for p in _with_parents(m)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module == "roar.cli":
            continue
        todo += [p for m in module_imports(module) for p in _with_parents(m)]
        if registries and module in REGISTRIES:
            todo += package_modules(REGISTRIES[module])
    return seen


def package_modules(package: str) -> list[str]:
    folder = module_file(package).parent
    return sorted(f"{package}.{p.stem}" if p.name != "__init__.py" else package for p in folder.glob("*.py"))


def command_imports(command: str) -> set[str]:
    """Modules the CLI command ``command`` imports: its own function body, plus module-level code
    and helper functions of ``cli.py`` (not the other commands)."""
    tree = ast.parse(module_file("roar.cli").read_text())
    commands = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)
                and any("command" in ast.unparse(d) for d in n.decorator_list)}
    if command not in commands:
        raise ValueError(f"cli.py has no command function {command!r}; commands: {', '.join(sorted(commands))}")
    nodes = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in commands)]
    return _imports(nodes + [commands[command]], "roar.cli") | {"roar.cli"}


def stage_modules(stage: str) -> set[str]:
    """Every ``roar`` module that the DVC stage template ``stage`` may run."""
    if stage not in STAGE_COMMANDS:
        raise ValueError(f"unknown stage {stage!r}; allowed: {', '.join(STAGE_COMMANDS)}")
    return module_closure(command_imports(STAGE_COMMANDS[stage]))


def relative_file(module: str) -> str:
    return str(module_file(module).relative_to(SRC.parent.parent))


def stage_dependencies(stage: str) -> list[str]:
    """The code dependencies of ``stage`` as ``dvc.yaml`` lists them: a package folder when the
    stage runs all of its modules (``__init__`` included), else the single files."""
    modules = stage_modules(stage)
    deps, covered = [], set()
    for package in sorted({m for m in modules if module_file(m).name == "__init__.py"}, key=len):
        members = set(package_modules(package)) | {package}
        if any(package.startswith(c + ".") for c in covered):
            continue
        if members <= modules and package != PACKAGE:
            deps.append(str(module_file(package).parent.relative_to(SRC.parent.parent)))
            covered.add(package)
    for module in sorted(modules):
        if not any(module == c or module.startswith(c + ".") for c in covered):
            deps.append(relative_file(module))
    return sorted(deps)


def files_digest(files: list[Path], base: Path = SRC) -> str:
    """sha256 over the files' names (relative to ``base``) and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def chain_code_files(measure_module: str) -> list[Path]:
    """The files a chain step of one measure runs: the chain stage's modules without the other
    measures' modules (so that a fix to one measure invalidates only that measure's steps)."""
    from roar.registry import MEASURES
    from roar.registry import measure_module as module_of

    modules = stage_modules("recursive")
    others = {module_of(name) for name in MEASURES} - module_closure({measure_module}, registries=False)
    return sorted(module_file(m) for m in modules - others)


def chain_code_fingerprint(measure_module: str) -> str:
    return files_digest(chain_code_files(measure_module))


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that can change a step's numbers."""
    versions = {}
    for name in NUMERIC_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions
