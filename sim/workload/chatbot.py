"""The chatbot workload (paper Fig. 17): arrivals play rounds of conversations, each with its history.

The authors' generator (benchmark/benchmark_chatbot.py and trace.py@452c511; paper-facts C, Fig. 17):

- Each arrival starts a new conversation with probability `new_conversation_prob` (their
  `--new-prob`, default 0.1); otherwise it plays the next round of an open conversation, chosen
  uniformly at random among those open (their `random.randint` over started conversations). When
  none is open, a new one starts whatever the coin said. So a conversation's rounds are spread
  over time, interleaved with others', as users' turns would be. With few rounds per conversation
  the open ones run out often, and more than `new_conversation_prob` of arrivals start one.
- A new conversation is the next of the file's conversations in a shuffled order (the same as
  their uniform pick among those not yet started). When all have started, the file is played again
  in a new order, as the text-completion generator cycles its pairs.
- A round's prompt is the conversation so far (every earlier query and whole response) plus its
  query, cut to the last max_seq_len // 2 tokens (1,024 for OPT); its output is the round's
  response cut to max_seq_len - max_seq_len // 2 - 8 (1,016; the paper's text says 1,024, their code
  leaves 8 of the 2,048 unused so that a full prompt and output always fit). No KV is kept between
  rounds (every round is a request of its own), unless the system caches prefixes: the requests carry
  their token identities (tokens.chatbot_segments), so a round can find its earlier rounds' blocks cached.

Draw order is fixed (the coins, the picks, then a shuffled order each time the file is started
afresh) so the same seed gives the same requests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import SpecError

from .conversations import Conversations
from .tokens import TokenSegments, chatbot_segments

DEFAULT_NEW_CONVERSATION_PROB = 0.1
OUTPUT_MARGIN = 8  # tokens of max_seq_len the authors' output cap leaves unused


@dataclass(frozen=True)
class ChatbotCuts:
    prompt: int   # a prompt keeps its last `prompt` tokens
    output: int   # an output is at most `output` tokens

    @classmethod
    def for_model(cls, max_seq_len: int) -> ChatbotCuts:
        prompt = max_seq_len // 2
        output = max_seq_len - prompt - OUTPUT_MARGIN
        if output < 1:
            raise SpecError("workload", "dataset", f"the chatbot workload needs a model whose max_seq_len is at "
                            f"least {2 * (OUTPUT_MARGIN + 1)} tokens, got {max_seq_len}")
        return cls(prompt, output)


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class ChatbotRequests:
    row: np.ndarray         # int64: the conversation file's row (conversation and round) each request plays
    started: np.ndarray     # bool: the request is its conversation's first round
    prompt_len: np.ndarray  # int64, history + query, cut
    output_len: np.ndarray  # int64, response, cut
    cuts: ChatbotCuts
    segments: TokenSegments  # token identities: a later round's prompt holds the earlier rounds' (prefix caching)


def chatbot_requests(conversations: Conversations, count: int, new_conversation_prob: float,
                     max_seq_len: int, rng: np.random.Generator) -> ChatbotRequests:
    """`count` requests, in arrival order, played from `conversations`."""
    if len(conversations) == 0:
        raise SpecError(conversations.source, "", "no conversations to play")
    cuts = ChatbotCuts.for_model(max_seq_len)
    row, started = _play(conversations, count, new_conversation_prob, rng)
    prompt, output = every_round(conversations, cuts)
    segments = chatbot_segments(conversations.start, conversations.query_len, conversations.response_len, row,
                                prompt[row], output[row])
    return ChatbotRequests(row, started, prompt[row], output[row], cuts, segments)


def every_round(conversations: Conversations, cuts: ChatbotCuts) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) of each row of the file as a request: history + query and response, cut."""
    prompt = np.minimum(conversations.history_len() + conversations.query_len, cuts.prompt)
    return prompt, np.minimum(conversations.response_len, cuts.output)


def _play(conversations: Conversations, count: int, new_conversation_prob: float,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Which row each arrival plays, and whether it starts its conversation."""
    coin_new = (rng.random(count) < new_conversation_prob).tolist()
    pick = rng.random(count).tolist()
    first, end = conversations.start[:-1].tolist(), conversations.start[1:].tolist()
    unstarted: list[int] = []
    next_row: list[int] = []   # per open conversation: the row of its next round
    last_row: list[int] = []   # and of its last
    rows = np.empty(count, np.int64)
    started = np.zeros(count, bool)
    for i in range(count):
        if coin_new[i] or not next_row:
            if not unstarted:  # popped from the end: reversed, so the shuffled order is played from its front
                unstarted = rng.permutation(len(first))[::-1].tolist()
            conversation = unstarted.pop()
            row = first[conversation]
            started[i] = True
            if end[conversation] - row > 1:
                next_row.append(row + 1)
                last_row.append(end[conversation] - 1)
        else:
            j = int(pick[i] * len(next_row))
            row = next_row[j]
            if row == last_row[j]:  # its last round: the conversation closes
                del next_row[j], last_row[j]
            else:
                next_row[j] = row + 1
        rows[i] = row
    return rows, started


def chatbot_label(source: str, new_conversation_prob: float, cuts: ChatbotCuts) -> str:
    """What a chatbot trace is, for every output that carries its source."""
    return (f"{source}; chatbot: new conversation p={new_conversation_prob:g}, prompt = conversation so far "
            f"+ query, last {cuts.prompt} tokens; output cut to {cuts.output}; no KV kept between rounds")
