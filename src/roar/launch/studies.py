"""Study folders: several studies side by side in one DVC project.

The embedded default study is the project root's ``params.yaml`` + ``dvc.yaml``. Every other study
is a folder ``studies/<name>/`` with its own ``params.yaml`` and a ``dvc.yaml`` generated from the
root's by :func:`study_dvc_yaml` (DVC reads a ``dvc.yaml``'s params and runs its commands in the
``dvc.yaml``'s folder, and has no way to include another file's stages), so the stage templates
are written once. The stages run inside the folder: its ``data/``, ``models/``, ``results/`` and
``reports/`` are its own, while the DVC cache, the remote and the MLflow store are the project's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from roar.core.errors import RoarError
from roar.core.fileio import write_text_atomic
from roar.launch.pending import lacks_records
from roar.config.layout import STUDIES, project_root
from roar.config.study_folders import study_folders

DEFAULT = "default"  # the name of the study at the project root
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
K0_STAGE = "train_k0"  # the stage template whose model output study.k0_models places
HEADER = ("# Generated from the project's dvc.yaml by `roar study sync`: edit that one, then run `roar study sync`.\n"
          "# This study's grid and hyperparameters are in params.yaml beside this file.\n")


def study_dvc_yaml(top: str, up: str = "../..", k0_models: str = "dvc") -> str:
    """The ``dvc.yaml`` text of a study folder ``up`` levels below the root, from the root's ``dvc.yaml`` text:
    the same stages, metrics and plots, with the code fingerprints' file (the project's ``provenance.yaml``)
    made relative to the folder, and with ``k0_models: git`` (``study.k0_models``) the k = 0 models as
    ``cache: false`` outputs, which git carries with the step records."""
    import yaml

    from roar.pipeline.provenance import PROVENANCE_FILE

    pipeline = yaml.safe_load(top)
    for stage in (pipeline.get("stages") or {}).values():
        stage["params"] = [{f"{up}/{PROVENANCE_FILE}": item[PROVENANCE_FILE]}
                           if isinstance(item, dict) and PROVENANCE_FILE in item else item
                           for item in stage.get("params", [])]
    if k0_models == "git":
        k0 = pipeline["stages"][K0_STAGE]
        k0["outs"] = [{out: {"cache": False}} if isinstance(out, str) and out.startswith("models/") else out
                      for out in k0["outs"]]
    return HEADER + yaml.safe_dump(pipeline, sort_keys=False, width=120)


def k0_model_store(folder: Path) -> str:
    """``study.k0_models`` of the study in ``folder`` as written (``dvc`` when absent or unreadable: the
    schema check of ``roar validate`` and every command names a wrong value)."""
    import yaml

    try:
        study = (yaml.safe_load((Path(folder) / "params.yaml").read_text(encoding="utf-8")) or {}).get("study")
    except (OSError, yaml.YAMLError, AttributeError):
        return "dvc"
    return study.get("k0_models", "dvc") if isinstance(study, dict) else "dvc"


def study_names(root: Path = Path(".")) -> list[str]:
    return [DEFAULT] + [p.name for p in study_folders(root)]


def _expected(root: Path, folder: Path) -> str:
    up = Path(os.path.relpath(root, folder)).as_posix()
    return study_dvc_yaml((root / "dvc.yaml").read_text(encoding="utf-8"), up, k0_model_store(folder))


def stale_studies(root: Path = Path(".")) -> list[Path]:
    """The study folders whose ``dvc.yaml`` is missing or differs from what the root's ``dvc.yaml`` generates."""
    root = Path(root)
    return [folder for folder in study_folders(root)
            if not (folder / "dvc.yaml").is_file()
            or (folder / "dvc.yaml").read_text(encoding="utf-8") != _expected(root, folder)]


def sync_studies(root: Path = Path(".")) -> list[Path]:
    """Regenerate every stale study ``dvc.yaml`` from the root's; returns the folders written."""
    root = Path(root)
    stale = stale_studies(root)
    for folder in stale:
        write_text_atomic(folder / "dvc.yaml", _expected(root, folder))
    return stale


def new_study(name: str, source: Path, root: Path = Path(".")) -> Path:
    """Create ``studies/<name>/`` with a copy of the params file ``source`` (checked first, comments kept)
    and its generated ``dvc.yaml``; returns the folder."""
    from roar.config.params import load_params

    root = Path(root)
    if name == DEFAULT or not NAME.fullmatch(name):
        raise RoarError(f"study name {name!r} not allowed; use lower-case letters, digits, '.', '_' and '-' "
                        f"(starting with a letter or digit), not {DEFAULT!r}")
    folder = root / STUDIES / name
    if folder.exists():
        raise RoarError(f"study folder {folder} exists; pick another name or edit its params.yaml")
    if not (root / "dvc.yaml").is_file():
        raise FileNotFoundError(f"dvc.yaml not found in {root.resolve()}; run `roar study new` from the project root")
    load_params(source)
    folder.mkdir(parents=True)
    write_text_atomic(folder / "params.yaml", Path(source).read_text(encoding="utf-8"))
    write_text_atomic(folder / "dvc.yaml", _expected(root, folder))
    return folder


def resolve_study(name: str | None, cwd: Path = Path(".")) -> Path:
    """The folder that runs study ``name`` (``default``: the project root); ``None``: ``cwd`` itself.
    A study folder must hold a ``params.yaml`` and an up-to-date ``dvc.yaml``."""
    cwd = Path(cwd)
    if name is None:
        folder = cwd
    else:
        root = project_root(cwd)
        folder = root if name == DEFAULT else root / STUDIES / name
        if not (folder / "params.yaml").is_file():
            raise RoarError(f"study {name!r} not found ({folder / 'params.yaml'} missing); studies: "
                            f"{', '.join(study_names(root))}; create one with `roar study new NAME --from FILE`")
    if not (folder / "dvc.yaml").is_file():
        raise FileNotFoundError(f"dvc.yaml not found in {folder}; run from the project root or a study folder, "
                                "or pass --study NAME")
    root = project_root(folder)
    if folder.resolve() == root.resolve() and k0_model_store(folder) == "git":
        raise RoarError(f"study.k0_models = 'git' in {folder / 'params.yaml'} applies to study folders "
                        "(`roar study new`), whose dvc.yaml roar generates; the project's own dvc.yaml is the "
                        "template: remove the key, or run the study in a folder of its own")
    if folder.resolve() != root and folder.resolve() in {p.resolve() for p in stale_studies(root)}:
        raise RoarError(f"{folder / 'dvc.yaml'} differs from what the project's dvc.yaml generates; "
                        "run `roar study sync` (then commit it)")
    return folder


# ``roar study status``: one line per study, from ``dvc status`` of its own dvc.yaml.
UP_TO_DATE = "up to date"
NOT_RUN = "not run here"
STALE = "stale"
BUSY = "busy"  # a DVC command (a running pipeline) holds the project's lock


@dataclass(frozen=True)
class StudyStatus:
    """A study's state (:data:`UP_TO_DATE`, :data:`NOT_RUN`, :data:`STALE`, :data:`BUSY`), why, and what to do
    about it."""

    name: str
    folder: str  # relative to the project root
    state: str
    why: str = ""
    todo: str = ""

    def line(self, width: int = 28) -> str:
        text = f"{self.name:<{width}} {self.state}"
        return text + "".join(f": {part}" if i == 0 else f"; {part}" for i, part in enumerate(
            p for p in (self.why, self.todo) if p))


def _made_here(path: str, lock: dict) -> bool:
    """Whether ``path`` is (or holds) an output of a stage of this dvc.lock: a missing upstream output, not an
    input of its own."""
    outs = [out["path"] for stage in (lock.get("stages") or {}).values() for out in stage.get("outs", [])]
    return any(out == path or out.startswith(path.rstrip("/") + "/") for out in outs)


def _why_stale(status: dict, lock: dict) -> list[str]:
    """Why stages are stale (from ``dvc status``): changed code fingerprints, params, commands or input data;
    [] when only outputs (and the inputs other stages make from them) are missing."""
    from roar.pipeline.provenance import PROVENANCE_FILE

    code, params, other, unlocked = set(), set(), set(), []
    for stage, changes in status.items():
        if stage not in (lock.get("stages") or {}):
            unlocked.append(stage)
            continue
        for change in changes:
            if not isinstance(change, dict):
                other.add(f"{stage}: {change}")
                continue
            if "changed command" in change:
                other.add(f"the command of {stage} changed")
            for path, state in (change.get("changed deps") or {}).items():
                is_code = Path(path).name == PROVENANCE_FILE
                if isinstance(state, dict):  # a params file: {key: modified | new | deleted}
                    (code if is_code else params).update(key.removeprefix("fingerprints.") for key in state)
                elif state == "new" and is_code:
                    other.add("dvc.lock records no code fingerprints (it predates provenance.yaml; "
                              "`roar provenance verify` proves the code computes the same, or `roar pipeline` reruns)")
                elif state == "new" and Path(path).suffix == ".yaml":  # a params file dvc.lock does not name
                    params.add(f"{path} (not in dvc.lock)")
                elif state == "modified" and not _made_here(path, lock):
                    other.add(f"input {path} changed")
    reasons = []
    if code:
        reasons.append(f"code of {', '.join(sorted(code))} changed (`roar provenance verify` proves it "
                       "computes the same, or `roar pipeline` reruns)")
    if params:
        reasons.append(f"params changed: {', '.join(sorted(params))}")
    if unlocked:  # one clause, not one per stage: a study run in pieces has dozens
        reasons.append(f"{len(unlocked)} stage(s) not in dvc.lock, e.g. {min(unlocked)} (not run yet: a study run "
                       "in pieces, or a grid that grew; `roar pipeline` runs them)")
    return reasons + sorted(other)


def _records_missing(repo, lock: dict) -> list[str]:
    """A clause naming the locked stages whose uncached outputs (step records, reports: what git carries) are
    absent: no remote can restore them, only recomputing can (studies run before records travelled with git)."""
    locked = lock.get("stages") or {}
    lost = sorted(stage.addressing for stage in repo.index.stages
                  if stage.dvcfile.relpath == "dvc.yaml" and stage.addressing in locked and lacks_records(stage))
    if not lost:
        return []
    return [f"{len(lost)} stage(s) lack their step records, which git should carry, e.g. {lost[0]} (made before "
            "records were committed, or deleted): no DVC pull restores them; `roar pipeline` recomputes them"]


def _missing_outputs(status: dict) -> dict[str, str]:
    """The outputs ``dvc status`` reports absent: path -> ``not in cache`` or ``deleted`` (in the cache)."""
    return {path: state for changes in status.values() for change in changes if isinstance(change, dict)
            for path, state in (change.get("changed outs") or {}).items() if state in ("not in cache", "deleted")}


def _remote(repo) -> str | None:
    """The default remote's URL, None when there is none."""
    name = repo.config["core"].get("remote")
    return (repo.config["remote"].get(name) or {}).get("url") if name else None


@contextlib.contextmanager
def dvc_warnings_off() -> Iterator[None]:
    """DVC's warnings off (per-file notes on missing outputs, per-stage changes): the caller says what matters once."""
    logger = logging.getLogger("dvc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _absent_from_remote(repo) -> bool:
    """Whether the default remote lacks a cached output of ``dvc.yaml`` outright. DVC's cloud status only warns
    about a directory output whose listing (``.dir``) is nowhere and leaves it out of its answer, so a remote
    without any of a study's outputs would read as holding them all."""
    remote = repo.cloud.get_remote_odb()
    return any(not remote.exists(out.hash_info.value) for stage in repo.stage.collect("dvc.yaml")
               for out in stage.outs if out.use_cache and out.hash_info and out.hash_info.value)


def study_status(root: Path, name: str) -> StudyStatus:
    """The state of study ``name`` of the project at ``root``: up to date, not run here (its outputs are neither
    in the workspace nor in the DVC cache; run or pull it), stale (and why), or busy (a pipeline runs)."""
    import yaml
    from dvc.lock import LockError
    from dvc.rwlock import RWLockFileCorruptedError

    root = Path(root)
    folder = root if name == DEFAULT else root / STUDIES / name
    where = folder.relative_to(root).as_posix()
    run = f"run it with `roar pipeline{'' if name == DEFAULT else f' --study {name}'}`"
    if not (folder / "dvc.lock").is_file():
        return StudyStatus(name, where, NOT_RUN, "no dvc.lock (never run in this project)", run)
    lock = yaml.safe_load((folder / "dvc.lock").read_text(encoding="utf-8")) or {}
    try:
        return _locked_study_status(folder, where, name, lock, run)
    except LockError as error:
        holder = next((line.strip() for line in str(error).splitlines() if line.strip().startswith("(PID")), "")
        return StudyStatus(name, where, BUSY, f"a DVC command holds its lock {holder}".rstrip(),
                           "ask again when it has finished")
    except RWLockFileCorruptedError:
        return StudyStatus(name, where, BUSY, "DVC's lock file .dvc/tmp/rwlock is unreadable (a DVC process was "
                           "killed while writing it)", "`roar pipeline` removes it (or delete it while no DVC "
                           "command runs), then ask again")


def _locked_study_status(folder: Path, where: str, name: str, lock: dict, run: str) -> StudyStatus:
    """:func:`study_status` of a study with a ``dvc.lock``, from ``dvc status`` (which takes DVC's lock)."""
    from dvc.repo import Repo

    with contextlib.chdir(folder), dvc_warnings_off(), Repo(".") as repo:
        status = repo.status(targets=["dvc.yaml"])
        if not status:
            return StudyStatus(name, where, UP_TO_DATE)
        why = _why_stale(status, lock) + _records_missing(repo, lock)
        if why:
            return StudyStatus(name, where, STALE, "; ".join(why))
        missing = _missing_outputs(status)
        pull = f"`dvc pull dvc.yaml`{'' if name == DEFAULT else f' in {where}'}"
        if missing and all(state == "deleted" for state in missing.values()):
            return StudyStatus(name, where, NOT_RUN, "outputs in the DVC cache but not checked out",
                               f"`dvc checkout dvc.yaml`{'' if name == DEFAULT else f' in {where}'}")
        remote = _remote(repo)
        if remote is None:
            return StudyStatus(name, where, NOT_RUN, "outputs neither here nor in the DVC cache, no DVC remote", run)
        if "://" not in remote and not Path(remote).is_dir():
            return StudyStatus(name, where, NOT_RUN, f"outputs neither here nor in the DVC cache; the DVC remote "
                               f"{remote} does not exist here", run)
        try:
            absent = _absent_from_remote(repo) or any(
                state == "missing" for state in repo.status(targets=["dvc.yaml"], cloud=True).values())
        except Exception as error:  # noqa: BLE001 - an unreachable remote (network, credentials) says why
            return StudyStatus(name, where, NOT_RUN, f"outputs neither here nor in the DVC cache; the DVC remote "
                               f"{remote} is not reachable ({str(error).splitlines()[0]})", run)
        if absent:
            return StudyStatus(name, where, NOT_RUN, f"outputs neither here, in the DVC cache nor (all) in the DVC "
                               f"remote {remote}", run)
        return StudyStatus(name, where, NOT_RUN, f"outputs in the DVC remote {remote} only", f"pull them with {pull}")


def study_statuses(root: Path = Path(".")) -> list[StudyStatus]:
    """:func:`study_status` of every study of the project at ``root``."""
    return [study_status(root, name) for name in study_names(root)]
