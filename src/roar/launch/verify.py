"""Prove that a code change did not move a study's outputs, instead of recomputing every step.

When a stage kind's fingerprint in ``provenance.yaml`` differs from the one a study's ``dvc.lock``
recorded (or the lock predates fingerprints), :func:`verify_code_change`:

1. finds those stale stages in every study (the root and ``studies/*``), each with the fingerprint
   its lock recorded and the commit whose code had that fingerprint (the lock's own commit, else the
   newest commit whose ``provenance.yaml`` holds it);
2. plans one scratch project per study, dataset, model and old commit: the study's own settings at
   a sample size (``SAMPLE_ROWS`` examples per split, at most ``SAMPLE_EPOCHS`` epochs per training),
   one seed, the first masking step of every stale chain; so a paper-scale study is sampled as
   cheaply as a quick one, and each study's options (fidelity, target, masked training, ...) are
   exercised by a sample of its own;
3. runs each project from scratch twice, beside each other, in scratch folders: once under the code
   of that commit (a detached git worktree) and once under the working tree's code. Each scratch
   project runs the stage commands (prepare, the k = 0 model, the sample chains cut to their first
   step; a study's first project also the k = 100 model and the report), so the verifier relies
   only on those commands, not on library APIs that may have moved;
4. compares every data and model file byte for byte (CPU runs are deterministic), the step records'
   computed fields, and the report's tables;
5. re-keys, in each ``dvc.lock``, the stale stages whose project matched for their key (their code
   fingerprint param, the code file dependencies of older locks dropped), so a change that moves one
   model family's outputs leaves only that family's stages stale. A change is logged in
   ``provenance.yaml`` (where a chain's step store honours it for reuse) for a key whose samples
   matched in every study, or, scoped with ``models``, for the model families whose samples all matched
   when the others' differed; stages that did not match stay stale: ``dvc repro`` recomputes them.
"""

from __future__ import annotations

import filecmp
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from roar.config.catalog import RACU_BASELINES
from roar.core.errors import RoarError
from roar.config.study_folders import study_folders
from roar.pipeline.provenance import (PROVENANCE_FILE, STAGE_KINDS, fingerprint_key, lookup, read_provenance,
                                      write_provenance)

# Runs a project's stage commands one after another in one process (imports paid once), under the
# library on PYTHONPATH; the commands come as a JSON list of argument lists.
RUN_COMMANDS = """
import json, sys, time
from roar.cli import app
for argv in json.loads(sys.argv[1]):
    start = time.perf_counter()
    code = app(argv, prog_name="roar", standalone_mode=False)
    if code:
        sys.exit(f"roar {' '.join(argv)}: exit {code}")
    print(f"roar {' '.join(argv)}: ok ({time.perf_counter() - start:.0f} s)", flush=True)
"""
# Step-record fields that say how a run went, not what it computed.
RUN_FIELDS = ("run_id", "git_commit", "seconds", "step_key", "code_fingerprint", "libraries", "_path")
# Report tables that hold run times.
TIMED_TABLES = ("compute",)
# A sample project's size: examples kept per split (``prepare.<dataset>.limit``) and the most epochs per
# training. The code paths are the study's; only its loops are shorter.
SAMPLE_ROWS = 120
SAMPLE_EPOCHS = 2
# Every sample project runs the Recursive ROAR random chain: its report's RACU baseline (``scratch_params``).
BASELINE = ("random", True)


@dataclass(frozen=True)
class StaleStage:
    """A locked stage whose code fingerprint is not the current one."""

    study: Path  # the study folder (the project root for the default study)
    name: str  # its dvc.lock name, e.g. ``recursive@babi-1-bilstm-attention-gradient-0``
    key: str  # its provenance key, e.g. ``fingerprints.chain.gradient``
    argv: tuple[str, ...]  # the roar command it ran, without ``roar``
    revision: str  # the commit its dvc.lock was last committed at
    locked: str | None = None  # the fingerprint its lock recorded (None: a lock from before fingerprints)

    @property
    def target(self) -> tuple[str, str] | None:
        """(dataset, model) of the stage; None for the report, which covers the whole study."""
        return None if self.argv[0] == "report" else _stage_target(self.argv)


@dataclass
class ScratchProject:
    """One scratch study: a dataset and model of one study, a seed, the sample chains, the commit whose
    code it is compared against."""

    study: Path
    name: str  # the study's name (params.yaml)
    revision: str
    dataset: str
    model: str
    seed: int
    first_step: int
    chains: list[tuple[str, bool]] = field(default_factory=list)  # (measure, recursive)
    keys: set[str] = field(default_factory=set)
    report: bool = True  # also the k = 100 model and the report (once per study and old commit)

    @property
    def label(self) -> str:
        return f"{self.name}-{self.dataset}-{self.model}-s{self.seed}-{self.revision[:7]}"


def _lock_revision(root: Path, lock: Path) -> str:
    out = subprocess.run(["git", "log", "-1", "--format=%H", "--", str(lock.relative_to(root))], cwd=root,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not out:
        raise RoarError(f"{lock} was never committed; verification compares against the code it was made with")
    return out


def _stage_target(argv: tuple[str, ...]) -> tuple[str, str]:
    """(dataset, model) of a locked stage's roar command."""
    if argv[0] == "prepare":
        return argv[1], argv[argv.index("--model") + 1] if "--model" in argv else "bilstm-attention"
    return argv[1], argv[2]


def stale_stages(root: Path, fingerprints: dict) -> list[StaleStage]:
    """Every locked stage of every study whose recorded code fingerprint differs from ``fingerprints``."""
    import yaml

    stale = []
    for study in [root, *study_folders(root)]:
        lock = study / "dvc.lock"
        if not lock.is_file():
            continue
        revision = None
        for name, entry in (yaml.safe_load(lock.read_text()).get("stages") or {}).items():
            template = name.partition("@")[0]
            if template not in STAGE_KINDS:
                continue
            argv = tuple(shlex.split(entry["cmd"]))[1:]
            key = fingerprint_key(template, argv[3] if STAGE_KINDS[template] == "chain" else None)
            locked = next((values.get(key) for path, values in (entry.get("params") or {}).items()
                           if Path(path).name == PROVENANCE_FILE), None)
            if locked != lookup(fingerprints, key):
                revision = revision or _lock_revision(root, lock)
                stale.append(StaleStage(study, name, key, argv, revision, locked))
    return stale


def code_revision(root: Path, stage: StaleStage, fingerprints_at: Callable[[str], dict]) -> str | None:
    """The commit whose code made ``stage``: its lock's commit when that commit's fingerprint for the stage's
    key is the one the lock recorded (or the lock recorded none), else the newest commit whose
    ``provenance.yaml`` holds that fingerprint; None when no commit does (the stage cannot be verified).
    ``fingerprints_at(commit)``: that commit's ``provenance.yaml`` fingerprints."""
    if stage.locked is None or lookup(fingerprints_at(stage.revision), stage.key) == stage.locked:
        return stage.revision
    commits = _git(root, "log", "--format=%H", f"{stage.revision}", "--", PROVENANCE_FILE).split()
    return next((c for c in commits if lookup(fingerprints_at(c), stage.key) == stage.locked), None)


def committed_fingerprints(root: Path) -> Callable[[str], dict]:
    """``commit -> the fingerprints of its provenance.yaml`` (empty where it has none), read once per commit."""
    import yaml

    cache: dict[str, dict] = {}

    def at(commit: str) -> dict:
        if commit not in cache:
            shown = subprocess.run(["git", "show", f"{commit}:{PROVENANCE_FILE}"], cwd=root, capture_output=True,
                                   text=True)
            cache[commit] = ((yaml.safe_load(shown.stdout) or {}).get("fingerprints") or {}) if not shown.returncode \
                else {}
        return cache[commit]
    return at


def plan_samples(stale: list[StaleStage], study_params: Callable[[Path], dict],
                 revision_of: Callable[[StaleStage], str | None] = lambda stage: stage.revision
                 ) -> tuple[list[ScratchProject], dict[StaleStage, ScratchProject]]:
    """One scratch project per (study, dataset, model, old commit) with stale stages, and the project that
    samples each stale stage. A project runs the study's lowest stale seed (else its first) and the first
    step of every stale chain (measure and mode) of its dataset and model, whichever seed the stale stage
    has, and of the Recursive ROAR random chain (its report's baseline); prepare and the reference models are in every project, the report and the k = 100 model in the
    first project of each study and commit. ``revision_of``: the commit whose code made a stage
    (:func:`code_revision`); a stage without one gets no project."""
    projects: dict[tuple, ScratchProject] = {}
    sampled: dict[StaleStage, ScratchProject] = {}
    reporting: set[tuple[Path, str]] = set()
    ordered = sorted(stale, key=lambda s: (str(s.study), s.argv[0] != "chain", int(s.argv[4]) if s.argv[0] == "chain"
                                           else 0))
    for stage in ordered:
        revision = revision_of(stage)
        if revision is None:
            continue
        study = study_params(stage.study)["study"]
        dataset, model = stage.target or (study["datasets"][0], study["models"][0])
        if stage.target is None:  # the report: any project of the study at that commit samples it
            project = next((p for p in projects.values() if (p.study, p.revision) == (stage.study, revision)), None)
        else:
            project = None
        if project is None:
            seed = int(stage.argv[4]) if stage.argv[0] == "chain" else int(study["seeds"][0])
            project = projects.setdefault((stage.study, dataset, model, revision), ScratchProject(
                stage.study, study["name"], revision, dataset, model, seed, int(study["steps"][0]), report=False))
        if stage.argv[0] == "chain":
            chain = (stage.argv[3], "--recursive" in stage.argv)
            if chain not in project.chains:
                project.chains.append(chain)
        project.keys.add(stage.key)
        sampled[stage] = project
    for project in projects.values():
        if BASELINE not in project.chains:  # the scratch report's baseline; a schema may refuse no recursive chain
            project.chains.insert(0, BASELINE)
        project.report = (project.study, project.revision) not in reporting
        reporting.add((project.study, project.revision))
        project.keys |= {"fingerprints.prepare", "fingerprints.train"} | (
            {"fingerprints.report"} if project.report else set())
    return list(projects.values()), sampled


def scratch_params(params: dict, project: ScratchProject, full_size: bool = False) -> dict:
    """The study's params cut to the project: one dataset, model and seed, the first step, the sample
    chains, one torch thread (old and new code run beside each other), and unless ``full_size``, at most
    ``SAMPLE_ROWS`` examples per split and ``SAMPLE_EPOCHS`` epochs. The RACU baseline goes back to the
    Recursive ROAR random curve: the plain one needs a plain random chain that the samples may not have."""
    from roar.config.train_config import TrainConfig

    study = dict(params["study"])
    study.update(datasets=[project.dataset], models=[project.model], seeds=[project.seed],
                 steps=[project.first_step],
                 measures=[m for m, recursive in project.chains if recursive],
                 roar_measures=[m for m, recursive in project.chains if not recursive],
                 racu_baseline=RACU_BASELINES[0])
    cut = {**params, "study": study, "runtime": {**(params.get("runtime") or {}), "threads": 1}}
    if not full_size:
        prepare = dict((params.get("prepare") or {}).get(project.dataset) or {})
        prepare["limit"] = min(prepare.get("limit") or SAMPLE_ROWS, SAMPLE_ROWS)
        train = dict(((params.get("train") or {}).get(project.model) or {}).get(project.dataset) or {})
        train["epochs"] = min(int(train.get("epochs", TrainConfig.epochs)), SAMPLE_EPOCHS)
        cut["prepare"] = {**(params.get("prepare") or {}), project.dataset: prepare}
        cut["train"] = {**(params.get("train") or {}),
                        project.model: {**((params.get("train") or {}).get(project.model) or {}), project.dataset: train}}
    return cut


def _commands(project: ScratchProject) -> list[list[str]]:
    d, m, s = project.dataset, project.model, str(project.seed)
    commands = [["prepare", d, "--model", m], ["train-reference", d, m, s, "--which", "k0", "--no-progress"]]
    commands += [["chain", d, m, measure, s, "--recursive" if recursive else "--roar", "--skip-unsupported",
                  "--no-progress"] for measure, recursive in project.chains]
    if project.report:
        commands += [["train-reference", d, m, s, "--which", "all", "--no-progress"], ["report"]]
    return commands


def run_project(project: ScratchProject, params: dict, code: Path, folder: Path, log: Callable[[str], None],
                full_size: bool = False) -> None:
    """Run the scratch project in ``folder`` under the library at ``code`` (a ``src`` folder), through the
    stage commands, with a tracking store of its own."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(scratch_params(params, project, full_size), sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(code), "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
           "ROAR_STUDY_RUN_ID": ""}
    done = subprocess.run([sys.executable, "-c", RUN_COMMANDS, json.dumps(_commands(project))], cwd=folder, env=env,
                          capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("roar "):
            log(f"  {project.label} [{code.parent.name}] {line}")
    if done.returncode:
        lines = done.stderr.strip().splitlines() or [""]
        why = next((line for line in reversed(lines) if line.startswith("error:")), None)  # roar's one-line error
        raise RoarError(f"{project.label}: a stage command under {code} failed (exit {done.returncode}): "
                        + "; ".join(dict.fromkeys(filter(None, (lines[-1], why)))))


def _computed(record: object) -> object:
    """A step record's fields that the computation determines, at every depth (not run ids, times or
    code keys: a no-retrain score holds its seconds too)."""
    if isinstance(record, dict):
        return {k: _computed(v) for k, v in record.items() if not any(tag in k for tag in RUN_FIELDS)}
    return record


def compare_projects(old: Path, new: Path) -> tuple[int, list[str]]:
    """Compare two runs of one scratch project: data and model files byte for byte, the step records'
    computed fields, the report's tables (all but run times). Returns (files compared, differences)."""
    compared, differences = 0, []
    for part in ("data", "models"):
        old_files = {p.relative_to(old) for p in (old / part).rglob("*") if p.is_file()}
        new_files = {p.relative_to(new) for p in (new / part).rglob("*") if p.is_file()}
        differences += [f"{rel}: only in the {'old' if rel in old_files else 'new'} code's run"
                        for rel in sorted(old_files ^ new_files)]
        for rel in sorted(old_files & new_files):
            compared += 1
            if not filecmp.cmp(old / rel, new / rel, shallow=False):
                differences.append(f"{rel}: bytes differ")
    for record in sorted(p.relative_to(old) for p in (old / "results").rglob("*.json")):
        compared += 1
        other = new / record
        if not other.is_file() or _computed(json.loads((old / record).read_text())) != _computed(
                json.loads(other.read_text())):
            differences.append(f"{record}: computed fields differ")
    for table in sorted(p.relative_to(old) for p in (old / "reports").glob("*.csv")):
        if any(tag in table.name for tag in TIMED_TABLES):
            continue
        compared += 1
        if not (new / table).is_file() or not filecmp.cmp(old / table, new / table, shallow=False):
            differences.append(f"{table}: differs")
    return compared, differences


def owner(difference: str) -> str:
    """The fingerprint key whose stage writes the file a difference names (``data/prepared/...: bytes
    differ`` -> ``fingerprints.prepare``): a difference only refuses the code that made that file."""
    path = Path(difference.partition(":")[0])
    parts = path.parts
    if parts[0] == "reports":
        return "fingerprints.report"
    if parts[:2] == ("data", "prepared") or (parts[:2] == ("data", "masked") and parts[4:5] == ("all",)):
        return "fingerprints.prepare"
    slot = parts[4] if parts[0] == "data" else parts[3]  # data/masked/<d>/<m>/<measure>, models/<d>/<m>/<measure>
    return "fingerprints.train" if slot in ("k0", "all") else f"fingerprints.chain.{slot}"


def verified_models(stages: list[StaleStage], matched: set[StaleStage]) -> list[str] | None:
    """The model families for which one code change (one key, one old fingerprint; ``stages`` locked with it
    in every study) may be logged as computing the same: None for every family, when every stage's sample
    matched; else the families none of whose samples differed (a change that moved one family's outputs,
    such as a transformer's saved config, leaves the others' equivalence true); [] when none may be logged
    (no family qualifies, or a study-wide stage, the report, differed)."""
    differed = [stage for stage in stages if stage not in matched]
    if not differed:
        return None
    if any(stage.target is None for stage in differed):
        return []
    moved = {stage.target[1] for stage in differed}
    return sorted({stage.target[1] for stage in stages if stage.target} - moved)


def rekey_lock(lock: Path, keys: dict[str, str], stage_names: set[str], provenance_path: str) -> int:
    """Set the code fingerprint param of ``stage_names`` in ``lock`` to ``keys[their key]`` and drop the
    source-file dependencies that older locks recorded (the fingerprint replaces them). Returns the
    number of stages changed."""
    from dvc.utils.serialize import modify_yaml

    changed = 0
    with modify_yaml(lock) as data:
        for name, entry in data["stages"].items():
            if name not in stage_names:
                continue
            template = name.partition("@")[0]
            key = fingerprint_key(template, shlex.split(entry["cmd"])[4] if STAGE_KINDS[template] == "chain"
                                  else None)
            deps = [d for d in entry.get("deps", []) if "src/roar" not in d["path"]]
            if deps:
                entry["deps"] = deps
            else:
                entry.pop("deps", None)
            params = entry.setdefault("params", {})
            params[provenance_path] = {key: keys[key]}
            changed += 1
    return changed


# Run under a commit's code: the fingerprints its step records carry (code from before provenance.yaml
# fingerprinted only the chain, per measure, in roar.provenance).
REVISION_FINGERPRINTS = """
import json
try:
    from roar.pipeline.provenance import code_fingerprints
    print(json.dumps(code_fingerprints()))
except ImportError:
    from roar.provenance import chain_code_fingerprint
    from roar.registry import MEASURES, measure_module
    print(json.dumps({"chain": {m: chain_code_fingerprint(measure_module(m)) for m in MEASURES}}))
"""


@dataclass
class Verification:
    """What :func:`verify_code_change` found: keys verified in every study, or for some model families (with
    the log entries written), keys whose samples differed somewhere (with the differences), the stages
    re-keyed per study, and the stale stages left as they were (with why)."""

    verified: list[dict] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)
    rekeyed: dict[str, int] = field(default_factory=dict)
    stale: int = 0
    left: dict[str, str] = field(default_factory=dict)  # "<study>: <stage>" -> why it stays stale


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def _run_projects(root: Path, projects: list[ScratchProject], scratch: Path, log: Callable[[str], None],
                  workers: int, full_size: bool) -> tuple[dict[str, dict], dict[str, tuple[int, list[str], str | None]]]:
    """Run every project under its old commit's code and under the working tree's; returns each old commit's
    fingerprints (computed by its own code) and each project's (files compared, differences, why it could
    not be compared or None)."""
    from roar.config.params import load_params

    code = {rev: scratch / f"code-{rev[:12]}" for rev in {p.revision for p in projects}}
    try:
        for rev, path in code.items():
            _git(root, "worktree", "add", "--detach", "--quiet", str(path), rev)
        old_fps = {rev: json.loads(subprocess.run(
            [sys.executable, "-c", REVISION_FINGERPRINTS], cwd=path, capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONPATH": str(path / "src")}).stdout) for rev, path in code.items()}
        jobs = [(p, src, scratch / which / p.label) for p in projects
                for which, src in (("old", code[p.revision] / "src"), ("new", root / "src"))]
        failed: dict[str, str] = {}
        with ThreadPoolExecutor(workers) as pool:
            futures = [(p, pool.submit(run_project, p, load_params(p.study / "params.yaml"), src, folder, log,
                                       full_size)) for p, src, folder in jobs]
            for project, future in futures:
                try:
                    future.result()
                except RoarError as error:  # e.g. an old commit's schema refusing today's params
                    log(f"{project.label}: {error}")
                    failed.setdefault(project.label, f"its sample failed to run ({error})")
        outcome = {}
        for project in projects:
            if project.label in failed:
                outcome[project.label] = (0, [], failed[project.label])
                continue
            compared, differences = compare_projects(scratch / "old" / project.label, scratch / "new" / project.label)
            log(f"{project.label}: {compared} files compared, {len(differences)} differ")
            outcome[project.label] = (compared, differences, None)
    finally:
        for path in code.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=root, capture_output=True)
    return old_fps, outcome


def verify_code_change(root: Path, log: Callable[[str], None] = print, workers: int = 2,
                       full_size: bool = False) -> Verification:
    """Bring every study's ``dvc.lock`` up to date with the working tree's code where sample steps prove
    that the outputs are unchanged (module docstring); returns what it found. ``full_size``: run the samples
    at their studies' own sizes instead of ``SAMPLE_ROWS`` and ``SAMPLE_EPOCHS``."""
    from roar.config.params import load_params

    root = root.resolve()
    fingerprints = write_provenance(root)["fingerprints"]
    stale = stale_stages(root, fingerprints)
    result = Verification(stale=len(stale))
    if not stale:
        log("every study's dvc.lock holds the current code's fingerprints: nothing to verify")
        return result
    fingerprints_at = committed_fingerprints(root)
    revisions = {stage: code_revision(root, stage, fingerprints_at) for stage in stale}
    projects, sampled = plan_samples(stale, lambda study: load_params(study / "params.yaml"), revisions.get)
    log(f"{len(stale)} locked stages were made by other code; sampling {sum(len(p.chains) for p in projects)} "
        f"chain steps in {len(projects)} scratch projects, each under the old and the new code"
        + ("" if full_size else f" ({SAMPLE_ROWS} examples per split, at most {SAMPLE_EPOCHS} epochs)"))
    scratch = Path(tempfile.mkdtemp(prefix="roar-verify-"))
    old_fps, outcome = _run_projects(root, projects, scratch, log, workers, full_size) if projects else ({}, {})
    head = _git(root, "rev-parse", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--", "src"))
    matched: set[StaleStage] = set()
    for stage in stale:
        where = f"{stage.study.relative_to(root).as_posix()}: {stage.name}"
        project = sampled.get(stage)
        if project is None:
            result.left[where] = (f"no commit's provenance.yaml holds its locked code fingerprint "
                                  f"{(stage.locked or '')[:12]}")
            continue
        _, found, broken = outcome[project.label]
        differences = [f"{project.label}: {d}" for d in found if owner(d) == stage.key]
        if broken:
            result.left[where] = broken
        elif differences:
            result.failed.setdefault(stage.key, [])
            result.failed[stage.key] += [d for d in differences if d not in result.failed[stage.key]]
            result.left[where] = f"its sample {project.label} computed other outputs"
        else:
            matched.add(stage)
    by_change: dict[tuple[str, str], list[StaleStage]] = {}
    for stage in stale:
        if stage in sampled:
            old = stage.locked or lookup(old_fps[sampled[stage].revision], stage.key)
            by_change.setdefault((stage.key, old), []).append(stage)
    for (key, old), stages in sorted(by_change.items()):
        models = verified_models(stages, matched)
        if models == []:
            continue
        in_scope = [s for s in stages if models is None or (s.target and s.target[1] in models)]
        sample = sampled[in_scope[0]]
        chain = next((f"{m} ({'recursive' if r else 'roar'})" for m, r in sample.chains if key.endswith(f".{m}")),
                     "prepare, the k = 0 and k = 100 models, the report")
        result.verified.append({
            "key": key, "from": old, "to": lookup(fingerprints, key),
            "from_revision": sample.revision[:12], "to_revision": head[:12] + (" + working tree" if dirty else ""),
            "sample": f"{sample.label} k={sample.first_step}: {chain}"
                      + ("" if full_size else f" ({SAMPLE_ROWS} examples per split, {SAMPLE_EPOCHS} epochs)"),
            "files_identical": outcome[sample.label][0],
            "studies": len({s.study for s in in_scope}), **({} if models is None else {"models": models})})
    for study in sorted({s.study for s in matched}):
        names = {s.name for s in matched if s.study == study}
        path = Path(os.path.relpath(root / PROVENANCE_FILE, study)).as_posix()
        result.rekeyed[str(study.relative_to(root))] = rekey_lock(
            study / "dvc.lock", {s.key: lookup(fingerprints, s.key) for s in stale}, names, path)
    write_provenance(root, (read_provenance(root).get("verified") or []) + result.verified)
    if result.left:
        log(f"the scratch runs stay in {scratch} to compare")
    else:
        shutil.rmtree(scratch)
    return result
