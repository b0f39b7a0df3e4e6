"""Code fingerprints: which modules count, what in them counts, dvc.yaml and provenance.yaml in step."""

from __future__ import annotations

from pathlib import Path

import yaml

from roar.config.catalog import MEASURES, measure_spec
from roar.pipeline.provenance import (PROVENANCE_FILE, STAGE_KINDS, chain_modules, code_fingerprints,
                                      computing_modules, equivalent_fingerprints, fingerprint_key, lookup,
                                      module_imports, normalized_code, read_provenance)

REPO = Path(__file__).resolve().parents[3]


def test_each_dvc_stage_depends_on_its_code_fingerprint_and_on_no_source_file() -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert set(stages) == set(STAGE_KINDS)
    for name, stage in stages.items():
        assert not [d for d in stage.get("deps", []) if d.startswith("src/")], name
        code = [item[PROVENANCE_FILE] for item in stage["params"] if isinstance(item, dict)]
        measure = "${item.measure}" if STAGE_KINDS[name] == "chain" else None
        assert code == [[fingerprint_key(name, measure)]], name


def test_the_committed_provenance_file_holds_the_code_s_fingerprints() -> None:
    """Fails when code on a computing path changed without `roar provenance update` (dvc status would lie)."""
    assert read_provenance(REPO)["fingerprints"] == code_fingerprints(), "run `roar provenance update`"


def test_docstrings_comments_and_layout_do_not_count_code_does() -> None:
    base = normalized_code('"""Module."""\nimport math\n\n\ndef f(x):\n    """Doc."""\n    return math.sqrt(x)\n')
    assert normalized_code("import math\ndef f(x):  # a comment\n    return (math.sqrt(\n        x))\n") == base
    assert normalized_code('"""Other words."""\nimport math\ndef f(x):\n    return math.sqrt(x)\n') == base
    assert normalized_code("import math\ndef f(y):\n    return math.sqrt(y)\n") != base  # a rename counts
    assert normalized_code("import math\ndef f(x):\n    return math.sqrt(x) + 0\n") != base
    # a docstring-only body keeps a body
    assert normalized_code('def g():\n    """Only a docstring."""\n') == normalized_code("def g():\n    pass\n")


def test_the_chain_s_computing_path_holds_what_computes_and_not_what_reports() -> None:
    chain = computing_modules("chain")
    assert {"roar.pipeline.chain", "roar.pipeline.runner", "roar.method.masking", "roar.models.training",
            "roar.models.bilstm", "roar.data.storage", "roar.importance.integrated_gradient"} <= chain
    for outside in ("roar.cli", "roar.tracking", "roar.report", "roar.launch", "roar.pipeline.step_store",
                    "roar.pipeline.step_record", "roar.pipeline.provenance", "roar.pipeline.stage"):
        assert not [m for m in chain if m == outside or m.startswith(outside + ".")], outside
    assert "roar.report.tables" in computing_modules("report") and "roar.models.bilstm" not in computing_modules(
        "report")
    assert "roar.models.training" not in computing_modules("prepare")


def test_a_measure_s_fingerprint_holds_its_own_module_and_not_the_others() -> None:
    gradient = chain_modules(measure_spec("gradient").module)
    assert "roar.importance.gradient" in gradient and "roar.importance.integrated_gradient" not in gradient
    prints = code_fingerprints()["chain"]
    assert set(prints) == set(MEASURES) and len(set(prints.values())) == len(MEASURES)


def test_imports_inside_functions_count() -> None:
    # training imports the embeddings lazily, inside a function, and the model families through their registry
    assert {"roar.models.registry", "roar.data.embeddings"} <= module_imports("roar.models.training")


def test_verified_changes_chain_back_to_every_earlier_equivalent() -> None:
    log = [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "x", "to": "y"}]
    assert equivalent_fingerprints("c", log) == {"a", "b", "c"}
    assert equivalent_fingerprints("b", log) == {"a", "b"}  # verification runs forwards only
    assert equivalent_fingerprints("z", log) == {"z"}


def test_a_change_verified_for_some_model_families_holds_only_for_those() -> None:
    log = [{"from": "a", "to": "b"}, {"from": "b", "to": "c", "models": ["bilstm-attention"]}]
    assert equivalent_fingerprints("c", log, "bilstm-attention") == {"a", "b", "c"}
    assert equivalent_fingerprints("c", log, "roberta") == {"c"}
    assert equivalent_fingerprints("c", log) == {"c"}
    assert equivalent_fingerprints("b", log, "roberta") == {"a", "b"}


def test_lookup_of_dotted_keys() -> None:
    prints = {"train": "t", "chain": {"gradient": "g"}}
    assert lookup(prints, "fingerprints.chain.gradient") == "g" and lookup(prints, "fingerprints.train") == "t"
    assert lookup(prints, "fingerprints.chain.occlusion") is None and lookup(prints, "fingerprints.chain") is None
    assert fingerprint_key("recursive", "gradient") == "fingerprints.chain.gradient"
    assert fingerprint_key("train_all_masked") == "fingerprints.train"


def test_every_committed_step_record_was_made_by_todays_code_or_code_verified_to_compute_the_same() -> None:
    """A fresh clone writes a committed record back only when its code is one of these (StepStore.as_committed);
    a record of unrecorded code is re-keyed there, and dvc.lock changes though nothing else did."""
    import json

    provenance = read_provenance(REPO)
    unknown = []
    for path in [*REPO.glob("results/**/k*.json"), *REPO.glob("studies/*/results/**/k*.json")]:
        record = json.loads(path.read_text())
        known = equivalent_fingerprints(provenance["fingerprints"]["chain"][record["measure"]],
                                        provenance.get("verified") or [], record["model"])
        if record["code_fingerprint"] not in known:
            unknown.append(f"{path.relative_to(REPO)}: {record['code_fingerprint'][:12]}")
    assert unknown == []
