"""bAbI tasks 1-3: a seeded world-simulation generator and a parser of the bAbI text format.

The generator simulates actors who move between rooms and pick up, drop and pass objects, and
writes stories in the standard bAbI format (``ID text`` lines, question lines
``ID question?<TAB>answer<TAB>supporting ids``). The parser reads these files and the official
``tasks_1-20_v1-2`` files alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, RawSplits

ACTORS = ("Mary", "John", "Daniel", "Sandra")
LOCATIONS = ("bathroom", "hallway", "kitchen", "office", "bedroom", "garden")
OBJECTS = ("football", "apple", "milk")
MOVE_VERBS = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
TAKE_VERBS = ("got", "picked up", "grabbed", "took")
DROP_VERBS = ("dropped", "discarded", "put down", "left")

TASK_FILES = {
    1: "qa1_single-supporting-fact",
    2: "qa2_two-supporting-facts",
    3: "qa3_three-supporting-facts",
}
QUESTIONS_PER_STORY = 5
OFFICIAL_URL = "http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz"

# --- Official statistics (facts the generator is calibrated against) -------------------------
# Measured through this project's tokenisation (``tokenize(" ".join(story))`` + [START]/[END]),
# per question: statements before the question, first-sequence tokens, distractors (statements
# that are not supporting facts), and the mix of statement kinds over the distinct statements.
#
# qa1 (bAbI v1.2): stories of 2, 4, 6, 8, 10 statements before their 5 questions; mean first
#   sequence 39.2 tokens over en-10k; vocabulary 26 incl. the 5 specials.
# qa2: 90 questions (18 stories of 5 questions) from the head of the 1k test file
#   ``qa2_two-supporting-facts_test.txt`` as stored in github.com/ankitomss/QAsystem1
#   (``data/en/``; its first story's line 8 edited there, restored from the v1.2 copy in
#   github.com/Wang-Han/krr-question-answering ``data/``, whose first story is identical).
#   Mean tokens 96.6 (en-10k, whole file: 97.2); vocabulary 40.
# qa3: bAbI v1.2 generates much longer qa3 stories than v1.1 (v1.1's en/qa3 test, e.g. in
#   github.com/uclnlp/gntp, averages ~22 statements per question). Available v1.2 text: the first
#   test story (5 questions, after 38/40/42/52/54 statements; in a memn2n unit test fixture and in
#   Wang-Han/krr-question-answering ``data/qa3_three-supporting-facts_test.txt``) and one
#   en-10k train example (44 statements; the test of AndreasMadsen's nlp-roar-interpretability);
#   mean first sequence over en-10k 271.6 tokens; vocabulary 41. The qa3 quantiles below come
#   from that one story (5 questions) only; the token mean is the en-10k one.
# Statement mixes: qa2 over the 390 distinct statements of the 18 stories; qa3 over the 98 of the
# v1.2 story and example. The "max" of a sample is that of the sample, not of the whole file.

def _spread(mean: float, q10: float, q25: float, q50: float, q75: float, q90: float, most: float) -> dict:
    """A distribution as OFFICIAL_STATS gives it: mean, deciles and quartiles, max."""
    return {"mean": mean, "q10": q10, "q25": q25, "q50": q50, "q75": q75, "q90": q90, "max": most}


OFFICIAL_STATS = {
    1: {"statements": _spread(6.0, 2, 4, 6, 8, 10, 10), "tokens": {"mean": 39.2}, "vocab": 26,
        "kinds": {"move": 1.0, "take": 0.0, "drop": 0.0}},
    2: {"statements": _spread(15.4, 7.8, 10, 14, 20, 24.2, 40),
        "tokens": {**_spread(97.2, 49, 63, 87.5, 124.75, 149.8, 249), "sample_mean": 96.6},
        "distractors": _spread(13.4, 5.8, 8, 12, 18, 22.2, 38), "vocab": 40,
        "kinds": {"move": 0.664, "take": 0.185, "drop": 0.151}, "there": {"take": 1.0, "drop": 0.153},
        "sample_questions": 90},
    3: {"statements": _spread(45.2, 38.8, 40, 42, 52, 53.2, 54),
        "tokens": {**_spread(271.6, 223.8, 231, 242, 305, 311.6, 316), "sample_mean": 262.6},
        "distractors": _spread(42.2, 35.8, 37, 39, 49, 50.2, 51), "vocab": 41,
        "kinds": {"move": 0.56, "take": 0.22, "drop": 0.22}, "there": {"take": 0.2, "drop": 0.25},
        "sample_questions": 5},
}
# In the official files every gap between two questions is an even number of statements
# (qa2 sample: 2 x54, 4 x11, 6 x7, 8 x8, 10 x5, 14 x3, 16, 24), and most gaps are 2: statements
# come in pairs and a question follows a pair when one is answerable, with some probability.
STATEMENTS_PER_STEP = 2
# Generator parameters, calibrated on the numbers above (bench/babi_lengths.py prints the match):
# weights of the statement kinds (move, take, drop) when all are possible; probability that an
# answerable question is asked after a pair; ``there`` after take / drop; for task 3 the story
# length (statements) before which no question is asked, drawn uniformly from the range.
ACTION_WEIGHTS = {2: (0.55, 0.25, 0.2), 3: (0.45, 0.28, 0.27)}
ASK_PROBABILITY = {2: 0.78, 3: 0.9}
THERE_PROBABILITY = {2: (1.0, 0.15), 3: (0.2, 0.25)}
FIRST_QUESTION_AFTER = {2: (0, 0), 3: (32, 40)}
MAX_STORY = 400  # statements; a story is never longer (questions then come as soon as answerable)


@dataclass
class Example:
    """One bAbI question with the story lines before it."""

    story: list[str]
    question: str
    answer: str
    supporting: list[int]


@dataclass
class _ActorWorld:
    """Task 1: actors move between rooms; ``actor_at`` holds (room, id of the move statement)."""

    rng: random.Random
    actor_at: dict[str, tuple[str, int]] = field(default_factory=dict)

    def step(self, line: int) -> str:
        actor = self.rng.choice(ACTORS)
        current = self.actor_at.get(actor, (None, 0))[0]
        location = self.rng.choice([loc for loc in LOCATIONS if loc != current])
        self.actor_at[actor] = (location, line)
        return f"{actor} {self.rng.choice(MOVE_VERBS)} the {location}."

    def question(self) -> tuple[str, str, list[int]] | None:
        if not self.actor_at:
            return None
        actor = self.rng.choice(sorted(self.actor_at))
        location, line = self.actor_at[actor]
        return f"Where is {actor}?", location, [line]


@dataclass
class _ObjectWorld:
    """Tasks 2 and 3: actors move, take and drop objects.

    The world has a true state (every actor and object starts in a hidden room) and the story
    tells only part of it: an actor's room is known from their last move statement, an object's
    from whoever carries it or from the drop that left it. Questions use known facts only.
    """

    rng: random.Random
    task: int
    true_actor: dict[str, str] = field(default_factory=dict)
    true_object: dict[str, str] = field(default_factory=dict)  # rooms of objects lying around
    known_actor: dict[str, tuple[str, int]] = field(default_factory=dict)  # actor -> (room, move id)
    carried_by: dict[str, tuple[str, int]] = field(default_factory=dict)  # object -> (actor, take id)
    dropped: dict[str, tuple[str, int, int] | None] = field(default_factory=dict)  # -> (room, drop id, move id)
    # object -> known rooms in order [(room, id of the move that put it there)], since the last
    # time its room became unknown
    history: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.true_actor = {a: self.rng.choice(LOCATIONS) for a in ACTORS}
        self.true_object = {o: self.rng.choice(LOCATIONS) for o in OBJECTS}

    def _enter(self, obj: str, room: str, line: int) -> None:
        hist = self.history.setdefault(obj, [])
        if not hist or hist[-1][0] != room:
            hist.append((room, line))

    def _there(self, index: int) -> str:
        return " there" if self.rng.random() < THERE_PROBABILITY[self.task][index] else ""

    def move(self, actor: str, line: int) -> str:
        room = self.rng.choice([loc for loc in LOCATIONS if loc != self.true_actor[actor]])
        self.true_actor[actor] = room
        self.known_actor[actor] = (room, line)
        for obj, (carrier, _) in self.carried_by.items():
            if carrier == actor:
                self._enter(obj, room, line)
        return f"{actor} {self.rng.choice(MOVE_VERBS)} the {room}."

    def take(self, actor: str, obj: str, line: int) -> str:
        del self.true_object[obj]
        self.carried_by[obj] = (actor, line)
        self.dropped.pop(obj, None)
        if actor in self.known_actor:
            self._enter(obj, *self.known_actor[actor])
        else:
            self.history[obj] = []  # its room is unknown from here on
        return f"{actor} {self.rng.choice(TAKE_VERBS)} the {obj}{self._there(0)}."

    def drop(self, obj: str, line: int) -> str:
        actor, _ = self.carried_by.pop(obj)
        self.true_object[obj] = self.true_actor[actor]
        known = self.known_actor.get(actor)
        self.dropped[obj] = (known[0], line, known[1]) if known else None
        return f"{actor} {self.rng.choice(DROP_VERBS)} the {obj}{self._there(1)}."

    def step(self, line: int) -> str:
        """Write one random statement: a move, a take or a drop."""
        rng = self.rng
        takeable = [(a, o) for a in ACTORS for o, room in sorted(self.true_object.items())
                    if room == self.true_actor[a]]
        w_move, w_take, w_drop = ACTION_WEIGHTS[self.task]
        kinds, weights = ["move"], [w_move]
        if takeable:
            kinds.append("take")
            weights.append(w_take)
        if self.carried_by:
            kinds.append("drop")
            weights.append(w_drop)
        kind = rng.choices(kinds, weights)[0]
        if kind == "take":
            return self.take(*rng.choice(takeable), line)
        if kind == "drop":
            return self.drop(rng.choice(sorted(self.carried_by)), line)
        return self.move(rng.choice(ACTORS), line)

    def question(self) -> tuple[str, str, list[int]] | None:
        """A question answerable from the story so far, or None if none is yet."""
        candidates = []
        if self.task == 2:
            # carried: the carrier moved after the take (support: take, move);
            # lying: dropped by an actor whose room was known (support: drop, move)
            for obj, (carrier, take_line) in self.carried_by.items():
                room, move_line = self.known_actor.get(carrier, (None, 0))
                if room is not None and move_line > take_line:
                    candidates.append((f"Where is the {obj}?", room, [take_line, move_line]))
            for obj, known in self.dropped.items():
                if known is not None:
                    room, drop_line, move_line = known
                    candidates.append((f"Where is the {obj}?", room, [drop_line, move_line]))
        else:
            # an object lying where it was dropped, asked about a room it passed through: the
            # room before its last visit there, as in the official v1.2 files (support: the drop,
            # the move into that room, the move into the room before)
            for obj, known in self.dropped.items():
                hist = self.history.get(obj, [])
                if known is None or not hist or hist[-1][0] != known[0]:
                    continue
                last = {room: j for j, (room, _) in enumerate(hist)}
                for room, j in last.items():
                    if j >= 1:
                        candidates.append((f"Where was the {obj} before the {room}?", hist[j - 1][0],
                                           [known[1], hist[j][1], hist[j - 1][1]]))
        if not candidates:
            return None
        return self.rng.choice(sorted(candidates))


def _generate_actor_task(rng: random.Random, n_questions: int) -> list[Example]:
    """Task 1: two moves before each question, five questions a story (as the official qa1)."""
    examples: list[Example] = []
    while len(examples) < n_questions:
        world = _ActorWorld(rng)
        story: list[str] = []
        asked = 0
        while asked < QUESTIONS_PER_STORY and len(examples) < n_questions:
            for _ in range(rng.randint(2, 2)):
                story.append(world.step(len(story) + 1))
            question = world.question()
            if question is None:
                continue
            text, answer, support = question
            examples.append(Example(list(story), text, answer, support))
            asked += 1
    return examples


def _generate_object_task(task: int, rng: random.Random, n_questions: int) -> list[Example]:
    """Tasks 2 and 3: statements in pairs; after a pair an answerable question is asked with
    probability ``ASK_PROBABILITY`` (task 3: only once the story is long enough)."""
    examples: list[Example] = []
    while len(examples) < n_questions:
        world = _ObjectWorld(rng, task)
        story: list[str] = []
        first = rng.randint(*FIRST_QUESTION_AFTER[task])
        asked = 0
        while asked < QUESTIONS_PER_STORY and len(examples) < n_questions:
            for _ in range(STATEMENTS_PER_STEP):
                story.append(world.step(len(story) + 1))
            if len(story) < first:
                continue
            question = world.question()
            if question is None or (len(story) < MAX_STORY and rng.random() >= ASK_PROBABILITY[task]):
                continue
            text, answer, support = question
            examples.append(Example(list(story), text, answer, support))
            asked += 1
    return examples


def generate_task(task: int, n_questions: int, seed: int) -> list[Example]:
    """Generate ``n_questions`` questions of bAbI ``task`` (1, 2 or 3), deterministically.

    Task 1 writes two moves before each question; tasks 2 and 3 follow the length distribution,
    statement mix and question placement of the official files (``OFFICIAL_STATS``).

    Args:
        task: 1 (single supporting fact), 2 (two) or 3 (three supporting facts).
        n_questions: number of questions; stories hold ``QUESTIONS_PER_STORY`` each.
        seed: seed of the simulation.

    Returns:
        The examples, in story order.
    """
    if task not in TASK_FILES:
        raise ValueError(f"bAbI task {task!r} is not generated; allowed: {sorted(TASK_FILES)}")
    rng = random.Random(f"babi-{task}-{seed}")
    if task == 1:
        return _generate_actor_task(rng, n_questions)
    return _generate_object_task(task, rng, n_questions)


def statement_kind(sentence: str) -> str:
    """``move``, ``take`` or ``drop`` for a statement of the generated or official tasks 1-3."""
    rest = sentence.split(" ", 1)[1] if " " in sentence else ""
    for kind, verbs in (("move", MOVE_VERBS), ("take", TAKE_VERBS), ("drop", DROP_VERBS)):
        if any(rest.startswith(verb + " the ") for verb in verbs):
            return kind
    raise ValueError(f"not a bAbI task 1-3 statement: {sentence!r}")


def format_examples(examples: list[Example]) -> str:
    """Write examples in the bAbI text format, sharing story lines between questions."""
    lines: list[str] = []
    previous: list[str] = []
    statement_ids: list[int] = []  # line id of each statement of the current story
    line_id = 0
    for ex in examples:
        continues = bool(previous) and ex.story[: len(previous)] == previous
        if not continues:
            line_id, previous, statement_ids = 0, [], []
        for text in ex.story[len(previous):]:
            line_id += 1
            statement_ids.append(line_id)
            lines.append(f"{line_id} {text}")
        previous = ex.story
        support = " ".join(str(statement_ids[s - 1]) for s in ex.supporting)
        line_id += 1
        lines.append(f"{line_id} {ex.question} \t{ex.answer}\t{support}")
    return "\n".join(lines) + "\n"


def parse_babi(text: str, where: str = "bAbI text") -> list[Example]:
    """Parse the bAbI text format into examples (story = statements before each question).

    Raises:
        ValueError: for a line that is not ``<id> <statement>`` or ``<id> <question>\t<answer>\t<ids>``
            (the message names ``where`` and the line number).
    """
    examples: list[Example] = []
    story: list[str] = []
    id_to_statement: dict[int, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        head, _, rest = raw.partition(" ")
        if not head.isdigit() or not rest.strip():
            raise ValueError(f"{where} line {number} is not '<id> <statement>' or '<id> <question><TAB><answer>"
                             f"<TAB><supporting ids>': {raw[:60]!r}")
        line_id = int(head)
        if line_id == 1:
            story, id_to_statement = [], {}
        if "\t" in rest:
            question, answer, support = (rest.split("\t") + ["", ""])[:3]
            if not answer.strip() or not all(s.isdigit() for s in support.split()):
                raise ValueError(f"{where} line {number}: a question line needs '<question><TAB><answer><TAB>"
                                 f"<supporting line ids>': {raw[:60]!r}")
            supporting = [id_to_statement[int(s)] for s in support.split() if int(s) in id_to_statement]
            examples.append(Example(list(story), question.strip(), answer.strip(), supporting))
        else:
            story.append(rest.strip())
            id_to_statement[line_id] = len(story)
    return examples


def write_task_files(out_dir: Path, task: int, n_train: int, n_test: int, seed: int) -> tuple[Path, Path]:
    """Generate a task and write ``<name>_train.txt`` and ``<name>_test.txt`` like the official set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, n, split_seed in (("train", n_train, seed), ("test", n_test, seed + 1_000_003)):
        path = out_dir / f"{TASK_FILES[task]}_{split}.txt"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(format_examples(generate_task(task, n, split_seed)))
        tmp.replace(path)
        paths.append(path)
    return paths[0], paths[1]


def read_task_files(folder: Path, task: int) -> tuple[list[Example], list[Example]]:
    """Read train and test examples of ``task`` from a folder of bAbI files (official or generated)."""
    name = TASK_FILES.get(task)
    if name is None:
        raise ValueError(f"bAbI task {task!r} is not supported; allowed: {sorted(TASK_FILES)}")
    out = []
    for split in ("train", "test"):
        path = folder / f"{name}_{split}.txt"
        if not path.is_file():
            raise FileNotFoundError(
                f"dataset 'babi-{task}': {path} not found; download tasks_1-20_v1-2.tar.gz "
                f"({OFFICIAL_URL}) and set prepare.babi-{task}.source to its en-10k folder, "
                "or use source: generate"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path} is not UTF-8 text (byte {error.start}); use the official bAbI files") from error
        examples = parse_babi(text, str(path))
        if not examples:
            raise ValueError(f"{path} holds no bAbI questions; use the official bAbI files or source: generate")
        out.append(examples)
    return out[0], out[1]


def official_text(example: Example) -> RawExample:
    """An example as the official code writes it (nlp-roar-interpretability, ``nlproar/dataset/babi.py``,
    ``_parse_babi_txtfile``): each statement without its final '.', joined by ' . ' (so no final period),
    and the question without its last character (the '?'); its tokenizer then splits at whitespace and
    keeps the case (:func:`roar.data.tokenize.split_words`)."""
    story = " . ".join(statement.removesuffix(".") for statement in example.story if statement)
    return RawExample(story, example.answer, example.question[:-1])


def load(name: str, config: PrepareConfig) -> RawSplits:
    """Raw examples of ``babi-<task>``: generated by the world simulation, or read from the official files;
    the story's statements joined by spaces (``tokens: roar``), or as the official code joins them."""
    task = int(name.split("-")[1])
    if config.source == "generate":
        train = generate_task(task, config.n_train, config.seed)
        test = generate_task(task, config.n_test, config.seed + 1_000_003)
    else:
        train, test = read_task_files(Path(config.source), task)
    if config.tokens == "official":
        return RawSplits([official_text(e) for e in train], [official_text(e) for e in test])
    to_raw = lambda exs: [RawExample(" ".join(e.story), e.answer, e.question) for e in exs]
    return RawSplits(to_raw(train), to_raw(test))


def story_statistics(examples: list[Example]) -> dict[str, object]:
    """Per-question lengths of ``examples`` and the statement mix of their stories.

    Returns:
        ``statements``, ``tokens`` (first sequence as prepared: the story's word tokens plus
        [START]/[END]) and ``distractors`` (statements that are not supporting facts), each a list
        with one value per question; ``kinds``: share of move/take/drop among the distinct
        statements of the stories; ``there``: share of takes/drops ending in "there".
    """
    from roar.data.tokenize import tokenize

    stories: list[list[str]] = []
    for ex in examples:  # a story's statements are those of its last (longest) question
        if stories and ex.story[: len(stories[-1])] == stories[-1]:
            stories[-1] = ex.story
        else:
            stories.append(ex.story)
    kinds = [statement_kind(s) for story in stories for s in story]
    there = {k: [s.endswith(" there.") for story in stories for s in story if statement_kind(s) == k]
             for k in ("take", "drop")}
    return {
        "statements": [len(ex.story) for ex in examples],
        "tokens": [len(tokenize(" ".join(ex.story))) + 2 for ex in examples],
        "distractors": [len(ex.story) - len(set(ex.supporting)) for ex in examples],
        "kinds": {k: kinds.count(k) / max(len(kinds), 1) for k in ("move", "take", "drop")},
        "there": {k: sum(v) / len(v) if v else 0.0 for k, v in there.items()},
    }
