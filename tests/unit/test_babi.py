"""bAbI generator and parser, the Arrow split format, and dataset preparation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roar.data import babi
from roar.data.babi import (ACTORS, DROP_VERBS, LOCATIONS, MOVE_VERBS, OBJECTS, TAKE_VERBS, Example, format_examples,
                            generate_task, parse_babi, read_task_files, write_task_files)
from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import Split, read_dataset, read_split, write_split
from roar.data.tokenize import END_ID, SPECIALS, START_ID, UNK_ID, Vocabulary, tokenize


@pytest.mark.parametrize("task", [1, 2, 3])
def test_generator_is_deterministic_per_seed(task):
    a = generate_task(task, 40, seed=3)
    b = generate_task(task, 40, seed=3)
    c = generate_task(task, 40, seed=4)
    assert a == b
    assert a != c
    assert len(a) == 40
    assert all(ex.answer in LOCATIONS for ex in a)


@pytest.mark.parametrize("task", [1, 2, 3])
def test_format_parse_round_trip(task):
    examples = generate_task(task, 23, seed=1)  # 23: the last story is cut short
    assert parse_babi(format_examples(examples)) == examples


def _move(sentence: str) -> tuple[str, str] | None:
    """(actor, location) of a move statement, else None."""
    for verb in MOVE_VERBS:
        for actor in ACTORS:
            for loc in LOCATIONS:
                if sentence == f"{actor} {verb} the {loc}.":
                    return actor, loc
    return None


def test_task1_answers_are_the_actors_last_location():
    examples = generate_task(1, 200, seed=5)
    for ex in examples:
        actor = ex.question.removeprefix("Where is ").removesuffix("?")
        assert actor in ACTORS
        last = None
        for i, sentence in enumerate(ex.story, start=1):
            moved = _move(sentence)
            assert moved is not None, sentence  # task 1 has only moves
            if moved[0] == actor:
                last = (moved[1], i)
        assert last is not None
        assert ex.answer == last[0]
        assert ex.supporting == [last[1]]


def test_task2_answers_by_replaying_objects():
    for ex in generate_task(2, 150, seed=2):
        where: dict[str, str] = {}
        carrier: dict[str, str] = {}
        lying: dict[str, str] = {}
        for sentence in ex.story:
            moved = _move(sentence)
            if moved:
                where[moved[0]] = moved[1]
                continue
            actor, rest = sentence.split(" ", 1)
            obj = next(o for o in OBJECTS if f"the {o}" in rest)
            if rest.endswith("there."):
                assert any(rest.startswith(v + " ") for v in TAKE_VERBS), sentence
                carrier[obj] = actor
                lying.pop(obj, None)
            else:
                assert any(rest.startswith(v + " ") for v in DROP_VERBS), sentence
                assert carrier.pop(obj) == actor
                lying[obj] = where[actor]
        obj = ex.question.removeprefix("Where is the ").removesuffix("?")
        expected = where[carrier[obj]] if obj in carrier else lying[obj]
        assert ex.answer == expected, (ex.story, ex.question)


OFFICIAL = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
7 John moved to the office.
8 Sandra journeyed to the bathroom.
9 Where is Daniel? \thallway\t4 1
1 Sandra travelled to the office.
2 Where is Sandra? \toffice\t1
"""


def test_parse_official_format_snippet():
    examples = parse_babi(OFFICIAL)
    s1 = ["Mary moved to the bathroom.", "John went to the hallway."]
    s2 = s1 + ["Daniel went back to the hallway.", "Sandra moved to the garden."]
    s3 = s2 + ["John moved to the office.", "Sandra journeyed to the bathroom."]
    assert examples == [
        Example(s1, "Where is Mary?", "bathroom", [1]),
        # line ids skip the question lines: line 4 is the story's third statement
        Example(s2, "Where is Daniel?", "hallway", [3]),
        Example(s3, "Where is Daniel?", "hallway", [3, 1]),
        # a line id 1 starts a new story
        Example(["Sandra travelled to the office."], "Where is Sandra?", "office", [1]),
    ]


def test_task_files_round_trip(tmp_path):
    train_path, test_path = write_task_files(tmp_path, 1, 30, 10, seed=0)
    assert train_path.name == "qa1_single-supporting-fact_train.txt"
    train, test = read_task_files(tmp_path, 1)
    assert train == generate_task(1, 30, 0)
    assert test == generate_task(1, 10, 1_000_003)
    with pytest.raises(FileNotFoundError, match="qa2_two-supporting-facts_train.txt"):
        read_task_files(tmp_path, 2)
    with pytest.raises(ValueError, match="4"):
        read_task_files(tmp_path, 4)
    with pytest.raises(ValueError, match="7"):
        generate_task(7, 3, 0)


# --- storage ---------------------------------------------------------------------------------

def _assert_split_equal(a: Split, b: Split) -> None:
    for name in ("tokens", "lengths", "tokens2", "lengths2", "labels", "index"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == np.int64, name
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("paired", [True, False])
def test_storage_round_trip_and_byte_stable(tmp_path, paired):
    rng = np.random.default_rng(0)
    first = [list(rng.integers(1, 50, size=n)) for n in [5, 1, 9, 3, 9, 2]]
    second = [list(rng.integers(1, 50, size=n)) for n in [2, 4, 1, 3, 1, 2]] if paired else None
    split = Split.from_lists(first, [3, 0, 1, 2, 0, 5], second, index=[10, 4, 8, 2, 0, 99])
    assert split.paired == paired
    write_split(split, tmp_path / "a.arrow")
    back = read_split(tmp_path / "a.arrow")
    _assert_split_equal(back, split)
    assert back.paired == paired
    write_split(split, tmp_path / "b.arrow")
    write_split(back, tmp_path / "c.arrow")
    data = (tmp_path / "a.arrow").read_bytes()
    assert data == (tmp_path / "b.arrow").read_bytes() == (tmp_path / "c.arrow").read_bytes()
    # a masked copy keeps everything but the first sequence
    masked = split.with_tokens(np.where(split.tokens > 25, 2, split.tokens))
    write_split(masked, tmp_path / "m.arrow")
    back = read_split(tmp_path / "m.arrow")
    _assert_split_equal(back, masked)
    assert (tmp_path / "m.arrow").read_bytes() != data


def test_with_tokens_refuses_other_shape():
    split = Split.from_lists([[5, 6], [7]], [0, 1])
    with pytest.raises(ValueError, match="shape"):
        split.with_tokens(np.zeros((2, 3), dtype=np.int64))


# --- prepare ---------------------------------------------------------------------------------

def test_prepare_babi1_sizes_and_train_only_vocabulary(tmp_path):
    summary = prepare("babi-1", tmp_path / "babi-1", PrepareConfig(n_train=200, n_test=50))
    assert (summary["n_train"], summary["n_val"], summary["n_test"]) == (170, 30, 50)
    meta, splits = read_dataset(tmp_path / "babi-1")
    assert meta.paired and meta.metric == "accuracy"
    assert meta.classes == sorted(LOCATIONS)
    assert [len(splits[s]) for s in ("train", "val", "test")] == [170, 30, 50]
    vocab = Vocabulary.load(tmp_path / "babi-1" / "vocab.json")
    assert summary["vocab_size"] == len(vocab)
    # the vocabulary holds exactly the specials and the words of the training split
    train = splits["train"]
    seen = {i for row, n in zip(train.tokens, train.lengths) for i in row[:n]}
    seen |= {i for row, n in zip(train.tokens2, train.lengths2) for i in row[:n]}
    assert seen | set(range(len(SPECIALS))) == set(range(len(vocab)))
    assert UNK_ID not in seen
    # the first sequence is the story wrapped in START/END; the second the question; label = answer
    train_examples = generate_task(1, 200, 0)
    first = train.tokens[0, : train.lengths[0]]
    assert first[0] == START_ID and first[-1] == END_ID
    words = vocab.decode(first[1:-1])
    question = vocab.decode(train.tokens2[0, : train.lengths2[0]])
    match = [ex for ex in train_examples if tokenize(" ".join(ex.story)) == words and tokenize(ex.question) == question]
    assert match and meta.classes[train.labels[0]] == match[0].answer
    # deterministic: preparing again gives the same files
    prepare("babi-1", tmp_path / "again", PrepareConfig(n_train=200, n_test=50))
    for name in ("train.arrow", "val.arrow", "test.arrow", "vocab.json", "meta.json"):
        assert (tmp_path / "babi-1" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()


def test_prepare_vocabulary_ignores_val_and_test_words(tmp_path, monkeypatch):
    """Words that occur only in the test set (or in examples split off to validation) become [UNK]."""
    real = babi.generate_task

    def fake(task, n, seed, allow_passing=False):
        examples = real(task, n, seed)
        if seed != 0:  # the test set: a word never seen in training
            examples[0] = Example(["Zebra went to the kitchen."], "Where is Zebra?", "kitchen", [1])
        return examples

    monkeypatch.setattr(babi, "generate_task", fake)
    prepare("babi-1", tmp_path / "d", PrepareConfig(n_train=100, n_test=20))
    vocab = Vocabulary.load(tmp_path / "d" / "vocab.json")
    assert "zebra" not in vocab.index
    _, splits = read_dataset(tmp_path / "d")
    test = splits["test"]
    assert vocab.decode(test.tokens[0, : test.lengths[0]]) == ["[START]", "[UNK]", "went", "to", "the", "kitchen",
                                                               ".", "[END]"]
    assert vocab.decode(test.tokens2[0, : test.lengths2[0]]) == ["where", "is", "[UNK]", "?"]
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["name"] == "babi-1"


def test_prepare_unknown_dataset(tmp_path):
    with pytest.raises(ValueError, match="'yelp'.*babi-1.*sst"):
        prepare("yelp", tmp_path / "x", PrepareConfig(n_train=10, n_test=5))
