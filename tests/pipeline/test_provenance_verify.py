"""`roar provenance verify` on a real git + DVC project: a code change that computes the same re-keys
dvc.lock (and `dvc status` is clean after it); one that moves numbers re-keys nothing of its measure."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.pipeline.conftest import commit, make_project, project_env, sh, tiny_params

IG_RIGHT_RULE = "torch.arange(1, n + 1,"  # scales i/n, i = 1..n (the right Riemann sum)
IG_LEFT_RULE = "torch.arange(0, n,"  # scales i/n, i = 0..n-1


def locked_fingerprints(root: Path) -> dict[str, str]:
    """Each locked stage's code fingerprint (a study folder reads ``../../provenance.yaml``)."""
    stages = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    return {name: next(iter(values.values())) for name, entry in stages.items()
            for path, values in entry["params"].items() if Path(path).name == "provenance.yaml"}


def verify(root: Path) -> tuple[int, str]:
    import subprocess

    proc = subprocess.run(["roar", "provenance", "verify"], cwd=root, env=project_env(root), capture_output=True,
                          text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_verify_rekeys_what_computes_the_same_and_nothing_that_moved(tmp_path: Path) -> None:
    params = tiny_params()
    params["study"].update(measures=["random", "integrated-gradient"], roar_measures=[], seeds=[0], steps=[40])
    params["importance"]["integrated-gradient"] = {"samples": 4, "max_rows": None}
    root = make_project(tmp_path / "verify", params)
    sh("roar", "pipeline", "--jobs", "2", "--no-push", cwd=root)
    commit(root, "study run")

    # Comments and docstrings are not code: nothing is stale, nothing runs.
    masking = root / "src" / "roar" / "method" / "masking.py"
    masking.write_text(masking.read_text().replace('"""', '"""Reworded. ', 1) + "\n# a closing comment\n")
    code, out = verify(root)
    assert code == 0 and "nothing to verify" in out, out

    # Code that computes the same (a helper added to masking): every stage is stale, the samples match,
    # dvc.lock is re-keyed and DVC agrees that the study is up to date.
    before = locked_fingerprints(root)
    masking.write_text(masking.read_text() + "\n\ndef masked_share(masked: int, total: int) -> float:\n"
                       "    return masked / total\n")
    code, out = verify(root)
    assert code == 0, out
    assert "verified fingerprints.chain.integrated-gradient" in out and "verified fingerprints.chain.random" in out
    after = locked_fingerprints(root)
    chains = [name for name in before if name.startswith("recursive@")]
    assert chains and all(after[name] != before[name] for name in chains), "the chains run masking: re-keyed"
    assert after["report"] == before["report"]  # the report's computing path holds no masking: not stale
    status = sh("dvc", "status", cwd=root)
    assert "up to date" in status, status
    log = yaml.safe_load((root / "provenance.yaml").read_text())["verified"]
    assert {entry["key"] for entry in log} >= {"fingerprints.chain.random", "fingerprints.chain.integrated-gradient",
                                               "fingerprints.train", "fingerprints.prepare", "fingerprints.report"}
    commit(root, "verified")

    # Integrated gradients' left Riemann rule moves its numbers: its chain stays stale, random is re-keyed.
    ig = root / "src" / "roar" / "importance" / "integrated_gradient.py"
    assert IG_RIGHT_RULE in ig.read_text()
    ig.write_text(ig.read_text().replace(IG_RIGHT_RULE, IG_LEFT_RULE))
    before = locked_fingerprints(root)
    code, out = verify(root)
    assert code == 2 and "changed fingerprints.chain.integrated-gradient" in out, out
    assert "fingerprints.chain.random" not in re.findall(r"changed (\S+)", out)
    after = locked_fingerprints(root)
    changed = {name for name in before if after[name] != before[name]}
    assert changed == set(), f"only the IG fingerprint changed, and it was refused: {changed}"
    status = sh("dvc", "status", cwd=root)
    stale = set(re.findall(r"^(\S+):$", status, flags=re.M))
    assert stale == {"recursive@babi-1-bilstm-attention-integrated-gradient-0"}, status


IG_OFFICIAL_TERM = "gradients = gradients * chunk[:, None, None, None]"


def test_a_change_that_moves_one_study_s_outputs_leaves_only_that_study_stale(tmp_path: Path) -> None:
    """Two studies whose integrated gradients take two code paths (textbook and official weighting); a change
    to the official path re-keys the textbook study, leaves the official study's IG chain stale, and logs no
    equivalence for IG (the step store honours the log in every study)."""
    params = tiny_params(measures=["random", "integrated-gradient"], roar_measures=[], seeds=[0], steps=[40])
    params["importance"]["integrated-gradient"] = {"samples": 4, "max_rows": None}
    root = make_project(tmp_path / "scoped", params)
    official = {**params, "study": {**params["study"], "name": "official"},
                "importance": {**params["importance"],
                               "integrated-gradient": {"samples": 4, "max_rows": None, "weighting": "official"}}}
    (root / "official.yaml").write_text(yaml.safe_dump(official, sort_keys=False))
    sh("roar", "study", "new", "official", "--from", "official.yaml", cwd=root)
    sh("roar", "pipeline", "--jobs", "2", "--no-push", cwd=root)
    sh("roar", "pipeline", "--study", "official", "--jobs", "2", "--no-push", cwd=root)
    commit(root, "two studies run")

    ig = root / "src" / "roar" / "importance" / "integrated_gradient.py"
    assert IG_OFFICIAL_TERM in ig.read_text()
    ig.write_text(ig.read_text().replace(IG_OFFICIAL_TERM, IG_OFFICIAL_TERM + " ** 2"))
    before = {study: locked_fingerprints(study) for study in (root, root / "studies" / "official")}
    logged = len(yaml.safe_load((root / "provenance.yaml").read_text())["verified"] or [])
    code, out = verify(root)
    assert code == 2 and "changed fingerprints.chain.integrated-gradient" in out, out
    assert "stays stale: studies/official: recursive@babi-1-bilstm-attention-integrated-gradient-0" in out, out
    ig_stage = "recursive@babi-1-bilstm-attention-integrated-gradient-0"
    after = {study: locked_fingerprints(study) for study in before}
    assert after[root][ig_stage] != before[root][ig_stage], "the textbook study's IG sample matched: re-keyed"
    assert after[root / "studies" / "official"][ig_stage] == before[root / "studies" / "official"][ig_stage]
    added = (yaml.safe_load((root / "provenance.yaml").read_text())["verified"] or [])[logged:]
    assert added == [], "IG matched in one study only: no equivalence in the log that every study reads"
    assert "up to date" in sh("dvc", "status", "dvc.yaml", cwd=root)
    stale = set(re.findall(r"^(\S+):$", sh("dvc", "status", "dvc.yaml", cwd=root / "studies" / "official"),
                           flags=re.M))
    assert stale == {ig_stage}, stale
