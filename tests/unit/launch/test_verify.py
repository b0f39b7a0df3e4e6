"""`roar provenance verify`'s parts: which stages are stale, which samples run, how runs are compared,
whose key a difference refuses, and how a lock is re-keyed (tests/pipeline/test_provenance_verify.py
runs the whole of it on a real project)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from roar.launch.verify import (SAMPLE_EPOCHS, SAMPLE_ROWS, StaleStage, code_revision, committed_fingerprints,
                               compare_projects, owner, plan_samples, rekey_lock, scratch_params, stale_stages,
                               verified_models)

PARAMS = {"study": {"name": "s", "datasets": ["d"], "models": ["m"], "seeds": [0, 1], "steps": [10, 20]}}
CHAIN_G0 = ("chain", "d", "m", "g", "0", "--recursive", "--skip-unsupported", "--no-progress")


def chain(study: Path, measure: str, seed: int, revision: str = "r1") -> StaleStage:
    argv = ("chain", "d", "m", measure, str(seed), "--recursive")
    return StaleStage(study, f"recursive@d-m-{measure}-{seed}", f"fingerprints.chain.{measure}", argv, revision)


def test_one_project_per_study_dataset_model_and_old_commit() -> None:
    a, b = Path("/p"), Path("/p/studies/b")
    stale = [chain(a, "g", 1), chain(a, "g", 0), chain(a, "r", 0), chain(b, "g", 2), chain(b, "g", 0, "r0")]
    projects, sampled = plan_samples(stale, lambda study: PARAMS)
    summary = sorted((p.study.name, p.revision, p.seed, sorted(p.chains)) for p in projects)
    # every study samples its own chains (its options may take other code paths), each at its lowest stale seed
    # (and the Recursive ROAR random chain, its report's baseline)
    random = ("random", True)
    assert summary == [("b", "r0", 0, [("g", True), random]), ("b", "r1", 2, [("g", True), random]),
                       ("p", "r1", 0, [("g", True), ("r", True), random])]
    assert sampled[stale[0]] is sampled[stale[1]]  # seed 1 of a's gradient chain is sampled at seed 0
    assert all({"fingerprints.prepare", "fingerprints.train", "fingerprints.report"} <= p.keys for p in projects)
    assert all(p.report for p in projects)  # one project per study and commit: each runs the report


def test_the_report_and_the_k100_model_run_once_per_study_and_commit() -> None:
    a = Path("/p")
    other = StaleStage(a, "recursive@e-m-g-0", "fingerprints.chain.g", ("chain", "e", "m", "g", "0"), "r1")
    report = StaleStage(a, "report", "fingerprints.report", ("report",), "r1")
    (first, second), sampled = plan_samples([chain(a, "g", 0), other, report], lambda study: PARAMS)
    assert (first.report, second.report) == (True, False) and "fingerprints.report" not in second.keys
    assert sampled[report] is first


def test_stages_without_chains_get_a_project_of_their_dataset_and_model() -> None:
    root = Path("/p")
    report = StaleStage(root, "report", "fingerprints.report", ("report",), "r1")
    (project,), _ = plan_samples([report], lambda study: PARAMS)
    assert (project.dataset, project.model, project.seed, project.chains) == ("d", "m", 0, [("random", True)])
    train = StaleStage(root, "train_k0@e-m-0", "fingerprints.train", ("train-reference", "e", "m", "0"), "r1")
    projects, _ = plan_samples([chain(root, "g", 0), train], lambda study: PARAMS)
    assert sorted((p.dataset, p.model) for p in projects) == [("d", "m"), ("e", "m")]


def test_a_stage_whose_code_no_commit_holds_gets_no_project() -> None:
    known, unknown = chain(Path("/p"), "g", 0), chain(Path("/p"), "r", 0)
    projects, sampled = plan_samples([known, unknown], lambda study: PARAMS,
                                     lambda stage: None if stage is unknown else "r1")
    assert [p.chains for p in projects] == [[("random", True), ("g", True)]] and unknown not in sampled


def test_a_project_of_plain_roar_chains_also_runs_the_recursive_random_chain() -> None:
    """An older schema refuses a study with no Recursive ROAR measure, and the scratch report needs its
    baseline: the random chain comes first."""
    plain = StaleStage(Path("/p"), "roar@d-m-g-0", "fingerprints.chain.g", ("chain", "d", "m", "g", "0", "--roar"), "r1")
    (project,), _ = plan_samples([plain], lambda study: PARAMS)
    assert project.chains == [("random", True), ("g", False)]
    study = scratch_params(PARAMS, project)["study"]
    assert (study["measures"], study["roar_measures"]) == (["random"], ["g"])


def test_the_commit_of_a_locked_fingerprint_is_the_lock_s_or_the_newest_provenance_file_holding_it(
        tmp_path: Path) -> None:
    def commit(fingerprint: str) -> str:
        (tmp_path / "provenance.yaml").write_text(yaml.safe_dump({"fingerprints": {"chain": {"g": fingerprint}}}))
        for cmd in (["git", "add", "provenance.yaml"],
                    ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", fingerprint]):
            subprocess.run(cmd, cwd=tmp_path, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    first, _, last = commit("g1"), commit("g2"), commit("g3")
    at = committed_fingerprints(tmp_path)

    def stage(locked: str | None) -> StaleStage:
        return StaleStage(tmp_path, "recursive@d-m-g-0", "fingerprints.chain.g", ("chain", "d", "m", "g", "0"), last,
                          locked)

    assert code_revision(tmp_path, stage("g3"), at) == last  # the lock's own commit
    assert code_revision(tmp_path, stage("g1"), at) == first  # an older code than its lock's commit
    assert code_revision(tmp_path, stage(None), at) == last  # a lock from before fingerprints
    assert code_revision(tmp_path, stage("g9"), at) is None


def test_a_difference_refuses_the_key_of_the_stage_that_wrote_the_file() -> None:
    assert owner("data/prepared/d/m/train.parquet: bytes differ") == "fingerprints.prepare"
    assert owner("data/masked/d/m/all/test.parquet: bytes differ") == "fingerprints.prepare"
    assert owner("data/masked/d/m/integrated-gradient/recursive/s0/k10/x: bytes differ") == \
        "fingerprints.chain.integrated-gradient"
    assert owner("models/d/m/k0/s0/model.safetensors: bytes differ") == "fingerprints.train"
    assert owner("results/d/m/all/s0.json: computed fields differ") == "fingerprints.train"
    assert owner("models/d/m/random/recursive/s0/k10/model.safetensors: only in the new code's run") == \
        "fingerprints.chain.random"
    assert owner("reports/points.csv: differs") == "fingerprints.report"


def test_a_change_is_logged_for_every_model_family_or_for_those_whose_samples_all_matched() -> None:
    def stage(study: str, model: str) -> StaleStage:
        return StaleStage(Path(study), f"recursive@d-{model}-g-0", "fingerprints.chain.g",
                          ("chain", "d", model, "g", "0", "--recursive"), "r1")

    lstm_a, lstm_b, bert = stage("a", "lstm"), stage("b", "lstm"), stage("b", "bert")
    assert verified_models([lstm_a, lstm_b, bert], {lstm_a, lstm_b, bert}) is None  # every family
    assert verified_models([lstm_a, lstm_b, bert], {lstm_a, lstm_b}) == ["lstm"]
    assert verified_models([lstm_a, lstm_b, bert], {lstm_a, bert}) == ["bert"]  # a family that differed anywhere
    assert verified_models([lstm_a, bert], set()) == []
    report = StaleStage(Path("a"), "report", "fingerprints.report", ("report",), "r1")
    assert verified_models([report, lstm_a], {lstm_a}) == []  # the report spans every family: nothing logged


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_runs_compare_bytes_computed_record_fields_and_untimed_tables(tmp_path: Path) -> None:
    record = {"k": 10, "value": 0.5, "data_hash": "h", "step_run_id": "run-a", "train_seconds": 3.0,
              "git_commit": "abc", "step_key": "key-a", "code_fingerprint": "old",
              "no_retrain": {"k0-model": {"value": 0.4, "seconds": 1.0, "data_hash": "d"}}}
    same = {"data/prepared/d/m/x": "1", "models/d/m/k0/s0/w": "2", "reports/points.csv": "p",
            "reports/compute.csv": "3 s"}
    old = write(tmp_path / "old", {**same, "results/d/m/k0/s0.json": json.dumps(record)})
    new = write(tmp_path / "new", {**same, "reports/compute.csv": "4 s", "results/d/m/k0/s0.json": json.dumps(
        {**record, "step_run_id": "run-b", "train_seconds": 4.0, "git_commit": "def", "step_key": "key-b",
         "code_fingerprint": "new", "no_retrain": {"k0-model": {"value": 0.4, "seconds": 2.0, "data_hash": "d"}}})})
    compared, differences = compare_projects(old, new)
    assert (compared, differences) == (4, [])  # run ids, times (nested too), commit, code key: how a run went
    write(new, {"models/d/m/k0/s0/w": "2!", "models/d/m/g/recursive/s0/k10/w": "extra",
                "results/d/m/k0/s0.json": json.dumps({**record, "value": 0.6}), "reports/points.csv": "q"})
    _, differences = compare_projects(old, new)
    assert differences == ["models/d/m/g/recursive/s0/k10/w: only in the new code's run",
                           "models/d/m/k0/s0/w: bytes differ", "results/d/m/k0/s0.json: computed fields differ",
                           "reports/points.csv: differs"]


LOCK = {"schema": "2.0", "stages": {
    "recursive@d-m-g-0": {"cmd": "roar " + " ".join(CHAIN_G0[:5]) + " --recursive",
                          "deps": [{"path": "../../src/roar/chain.py", "md5": "a"}, {"path": "data/prepared/d/m",
                                                                                   "md5": "b.dir"}],
                          "params": {"params.yaml": {"study.steps": [10]}},
                          "outs": [{"path": "results/d/m/g/recursive/s0", "md5": "c.dir"}]},
    "prepare@d-m": {"cmd": "roar prepare d --model m", "deps": [{"path": "../../src/roar/data", "md5": "d.dir"}],
                    "params": {"params.yaml": {"prepare.d": {}}}, "outs": []},
}}


def test_rekey_sets_the_fingerprint_param_and_drops_source_file_deps(tmp_path: Path) -> None:
    lock = tmp_path / "dvc.lock"
    lock.write_text(yaml.safe_dump(LOCK, sort_keys=False))
    keys = {"fingerprints.chain.g": "new-g", "fingerprints.prepare": "new-p"}
    assert rekey_lock(lock, keys, {"recursive@d-m-g-0"}, "../../provenance.yaml") == 1
    stages = yaml.safe_load(lock.read_text())["stages"]
    chain_stage = stages["recursive@d-m-g-0"]
    assert chain_stage["deps"] == [{"path": "data/prepared/d/m", "md5": "b.dir"}]
    assert chain_stage["params"] == {"params.yaml": {"study.steps": [10]},
                                     "../../provenance.yaml": {"fingerprints.chain.g": "new-g"}}
    assert chain_stage["outs"] == LOCK["stages"]["recursive@d-m-g-0"]["outs"]
    assert stages["prepare@d-m"] == LOCK["stages"]["prepare@d-m"]  # not named: untouched
    rekey_lock(lock, keys, {"prepare@d-m"}, "provenance.yaml")
    assert "deps" not in yaml.safe_load(lock.read_text())["stages"]["prepare@d-m"]  # only code deps: none left


def test_stale_stages_are_those_locked_with_another_fingerprint_and_carry_the_lock_s_commit(tmp_path: Path) -> None:
    lock = dict(LOCK, stages={**LOCK["stages"]})
    lock["stages"]["prepare@d-m"] = {**LOCK["stages"]["prepare@d-m"],
                                     "params": {"provenance.yaml": {"fingerprints.prepare": "p1"}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "add", "dvc.lock"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "lock"]):
        subprocess.run(cmd, cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    stale = stale_stages(tmp_path, {"prepare": "p1", "chain": {"g": "g2"}})
    assert [(s.name, s.key, s.revision) for s in stale] == [("recursive@d-m-g-0", "fingerprints.chain.g", head)]
    assert stale_stages(tmp_path, {"prepare": "p2", "chain": {"g": "g2"}})[1].name == "prepare@d-m"


def test_a_scratch_study_of_the_official_baseline_runs_without_its_plain_random_chain() -> None:
    """`fidelity: official` measures against the plain ROAR random chain, which a sample project need not
    have: the scratch params fall back to the Recursive ROAR random curve, which every schema accepts."""
    params = {"study": {**PARAMS["study"], "measures": ["random", "g"], "roar_measures": ["random"],
                        "racu_baseline": "plain-random"}}
    project = plan_samples([chain(Path("/p"), "g", 0)], lambda study: params)[0][0]
    study = scratch_params(params, project)["study"]
    assert (study["measures"], study["roar_measures"], study["racu_baseline"]) == (["random", "g"], [], "recursive-random")
    assert study["seeds"] == [0] and study["steps"] == [10]


def test_a_sample_runs_the_study_s_settings_at_a_sample_size_unless_full_size() -> None:
    params = {"study": PARAMS["study"], "prepare": {"d": {"n_train": 10_000, "seed": 3}, "e": {"n_train": 5}},
              "train": {"m": {"d": {"epochs": 100, "patience": None, "lr": 0.1}}}}
    project = plan_samples([chain(Path("/p"), "g", 0)], lambda study: params)[0][0]
    cut = scratch_params(params, project)
    assert cut["prepare"]["d"] == {"n_train": 10_000, "seed": 3, "limit": SAMPLE_ROWS}
    assert cut["prepare"]["e"] == {"n_train": 5}  # other datasets as they were
    assert cut["train"]["m"]["d"] == {"epochs": SAMPLE_EPOCHS, "patience": None, "lr": 0.1}
    assert params["train"]["m"]["d"]["epochs"] == 100  # the study's params are not changed
    small = {**params, "prepare": {"d": {"limit": 50}}, "train": {"m": {"d": {"epochs": 1}}}}
    assert scratch_params(small, project)["prepare"]["d"]["limit"] == 50  # a smaller study stays as it is
    assert scratch_params(small, project)["train"]["m"]["d"]["epochs"] == 1
    full = scratch_params(params, project, full_size=True)
    assert full["prepare"] == params["prepare"] and full["train"] == params["train"]
