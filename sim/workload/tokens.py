"""Token identities of a workload: which requests' tokens are the same tokens, without the tokens.

Prefix caching reuses a KV block when two requests' token streams agree up to the end of that block. A
workload says which tokens agree as segments: each request's stream (prompt, then output) is a run of
segments (segment id, start, length), the tokens start .. start + length - 1 of the segment named by
the id (a system prompt, a conversation's query or response, a request's own text). Two streams hold
the same token wherever they hold the same position of the same segment.

A block's key chains the block before it with the token runs it covers, so two requests' block keys
agree exactly on the leading full blocks their streams share (engine.core.block_manager). Keys are
Python's hash of tuples of ints: the same on every machine and run (only str and bytes hashes are
salted).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .trace import Segment, TokenSegments, Trace

PREFIX_SEGMENT = -1  # the shared prefix of a prefix_tokens workload


def own_segments(prompt_len: np.ndarray, output_len: np.ndarray, prefix_len: int = 0) -> TokenSegments:
    """Requests that share nothing but a prefix of prefix_len tokens: each one's own text after it
    (segment ids -2, -3, ...: no workload's own ids, which are >= 0)."""
    requests = []
    for i, (prompt, output) in enumerate(zip(prompt_len.tolist(), output_len.tolist())):
        own = (-2 - i, 0, prompt + output - prefix_len)
        requests.append([(PREFIX_SEGMENT, 0, prefix_len), own] if prefix_len else [own])
    return TokenSegments.of(requests)


def system_prompt_segments(system_prompt: np.ndarray, system_tokens: int, prompt_len: np.ndarray,
                           output_len: np.ndarray) -> TokenSegments:
    """Each request: system prompt system_prompt[i] (segment id = its number, from 0), then its own text
    (user turn and output: segment -2 - i)."""
    return TokenSegments.of([[(k, 0, system_tokens), (-2 - i, 0, prompt + output - system_tokens)]
                             for i, (k, prompt, output) in enumerate(zip(system_prompt.tolist(), prompt_len.tolist(),
                                                                         output_len.tolist()))])


def chatbot_segments(start: np.ndarray, query_len: np.ndarray, response_len: np.ndarray, rows: np.ndarray,
                     prompt_len: np.ndarray, output_len: np.ndarray) -> TokenSegments:
    """Each request plays a row (round) of a conversation file (conversation k's rows start[k] ..): its
    prompt is the conversation's earlier queries and responses and its query (row r's query is segment 2r,
    its response 2r + 1), of which it keeps the last prompt_len tokens; its output is the first output_len
    tokens of its round's response. So a later round's prompt starts with an earlier round's prompt and
    output, as long as the cut leaves its start in place."""
    first_row = np.repeat(start[:-1], np.diff(start))
    queries, responses = query_len.tolist(), response_len.tolist()
    requests = []
    for row, prompt, output in zip(rows.tolist(), prompt_len.tolist(), output_len.tolist()):
        stream: list[Segment] = []
        for k in range(int(first_row[row]), row):
            stream += [(2 * k, 0, queries[k]), (2 * k + 1, 0, responses[k])]
        stream.append((2 * row, 0, queries[row]))
        requests.append(_last_tokens(stream, prompt) + [(2 * row + 1, 0, output)])
    return TokenSegments.of(requests)


def _last_tokens(stream: list[Segment], count: int) -> list[Segment]:
    """The segments of the last `count` tokens of a stream."""
    drop = sum(length for _, _, length in stream) - count
    kept: list[Segment] = []
    for seg_id, start, length in stream:
        if drop >= length:
            drop -= length
            continue
        kept.append((seg_id, start + drop, length - drop))
        drop = 0
    return kept


def block_keys(segments: Sequence[Segment], block_size: int, num_tokens: int) -> tuple[int, ...]:
    """Keys of the full blocks of the first num_tokens tokens of a stream: key i = hash(key i-1, the
    token runs of block i), runs merged where one segment continues, so the key depends on the tokens
    alone, not on how the workload cut them into segments."""
    keys: list[int] = []
    runs: list[list[int]] = []  # the current block's runs: [segment id, first, end]
    filled, key = 0, 0
    for seg_id, start, length in segments:
        position = start
        length = min(length, num_tokens - len(keys) * block_size - filled)
        while length > 0:
            take = min(length, block_size - filled)
            if runs and runs[-1][0] == seg_id and runs[-1][2] == position:
                runs[-1][2] += take
            else:
                runs.append([seg_id, position, position + take])
            position, length, filled = position + take, length - take, filled + take
            if filled == block_size:
                key = hash((key, tuple(tuple(run) for run in runs)))
                keys.append(key)
                runs, filled = [], 0
    return tuple(keys)


def keys_per_request(segments: TokenSegments, block_size: int, num_tokens: np.ndarray) -> list[tuple[int, ...]]:
    """block_keys of every request, over its first num_tokens[i] tokens."""
    return [block_keys(segments.request(i), block_size, int(n)) for i, n in enumerate(num_tokens.tolist())]


def token_segments(trace: Trace) -> TokenSegments:
    """The trace's token identities: the workload's, or each request's own text after the shared prefix."""
    if trace.segments is not None:
        return trace.segments
    return own_segments(trace.prompt_len, trace.output_len, trace.prefix_len)


def with_block_keys(trace: Trace, block_size: int) -> Trace:
    """The same requests carrying the keys of their full blocks (prompt and output) for this block size
    (Trace.block_keys: a simulation with prefix caching gives them to its requests)."""
    keys = keys_per_request(token_segments(trace), block_size, trace.prompt_len + trace.output_len)
    return Trace(trace.arrival_s, trace.prompt_len, trace.output_len, trace.n, trace.source, trace.duration_s,
                 beam_width=trace.beam_width, prefix_len=trace.prefix_len, segments=trace.segments, block_keys=keys)
