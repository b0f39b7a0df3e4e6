"""bAbI generator and parser, the Arrow split format, and dataset preparation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roar.data import babi
from roar.data.babi import (
    ACTORS,
    DROP_VERBS,
    LOCATIONS,
    MOVE_VERBS,
    OBJECTS,
    TAKE_VERBS,
    Example,
    format_examples,
    generate_task,
    parse_babi,
    read_task_files,
    write_task_files,
)
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


def _replay(story: list[str]):
    """Replay a story; yield after each statement: actor rooms, carriers, dropped objects, room trails.

    State: ``where[actor] = (room, id)``; ``carrier[obj] = (actor, take id)``;
    ``lying[obj] = (room or None, drop id, id of the dropper's move)``; ``trail[obj]`` = rooms the object
    was known to be in, as (room, id of the statement that put it there), reset when it gets unknown.
    """
    where: dict[str, tuple[str, int]] = {}
    carrier: dict[str, tuple[str, int]] = {}
    lying: dict[str, tuple] = {}
    trail: dict[str, list[tuple[str, int]]] = {}
    for i, sentence in enumerate(story, start=1):
        moved = _move(sentence)
        if moved:
            where[moved[0]] = (moved[1], i)
            for obj, (actor, _) in carrier.items():
                if actor == moved[0] and (not trail[obj] or trail[obj][-1][0] != moved[1]):
                    trail[obj].append((moved[1], i))
            continue
        actor, rest = sentence.split(" ", 1)
        obj = next(o for o in OBJECTS if rest.removesuffix(".").removesuffix(" there").endswith(f"the {o}"))
        if any(rest.startswith(v + " ") for v in TAKE_VERBS):
            assert obj not in carrier, sentence
            carrier[obj] = (actor, i)
            lying.pop(obj, None)
            if actor in where:
                room, move_id = where[actor]
                if not trail.get(obj) or trail[obj][-1][0] != room:
                    trail.setdefault(obj, []).append((room, move_id))
            else:
                trail[obj] = []
        else:
            assert any(rest.startswith(v + " ") for v in DROP_VERBS), sentence
            assert carrier.pop(obj)[0] == actor, sentence
            lying[obj] = (where[actor][0], i, where[actor][1]) if actor in where else (None, i, 0)
    return where, carrier, lying, trail


def _solve(ex: Example) -> tuple[str, list[int]]:
    """The answer and the supporting statement ids (1-based, in the story) of a task 2 or 3 question."""
    where, carrier, lying, trail = _replay(ex.story)
    if ex.question.startswith("Where is the "):
        obj = ex.question.removeprefix("Where is the ").removesuffix("?")
        if obj in carrier:
            actor, take_id = carrier[obj]
            room, move_id = where[actor]
            assert move_id > take_id  # the carrier moved after taking it
            return room, [take_id, move_id]
        room, drop_id, move_id = lying[obj]
        assert room is not None
        return room, [drop_id, move_id]
    obj, before = ex.question.removeprefix("Where was the ").removesuffix("?").split(" before the ")
    room, drop_id, _ = lying[obj]  # official qa3 (v1.2) asks about objects lying where dropped
    rooms = [r for r, _ in trail[obj]]
    assert rooms[-1] == room, (rooms, ex.question)
    j = len(rooms) - 1 - rooms[::-1].index(before)  # "before the X": before its last visit to X
    assert j >= 1
    return rooms[j - 1], [drop_id, trail[obj][j][1], trail[obj][j - 1][1]]


@pytest.mark.parametrize("task", [2, 3])
def test_answers_and_supporting_facts_by_replaying_the_story(task):
    examples = generate_task(task, 600, seed=2)
    for ex in examples:
        answer, support = _solve(ex)
        assert (ex.answer, ex.supporting) == (answer, support), (ex.story, ex.question)
        assert len(set(ex.supporting)) == task
        assert all(babi.statement_kind(s) in ("move", "take", "drop") for s in ex.story)
    # the official phrasing: takes always end in "there" for qa2, seldom for qa3
    there = babi.story_statistics(examples)["there"]["take"]
    assert there == 1.0 if task == 2 else 0.1 < there < 0.35


def test_solver_reads_the_official_v12_qa3_story():
    """The replay solver agrees with the first story of the official qa3 (v1.2) test file."""
    for ex in parse_babi(OFFICIAL_QA3):
        assert _solve(ex) == (ex.answer, ex.supporting), ex.question


def test_task1_stories_as_official():
    """qa1: 2, 4, 6, 8, 10 statements before the 5 questions of a story, one supporting fact each."""
    examples = generate_task(1, 500, seed=0)
    assert [len(ex.story) for ex in examples[:10]] == [2, 4, 6, 8, 10] * 2
    assert {len(ex.story) for ex in examples} == {2, 4, 6, 8, 10}
    assert all(len(ex.supporting) == 1 for ex in examples)


def _quantiles(values):
    a = np.asarray(values, dtype=float)
    return dict(zip(("mean", "q10", "q25", "q50", "q75", "q90"), [a.mean(), *np.percentile(a, [10, 25, 50, 75, 90])]))


@pytest.mark.parametrize("task", [1, 2, 3])
def test_generated_lengths_match_the_official_distribution(task):
    """Mean and quantiles of statements and tokens per question against ``OFFICIAL_STATS``."""
    stats = babi.story_statistics(generate_task(task, 2000, seed=7))
    official = babi.OFFICIAL_STATS[task]
    got = _quantiles(stats["tokens"])
    assert got["mean"] == pytest.approx(official["tokens"]["mean"], rel=0.04)
    got = _quantiles(stats["statements"])
    assert got["mean"] == pytest.approx(official["statements"]["mean"], rel=0.04)
    if task == 2:  # 90 official questions: quantiles within a statement pair (+- 2) or 10 %
        for q in ("q10", "q25", "q50", "q75", "q90"):
            assert abs(got[q] - official["statements"][q]) <= max(2.0, 0.1 * official["statements"][q]), q
        tokens = _quantiles(stats["tokens"])
        for q in ("q25", "q50", "q75", "q90"):
            assert tokens[q] == pytest.approx(official["tokens"][q], rel=0.06), q
    if task == 3:  # one official story: its questions lie within the generated 10-90 % range
        assert got["q10"] <= official["statements"]["q25"] and official["statements"]["q75"] <= got["q90"]
    distractors = np.mean(stats["distractors"])
    assert distractors == pytest.approx(np.mean(stats["statements"]) - task, rel=0.01)
    if task > 1:
        assert distractors == pytest.approx(official["distractors"]["mean"], rel=0.06)
    for kind, share in official["kinds"].items():
        assert stats["kinds"][kind] == pytest.approx(share, abs=0.03), kind


@pytest.mark.parametrize("task", [1, 2, 3])
def test_vocabulary_size_as_official(task):
    examples = generate_task(task, 1000, seed=0)
    words = {t for ex in examples for t in tokenize(" ".join(ex.story)) + tokenize(ex.question)}
    assert len(words) + len(SPECIALS) == babi.OFFICIAL_STATS[task]["vocab"]


def test_statement_kind_rejects_other_text():
    assert babi.statement_kind("Mary put down the milk there.") == "drop"
    with pytest.raises(ValueError, match="statement"):
        babi.statement_kind("Mary passed the milk to John.")


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


# First story of the official qa3 test file of bAbI v1.2 (see OFFICIAL_STATS in roar.data.babi).
OFFICIAL_QA3 = """1 Mary got the milk.
2 John moved to the bedroom.
3 Daniel journeyed to the office.
4 John grabbed the apple there.
5 John got the football.
6 John journeyed to the garden.
7 Mary left the milk.
8 John left the football.
9 Daniel moved to the garden.
10 Daniel grabbed the football.
11 Mary moved to the hallway.
12 Mary went to the kitchen.
13 John put down the apple there.
14 John picked up the apple.
15 Sandra moved to the hallway.
16 Daniel left the football there.
17 Daniel took the football.
18 John travelled to the kitchen.
19 Daniel dropped the football.
20 John dropped the apple.
21 John grabbed the apple.
22 John went to the office.
23 Sandra went back to the bedroom.
24 Sandra took the milk.
25 John journeyed to the bathroom.
26 John travelled to the office.
27 Sandra left the milk.
28 Mary went to the bedroom.
29 Mary moved to the office.
30 John travelled to the hallway.
31 Sandra moved to the garden.
32 Mary moved to the kitchen.
33 Daniel took the football.
34 Mary journeyed to the bedroom.
35 Mary grabbed the milk there.
36 Mary discarded the milk.
37 John went to the garden.
38 John discarded the apple there.
39 Where was the apple before the bathroom? \toffice\t38 25 22
40 Sandra travelled to the bedroom.
41 Daniel moved to the bathroom.
42 Where was the apple before the hallway? \toffice\t38 30 26
43 Sandra got the milk.
44 Daniel travelled to the garden.
45 Where was the apple before the hallway? \toffice\t38 30 26
46 Sandra went back to the bathroom.
47 Daniel took the apple there.
48 Mary went back to the hallway.
49 Daniel went to the hallway.
50 Sandra went to the kitchen.
51 Mary journeyed to the bedroom.
52 Sandra journeyed to the hallway.
53 Daniel put down the apple.
54 Daniel put down the football there.
55 Sandra journeyed to the garden.
56 Where was the football before the garden? \tbathroom\t54 44 41
57 Mary travelled to the office.
58 Sandra dropped the milk.
59 Where was the football before the garden? \tbathroom\t54 44 41
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
    train_path, _ = write_task_files(tmp_path, 1, 30, 10, seed=0)
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

    def fake(task, n, seed):
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


def test_official_tokens_keep_case_and_join_statements_with_a_period_between():
    """``prepare.babi-N.tokens: official``: the official code's text (nlproar/dataset/babi.py) and its split at
    whitespace; roar's: lower-cased, every statement ending in '.', the question in '?'."""
    example = parse_babi(OFFICIAL)[1]
    official = babi.official_text(example)
    assert official.text == ("Mary moved to the bathroom . John went to the hallway . Daniel went back to the hallway "
                             ". Sandra moved to the garden")
    assert (official.text2, official.label) == ("Where is Daniel", "hallway")
    from roar.data.tokenize import split_words

    assert split_words(official.text)[:6] == ["Mary", "moved", "to", "the", "bathroom", "."]
    assert split_words(official.text).count(".") == 3  # one fewer than roar's (no final period)
    assert tokenize(" ".join(example.story)).count(".") == 4 and tokenize(example.question)[-1] == "?"


def test_prepare_with_official_tokens(tmp_path):
    prepare("babi-1", tmp_path / "official", PrepareConfig(n_train=60, n_test=20, tokens="official"))
    prepare("babi-1", tmp_path / "roar", PrepareConfig(n_train=60, n_test=20))
    official = json.loads((tmp_path / "official" / "vocab.json").read_text())
    roar = json.loads((tmp_path / "roar" / "vocab.json").read_text())
    assert {"Mary", "John", "Where", "."} <= set(official) and "?" not in official and "mary" not in official
    assert {"mary", "where", "?", "."} <= set(roar)
    # same stories: the official first sequence has one token fewer per question (no final period)
    official_splits, roar_splits = read_dataset(tmp_path / "official")[1], read_dataset(tmp_path / "roar")[1]
    np.testing.assert_array_equal(official_splits["train"].lengths, roar_splits["train"].lengths - 1)
    np.testing.assert_array_equal(official_splits["train"].lengths2, roar_splits["train"].lengths2 - 1)
    with pytest.raises(ValueError, match=r"prepare.snli.tokens='official' is not offered by snli; allowed: roar"):
        prepare("snli", tmp_path / "snli", PrepareConfig(tokens="official"))
