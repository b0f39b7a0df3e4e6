"""The code each stage runs: derived import closures, dvc.yaml's dependency lists, fingerprints."""

from __future__ import annotations

from pathlib import Path

import yaml

from roar import provenance
from roar.provenance import (STAGE_COMMANDS, chain_code_files, command_imports, files_digest, module_imports,
                             stage_dependencies, stage_modules)

REPO = Path(__file__).resolve().parents[2]


def test_dvc_yaml_lists_exactly_the_code_each_stage_runs() -> None:
    """Complete (every module a stage may import) and no more (a change elsewhere does not
    invalidate it). On failure, paste the expected list into dvc.yaml."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert set(stages) == set(STAGE_COMMANDS)
    for name, stage in stages.items():
        code = sorted(dep for dep in stage["deps"] if dep.startswith("src/"))
        assert code == stage_dependencies(name), f"{name}: dvc.yaml code deps should be {stage_dependencies(name)}"


def test_imports_inside_functions_and_relative_imports_count(tmp_path: Path) -> None:
    # training imports the embeddings lazily, inside functions, and the models through their registry
    assert {"roar.models.registry", "roar.data.embeddings"} <= module_imports("roar.training")
    assert "roar.metrics" in module_imports("roar.training")
    # the registry builds families by name: a stage that trains runs every family's module
    assert {"roar.models.bilstm", "roar.models.transformer"} <= stage_modules("train_k0")


def test_each_command_imports_only_its_own_part_of_the_cli() -> None:
    assert "roar.study_report" in command_imports("report") and "roar.study_report" not in command_imports("chain")
    assert "roar.chain" in command_imports("chain") and "roar.chain" not in command_imports("report")


def test_stage_closures_hold_what_the_stage_runs_and_not_the_rest() -> None:
    chain = stage_modules("recursive")
    assert {"roar.chain", "roar.training", "roar.metrics", "roar.data.storage", "roar.masking",
            "roar.importance.gradient", "roar.importance.integrated_gradient", "roar.models.bilstm"} <= chain
    assert not {"roar.report", "roar.racu", "roar.figures", "roar.audit", "roar.launch"} & chain
    report = stage_modules("report")
    assert {"roar.report", "roar.racu", "roar.figures"} <= report and "roar.chain" not in report
    prepare = stage_modules("prepare")
    assert {"roar.data.prepare", "roar.data.polarity", "roar.data.babi", "roar.data.checkpoint_tokenizer",
            "roar.registry", "roar.masking"} <= prepare
    # preparing data runs no model code: a change to a model does not invalidate prepared data
    assert "roar.chain" not in prepare and not {m for m in prepare if m.startswith("roar.models")}


def test_a_measures_step_code_holds_that_measure_only() -> None:
    names = lambda module: {str(p.relative_to(provenance.SRC)) for p in chain_code_files(module)}  # noqa: E731
    gradient, attention = names("roar.importance.gradient"), names("roar.importance.attention")
    assert "importance/gradient.py" in gradient and "importance/attention.py" not in gradient
    assert "importance/attention.py" in attention and "importance/gradient.py" not in attention
    assert "importance/base.py" in gradient  # what gradient itself imports stays
    assert gradient - {"importance/gradient.py"} == attention - {"importance/attention.py"}


def test_files_digest_changes_with_content_and_name(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    first = files_digest([a, b], tmp_path)
    assert files_digest([b, a], tmp_path) == first  # order does not matter
    a.write_text("x = 1  # changed\n")
    assert files_digest([a, b], tmp_path) != first
    a.write_text("x = 1\n")
    assert files_digest([a, b], tmp_path) == first
    a.rename(tmp_path / "c.py")
    assert files_digest([tmp_path / "c.py", b], tmp_path) != first


def test_library_versions_name_torch_and_transformers() -> None:
    versions = provenance.library_versions()
    assert versions["torch"].startswith("2.13.0") and versions["transformers"] != "absent"


def test_the_explained_class_is_a_param_of_the_chains_and_the_report() -> None:
    """``importance.target`` changes what the gradient chains compute and what the report says."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name in ("recursive", "roar", "report"):
        assert "importance.target" in stages[name]["params"], name
    for name in ("prepare", "train_k0", "train_all_masked"):
        assert "importance.target" not in stages[name].get("params", []), name
