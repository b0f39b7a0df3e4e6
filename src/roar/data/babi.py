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

from roar.data.datasets import PrepareConfig, RawExample, RawSplits

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
# Statements between two questions of a story, per task (official tasks: 2 for task 1, more
# for the object tasks, whose facts need more setting up).
STATEMENTS_BETWEEN = {1: (2, 2), 2: (2, 5), 3: (3, 8)}
QUESTIONS_PER_STORY = 5
OFFICIAL_URL = "http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz"


@dataclass
class Example:
    """One bAbI question with the story lines before it."""

    story: list[str]
    question: str
    answer: str
    supporting: list[int]


@dataclass
class _World:
    """State of the simulation; ``line`` is the id of the last statement written."""

    rng: random.Random
    actor_at: dict[str, tuple[str, int]] = field(default_factory=dict)
    carried_by: dict[str, tuple[str, int]] = field(default_factory=dict)
    object_at: dict[str, tuple[str, int]] = field(default_factory=dict)
    # object -> [(location, id of the statement that put it there)], consecutive duplicates merged
    history: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def _record(self, obj: str, location: str, line: int) -> None:
        hist = self.history.setdefault(obj, [])
        if not hist or hist[-1][0] != location:
            hist.append((location, line))

    def move(self, actor: str, line: int) -> str:
        current = self.actor_at.get(actor, (None, 0))[0]
        location = self.rng.choice([loc for loc in LOCATIONS if loc != current])
        self.actor_at[actor] = (location, line)
        for obj, (carrier, _) in self.carried_by.items():
            if carrier == actor:
                self._record(obj, location, line)
        return f"{actor} {self.rng.choice(MOVE_VERBS)} the {location}."

    def take(self, actor: str, obj: str, line: int) -> str:
        self.carried_by[obj] = (actor, line)
        self.object_at.pop(obj, None)
        if actor in self.actor_at:
            self._record(obj, self.actor_at[actor][0], line)
        return f"{actor} {self.rng.choice(TAKE_VERBS)} the {obj} there."

    def drop(self, actor: str, obj: str, line: int) -> str:
        del self.carried_by[obj]
        if actor in self.actor_at:
            self.object_at[obj] = (self.actor_at[actor][0], line)
        return f"{actor} {self.rng.choice(DROP_VERBS)} the {obj}."

    def give(self, actor: str, obj: str, receiver: str, line: int) -> str:
        self.carried_by[obj] = (receiver, line)
        return f"{actor} passed the {obj} to {receiver}."

    def step(self, task: int, line: int, allow_passing: bool) -> str:
        """Write one random statement; only actor moves for task 1."""
        rng = self.rng
        if task == 1:
            return self.move(rng.choice(ACTORS), line)
        actions = ["move", "move"]
        # An actor can take an object lying where they stand, or one not yet seen anywhere.
        takeable = [(a, o) for a in ACTORS if a in self.actor_at for o in OBJECTS
                    if o not in self.carried_by
                    and self.object_at.get(o, (self.actor_at[a][0], 0))[0] == self.actor_at[a][0]]
        if takeable:
            actions.append("take")
        if self.carried_by:
            actions.append("drop")
        action = rng.choice(actions)
        if action == "take":
            return self.take(*rng.choice(takeable), line)
        if action == "drop":
            obj = rng.choice(sorted(self.carried_by))
            if allow_passing and rng.random() < 0.2:
                giver = self.carried_by[obj][0]
                giver_loc = self.actor_at.get(giver, (None, 0))[0]
                near = [a for a in ACTORS if a != giver and self.actor_at.get(a, ("", 0))[0] == giver_loc]
                if near:
                    return self.give(giver, obj, rng.choice(near), line)
            return self.drop(self.carried_by[obj][0], obj, line)
        return self.move(rng.choice(ACTORS), line)

    def question(self, task: int) -> tuple[str, str, list[int]] | None:
        """A question answerable from the story so far, or None if none is yet."""
        rng = self.rng
        if task == 1:
            if not self.actor_at:
                return None
            actor = rng.choice(sorted(self.actor_at))
            location, line = self.actor_at[actor]
            return f"Where is {actor}?", location, [line]
        if task == 2:
            known = []
            for obj, (carrier, take_line) in self.carried_by.items():
                if carrier in self.actor_at:
                    location, move_line = self.actor_at[carrier]
                    known.append((obj, location, sorted({take_line, move_line})))
            for obj, (location, drop_line) in self.object_at.items():
                known.append((obj, location, [drop_line]))
            if not known:
                return None
            obj, location, support = rng.choice(sorted(known))
            return f"Where is the {obj}?", location, support
        candidates = []
        for obj, hist in self.history.items():
            names = [loc for loc, _ in hist]
            for j in range(1, len(hist)):
                if names.count(names[j]) == 1:
                    candidates.append((obj, names[j], names[j - 1], [hist[j - 1][1], hist[j][1]]))
        if not candidates:
            return None
        obj, where, before, support = rng.choice(sorted(candidates))
        return f"Where was the {obj} before the {where}?", before, support


def generate_task(task: int, n_questions: int, seed: int, allow_passing: bool = False) -> list[Example]:
    """Generate ``n_questions`` questions of bAbI ``task`` (1, 2 or 3), deterministically.

    Args:
        task: 1 (single supporting fact), 2 (two) or 3 (three supporting facts).
        n_questions: number of questions; stories hold ``QUESTIONS_PER_STORY`` each.
        seed: seed of the simulation.
        allow_passing: let actors pass objects to one another (not in the official tasks 1-3).

    Returns:
        The examples, in story order.
    """
    if task not in TASK_FILES:
        raise ValueError(f"bAbI task {task!r} is not generated; allowed: {sorted(TASK_FILES)}")
    rng = random.Random(f"babi-{task}-{seed}")
    examples: list[Example] = []
    low, high = STATEMENTS_BETWEEN[task]
    while len(examples) < n_questions:
        world = _World(rng)
        story: list[str] = []
        asked = 0
        while asked < QUESTIONS_PER_STORY and len(examples) < n_questions:
            for _ in range(rng.randint(low, high)):
                story.append(world.step(task, len(story) + 1, allow_passing))
            question = world.question(task)
            if question is None:
                continue
            text, answer, support = question
            examples.append(Example(list(story), text, answer, support))
            asked += 1
    return examples


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


def load(name: str, config: PrepareConfig) -> RawSplits:
    """Raw examples of ``babi-<task>``: generated by the world simulation, or read from the official files."""
    task = int(name.split("-")[1])
    if config.source == "generate":
        train = generate_task(task, config.n_train, config.seed)
        test = generate_task(task, config.n_test, config.seed + 1_000_003)
    else:
        train, test = read_task_files(Path(config.source), task)
    to_raw = lambda exs: [RawExample(" ".join(e.story), e.answer, e.question) for e in exs]  # noqa: E731
    return RawSplits(to_raw(train), to_raw(test))
