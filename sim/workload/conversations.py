"""Conversations as rounds of (query, response) token lengths: what the chatbot workload plays.

A conversation file is a CSV `conversation,round,query_len,response_len` (leading `#` lines
allowed): one row per round, each conversation's rounds in consecutive rows numbered 1, 2, 3, ...
Lengths are whole turns, uncut; the chatbot generator (chatbot.py) makes the cuts. The shipped
one, `dataset: chatbot`, holds real ShareGPT conversations (provenance: traces/README.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import SpecError

from .paths import chatbot_csv
from .table import Table, find_columns, numeric_column, read_table, row_error
from .tokenizer_choice import OPT, TOKENIZERS, tokens_label

COLUMNS = ("conversation", "round", "query_len", "response_len")
CONVERSATION_NAMES = ("chatbot",)


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class Conversations:
    """Rounds in file order; conversation k's rounds are rows start[k] to start[k + 1] - 1."""
    conversation_id: np.ndarray   # int64, one per conversation, as written in the file
    start: np.ndarray             # int64, len(conversations) + 1 row offsets
    query_len: np.ndarray         # int64 per round, >= 1
    response_len: np.ndarray      # int64 per round, >= 1
    source: str

    def __post_init__(self):
        for name in ("conversation_id", "start", "query_len", "response_len"):
            values = np.array(getattr(self, name), dtype=np.int64).reshape(-1)
            values.setflags(write=False)
            object.__setattr__(self, name, values)
        if len(self.start) != len(self.conversation_id) + 1 or self.start[-1] != len(self.query_len):
            raise ValueError("start must hold one offset per conversation and end at the number of rounds")

    def __len__(self) -> int:
        return len(self.conversation_id)

    @property
    def num_rounds(self) -> np.ndarray:
        """Rounds of each conversation."""
        return np.diff(self.start)

    @property
    def round(self) -> np.ndarray:
        """Each row's round, from 1."""
        rows = np.arange(len(self.query_len))
        return rows - np.repeat(self.start[:-1], self.num_rounds) + 1

    def history_len(self) -> np.ndarray:
        """Per round: tokens of every earlier round of its conversation (queries and whole responses)."""
        exchanged = np.cumsum(self.query_len + self.response_len)
        before = exchanged - (self.query_len + self.response_len)        # all earlier rows of the file
        return before - np.repeat(before[self.start[:-1]], self.num_rounds)  # less earlier conversations


def is_conversation_dataset(dataset: str | Path) -> bool:
    """`chatbot`, or a file whose header has the conversation and round columns."""
    if str(dataset) in CONVERSATION_NAMES:
        return True
    path = Path(dataset)
    if not path.is_file() or path.suffix.lower() == ".json":
        return False
    header = _header_line(path)
    names = {name.strip().lower() for name in header.split(",")} if header else set()
    return {"conversation", "round"} <= names


def _header_line(path: Path) -> str | None:
    """The first line that is neither blank nor a `#` comment, read without loading the file."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip() and not line.lstrip().startswith("#"):
                    return line
    except (OSError, UnicodeDecodeError):
        return None  # not a readable text file: the lengths reader gives the error that names it
    return None


def read_conversations_csv(path: str | Path) -> Conversations:
    table = read_table(path)
    _, indices = find_columns(table, {"conversations": COLUMNS})
    conversation, rounds, query, response = (numeric_column(table, i, integer=True) for i in indices)
    for index, values in ((indices[2], query), (indices[3], response)):
        empty = np.flatnonzero(values < 1)
        if empty.size:
            raise row_error(table, empty[0], table.header[index], "0 tokens; every round needs a query and a "
                             "response of at least 1 token")
    starts = _check_rounds(table, conversation, rounds, (table.header[indices[0]], table.header[indices[1]]))
    return Conversations(conversation[starts], np.append(starts, len(rounds)), query, response,
                         f"{Path(path).stem} ({table.source})")


def _check_rounds(table: Table, conversation: np.ndarray, rounds: np.ndarray,
                  names: tuple[str, str]) -> np.ndarray:
    """Rows where a conversation starts, after checking rounds count 1, 2, 3, ... in consecutive rows."""
    starts = np.flatnonzero(np.diff(conversation, prepend=-1) != 0)
    expected = np.arange(len(rounds)) - np.repeat(starts, np.diff(np.append(starts, len(rounds)))) + 1
    wrong = np.flatnonzero(rounds != expected)
    if wrong.size:
        i = int(wrong[0])
        where = (f"on the first row of conversation {conversation[i]} (the row before is another one)"
                 if expected[i] == 1 else f"after round {expected[i] - 1} of conversation {conversation[i]}")
        raise row_error(table, i, names[1], (
            f"{rounds[i]} {where}; a conversation's rounds are consecutive rows numbered 1, 2, 3, ..., "
            f"so this must be {expected[i]}"))
    seen: set[int] = set()
    for row in starts.tolist():
        if int(conversation[row]) in seen:
            raise row_error(table, row, names[0], (
                f"conversation {conversation[row]} appears again after other conversations; "
                "its rounds must be consecutive rows"))
        seen.add(int(conversation[row]))
    return starts


_cache: dict[tuple, Conversations] = {}


def load_conversations(dataset: str | Path, tokenizer: str = OPT) -> Conversations:
    """`chatbot` (the shipped ShareGPT conversations, in the tokenizer's counts: tokenizer_choice.py) or a
    conversation CSV by path (already resolved), which carries its own."""
    if str(dataset) in CONVERSATION_NAMES:
        path = chatbot_csv(TOKENIZERS[tokenizer].stem)
        if not path.is_file():
            option = "" if tokenizer == OPT else f" --tokenizer {tokenizer}"
            raise SpecError("workload", "dataset", f"{path} is missing; rebuild it with "
                            f"`servesim trace build chatbot{option}`")
        table = _read_cached(path)
        return Conversations(table.conversation_id, table.start, table.query_len, table.response_len,
                             f"sharegpt conversations (sim/workload/data/{path.name}{tokens_label(tokenizer)})")
    return _read_cached(Path(dataset))


def _read_cached(path: Path) -> Conversations:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise SpecError(str(path), "", "file not found") from None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:  # immutable; a sweep reads the file once
        if len(_cache) >= 4:
            _cache.clear()
        _cache[key] = read_conversations_csv(path)
    return _cache[key]
