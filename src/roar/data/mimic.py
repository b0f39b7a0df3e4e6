"""MIMIC-III Diabetes and Anemia (Jain & Wallace 2019), from the user's own credentialed files.

MIMIC-III is never downloaded: ``source`` is the folder with ``NOTEEVENTS.csv.gz`` and
``DIAGNOSES_ICD.csv.gz`` (PhysioNet, credentialed access). The preprocessing follows Jain &
Wallace's code (successar/AttentionExplanation, ``preprocess/MIMIC``) and the paper's
re-implementation of it:

- document: per hospital admission (``HADM_ID``), its discharge summaries (``CATEGORY`` =
  "Discharge summary", not marked ``ISERROR``), reports before addenda, each by ``CHARTDATE``,
  joined by spaces;
- codes: the admission's ICD-9 diagnosis codes, written ``XXX.YY`` (a dot after the third
  character, as J&W do);
- **mimic-anemia**: admissions with a 285.1* code (acute posthemorrhagic anemia) or a 285.2*
  code (anemia of chronic disease: 285.21 kidney, 285.22 neoplastic, 285.29 other) but not
  both; positive = acute (285.1). Split: stratified, seeded 80/20 train/test, then 15 % of train
  (stratified) for validation;
- **mimic-diabetes**: the admissions of the CAML "top-50" split (Mullenbach et al. 2018; files
  ``train_50_hadm_ids.csv``, ``dev_50_hadm_ids.csv``, ``test_50_hadm_ids.csv``, which J&W ship
  and the paper uses: train / validation / test); positive = any 250.00 code (diabetes mellitus
  without complication, type II or unspecified, not stated as uncontrolled);
- text: de-identification placeholders ``[** ... **]`` become ``deid``, runs of one repeated
  non-alphanumeric character become one, lower case, every number-like chunk (a token with a
  digit, e.g. ``2134-12-01``, ``5mg``, ``120/80``) becomes ``qqq``; tokens as
  :func:`roar.data.tokenize.tokenize` (J&W use spaCy's tokenizer, not a dependency here);
- length: J&W keep 6 < tokens < 4000 (diabetes) and tokens < 4000 (anemia).

Documents are long: set ``prepare.<name>.max_length`` (default 512) to 4000 to keep them whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, RawSplits
from roar.data.sources import NEGATIVE, POSITIVE, check_options, missing, source_kind, stratified_split
from roar.data.tokenize import tokenize

NOTES, DIAGNOSES = "NOTEEVENTS", "DIAGNOSES_ICD"
HOW_TO_GET = ("MIMIC-III is credentialed data: get access at https://physionet.org/content/mimiciii/1.4/ "
              "and download NOTEEVENTS.csv.gz and DIAGNOSES_ICD.csv.gz")
CAML_SPLITS = {"train": "train_50_hadm_ids.csv", "val": "dev_50_hadm_ids.csv", "test": "test_50_hadm_ids.csv"}
HOW_TO_GET_CAML = ("get the CAML top-50 split files train_50_hadm_ids.csv, dev_50_hadm_ids.csv, test_50_hadm_ids.csv "
                   "(https://github.com/jamesmullenbach/caml-mimic or "
                   "https://github.com/successar/AttentionExplanation/tree/master/preprocess/MIMIC)")
ACUTE, CHRONIC, DIABETES = "285.1", "285.2", "250.00"
DEID_TOKEN, NUMBER_TOKEN = "deid", "qqq"
OPTIONS = {
    "mimic-anemia": {"min_tokens": 1, "max_tokens": 3999, "test_fraction": 0.2, "val_fraction": 0.15},
    "mimic-diabetes": {"min_tokens": 7, "max_tokens": 3999, "hadm_ids": None},
}
_DEID = re.compile(r"\[\s*\*\s*\*(.*?)\*\s*\*\s*\]", re.DOTALL)
_REPEATS = re.compile(r"([^a-zA-Z0-9])(\s*\1\s*)+")
_NUMBER = re.compile(r"[a-z0-9]*[0-9][a-z0-9]*(?:[./:-][a-z0-9]*[0-9][a-z0-9]*)*")
_DESCRIPTION_ORDER = {"Report": 0, "Addendum": 1}  # others after both


def normalize_icd9(code: str) -> str:
    """MIMIC's dot-less code as J&W write it: ``"2851"`` -> ``"285.1"``, ``"25000"`` -> ``"250.00"``."""
    code = code.strip()
    return code[:3] + "." + code[3:]


def normalize_note(text: str) -> str:
    """A discharge summary as space-separated lower-case tokens (see the module docstring)."""
    text = _DEID.sub(f" {DEID_TOKEN} ", text)
    text = _REPEATS.sub(r"\1 ", text).lower()
    text = _NUMBER.sub(f" {NUMBER_TOKEN} ", text)
    return " ".join(tokenize(text))


def anemia_label(codes: list[str]) -> str | None:
    """Positive for acute (285.1*), negative for chronic (285.2*) anemia, None for both or neither."""
    acute = any(c.startswith(ACUTE) for c in codes)
    chronic = any(c.startswith(CHRONIC) for c in codes)
    return None if acute == chronic else (POSITIVE if acute else NEGATIVE)


def diabetes_label(codes: list[str]) -> str:
    """Positive if any code is 250.00*."""
    return POSITIVE if any(c.startswith(DIABETES) for c in codes) else NEGATIVE


def table_path(folder: Path, table: str) -> Path | None:
    """``<table>.csv.gz`` (the PhysioNet distribution) or an unpacked ``<table>.csv`` in ``folder``."""
    return next((p for p in (folder / f"{table}.csv.gz", folder / f"{table}.csv") if p.is_file()), None)


def read_diagnoses(path: Path) -> dict[int, list[str]]:
    """ICD-9 codes (``XXX.YY``) of each admission, in ``SEQ_NUM`` order."""
    import pandas as pd

    df = pd.read_csv(path, usecols=["HADM_ID", "SEQ_NUM", "ICD9_CODE"], dtype={"ICD9_CODE": str})
    df = df.dropna(subset=["HADM_ID", "ICD9_CODE"]).sort_values(["HADM_ID", "SEQ_NUM"], kind="stable")
    out: dict[int, list[str]] = {}
    for hadm, code in zip(df["HADM_ID"].astype("int64"), df["ICD9_CODE"]):
        out.setdefault(int(hadm), []).append(normalize_icd9(code))
    return out


def read_discharge_summaries(path: Path, admissions: set[int], chunk_rows: int = 100_000) -> dict[int, str]:
    """The joined discharge summaries of the wanted ``admissions`` (read in chunks: the file is large)."""
    import pandas as pd

    columns = ["ROW_ID", "HADM_ID", "CHARTDATE", "CATEGORY", "DESCRIPTION", "ISERROR", "TEXT"]
    kept = []
    for chunk in pd.read_csv(path, usecols=columns, dtype={"CATEGORY": str, "DESCRIPTION": str, "ISERROR": str,
                                                           "CHARTDATE": str, "TEXT": str}, chunksize=chunk_rows):
        chunk = chunk[(chunk["CATEGORY"].str.strip() == "Discharge summary") & chunk["ISERROR"].isna()
                      & chunk["HADM_ID"].notna()]
        chunk = chunk[chunk["HADM_ID"].astype("int64").isin(admissions)]
        kept.append(chunk)
    notes = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=columns)
    notes = notes.assign(HADM_ID=notes["HADM_ID"].astype("int64"), TEXT=notes["TEXT"].fillna(""),
                         ORDER=notes["DESCRIPTION"].map(_DESCRIPTION_ORDER).fillna(len(_DESCRIPTION_ORDER)))
    notes = notes.sort_values(["HADM_ID", "ORDER", "CHARTDATE", "ROW_ID"], kind="stable")
    return {int(hadm): " ".join(group["TEXT"]).strip() for hadm, group in notes.groupby("HADM_ID", sort=True)}


def read_hadm_ids(path: Path) -> list[int]:
    """Admission ids of a CAML split file (one per line, no header).

    Raises:
        ValueError: for a line that is not a number, naming the file and line.
    """
    ids = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        for word in line.split():
            try:
                ids.append(int(float(word)))
            except ValueError as error:
                raise ValueError(f"{path} line {number}: {word[:40]!r} is not an admission id (HADM_ID); "
                                 "use the CAML split files") from error
    return ids


def load(name: str, config: PrepareConfig) -> RawSplits:
    """MIMIC-III Anemia or Diabetes from the user's files (see the module docstring for the rules).

    Sources:
        a local path: the folder with ``NOTEEVENTS.csv.gz`` and ``DIAGNOSES_ICD.csv.gz``
        (no hub copy exists: the data are credentialed).

    Options:
        min_tokens, max_tokens (int): keep documents with this many tokens
            (anemia 1..3999, diabetes 7..3999, J&W's bounds).
        test_fraction, val_fraction (float, anemia only; 0.2 and 0.15): the stratified splits.
        hadm_ids (str, diabetes only): folder with the CAML ``{train,dev,test}_50_hadm_ids.csv``;
            default: the source folder.
    """
    if name not in OPTIONS:
        raise ValueError(f"unknown MIMIC dataset {name!r}; allowed: {', '.join(OPTIONS)}")
    check_options(name, config.options, OPTIONS[name])
    opts = {**OPTIONS[name], **config.options}
    source_kind(name, config, (), "the folder with NOTEEVENTS.csv.gz and DIAGNOSES_ICD.csv.gz")
    folder = Path(config.source).expanduser()
    paths = {table: table_path(folder, table) for table in (NOTES, DIAGNOSES)}
    for table, path in paths.items():
        if path is None:
            raise missing(name, folder / f"{table}.csv.gz", HOW_TO_GET)
    split_ids: dict[str, list[int]] = {}
    if name == "mimic-diabetes":
        id_folder = Path(opts["hadm_ids"]).expanduser() if opts["hadm_ids"] else folder
        for split, file in CAML_SPLITS.items():
            if not (id_folder / file).is_file():
                raise missing(name, id_folder / file, HOW_TO_GET_CAML, setting=f"prepare.{name}.options.hadm_ids")
            split_ids[split] = read_hadm_ids(id_folder / file)

    codes = read_diagnoses(paths[DIAGNOSES])
    if name == "mimic-anemia":
        labels = {hadm: label for hadm, c in codes.items() if (label := anemia_label(c)) is not None}
    else:
        labels = {hadm: diabetes_label(codes.get(hadm, [])) for ids in split_ids.values() for hadm in ids}
    notes = read_discharge_summaries(paths[NOTES], set(labels))
    low, high = int(opts["min_tokens"]), int(opts["max_tokens"])
    examples: dict[int, RawExample] = {}
    for hadm in sorted(labels):
        if hadm in notes and (hadm in codes):
            text = normalize_note(notes[hadm])
            if low <= len(text.split()) <= high:
                examples[hadm] = RawExample(text, labels[hadm])

    if name == "mimic-diabetes":
        data = {split: [examples[h] for h in ids if h in examples] for split, ids in split_ids.items()}
        return RawSplits(data["train"], data["test"], data["val"])
    rows = list(examples.values())
    train, test = stratified_split(rows, float(opts["test_fraction"]), config.seed)
    train, val = stratified_split(train, float(opts["val_fraction"]), config.seed + 1)
    return RawSplits(train, test, val)
