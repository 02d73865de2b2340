"""Requests as lengths and states. Token ids live in the runtime, not here."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """One generated stream. `length` counts prompt plus generated tokens."""

    seq_id: int
    prompt_len: int
    output_len: int  # tokens this sequence will generate (EOS ignored, as the paper's benchmarks did)
    length: int = 0
    status: SeqStatus = SeqStatus.WAITING

    # written out so that mypyc compiles it (a dataclass's generated __init__ runs interpreted): one a sample
    def __init__(self, seq_id: int, prompt_len: int, output_len: int, length: int = 0,
                 status: SeqStatus = SeqStatus.WAITING) -> None:
        self.seq_id, self.prompt_len, self.output_len, self.status = seq_id, prompt_len, output_len, status
        self.length = length if length else prompt_len  # 0: the prompt, nothing generated yet

    @property
    def num_generated(self) -> int:
        return self.length - self.prompt_len

    @property
    def final_len(self) -> int:
        return self.prompt_len + self.output_len


@dataclass(slots=True, eq=False)
class SequenceGroup:
    """A request: one prompt and the n sequences sampled from it, or the k beams searched from it."""

    request_id: int
    arrival_s: float
    seqs: list[Sequence]
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0
    # the samples' histories are one: a single prefill computes the prompt for all of them.
    # False once a recompute has thrown away samples that diverged: each re-prefills its own.
    shares_prompt: bool = True
    # tokens at the start of the prompt that are the workload's shared prefix (0: none); the prompt
    # includes them. Whether they are shared is the allocator's business (vLLM: whole blocks, pinned).
    prefix_len: int = 0
    # set by the paged allocator when it (re)allocates the group: the prompt tokens already in the cache,
    # which its prefill attends over but does not compute (0 for the request that caches a shared prefix:
    # its prefill computes it, once, for every later one)
    num_cached_tokens: int = 0
    # beam search: the sequences are beams, and after each decode step the data plane says which
    # beam each surviving candidate continues (engine.core.beam); False: independent samples
    is_beam: bool = False
    # prefix caching (engine.core.block_manager): opaque keys of the request's full blocks, key i naming
    # tokens [0, (i + 1) block_size) (a chained hash; the data plane makes them); how many leading blocks of
    # each of its tables are keyed blocks the cache holds (counted once, by the cache, in the KV usage: a
    # shared prefix's among them); and the prompt tokens found cached when it was first admitted (-1: no
    # prefix cache)
    block_keys: tuple[int, ...] = ()
    cache_blocks: int = 0
    cached_prompt_tokens: int = -1
    # speculative decoding: the tokens its sequences proposed, and those the target accepted (engine.core.speculative)
    num_proposed_tokens: int = 0
    num_accepted_tokens: int = 0

    # written out so that mypyc compiles it: one a request
    def __init__(self, request_id: int, arrival_s: float, seqs: list[Sequence], first_token_s: float | None = None,
                 finish_s: float | None = None, num_preemptions: int = 0, shares_prompt: bool = True,
                 prefix_len: int = 0, num_cached_tokens: int = 0, is_beam: bool = False,
                 block_keys: tuple[int, ...] = (), cache_blocks: int = 0, cached_prompt_tokens: int = -1,
                 num_proposed_tokens: int = 0, num_accepted_tokens: int = 0) -> None:
        self.request_id, self.arrival_s, self.seqs = request_id, arrival_s, seqs
        self.first_token_s, self.finish_s, self.num_preemptions = first_token_s, finish_s, num_preemptions
        self.shares_prompt, self.prefix_len, self.num_cached_tokens = shares_prompt, prefix_len, num_cached_tokens
        self.is_beam, self.block_keys, self.cache_blocks = is_beam, block_keys, cache_blocks
        self.cached_prompt_tokens = cached_prompt_tokens
        self.num_proposed_tokens, self.num_accepted_tokens = num_proposed_tokens, num_accepted_tokens

    @property
    def prompt_len(self) -> int:
        return self.seqs[0].prompt_len

    @property
    def output_len(self) -> int:
        return self.seqs[0].output_len

    @property
    def num_seqs(self) -> int:
        return len(self.seqs)

    def live_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if s.status is not SeqStatus.FINISHED]

    def running_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if s.status is SeqStatus.RUNNING]

    def set_status(self, status: SeqStatus) -> None:
        for s in self.seqs:
            if s.status is not SeqStatus.FINISHED:
                s.status = status


class SequenceCounter:
    """Hands out sequence ids; one per scheduler so runs are independent."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next - 1


def make_group(request_id: int, arrival_s: float, prompt_len: int, output_len: int,
               n: int, next_seq_id: SequenceCounter, prefix_len: int = 0, beam_width: int = 1,
               block_keys: tuple[int, ...] = ()) -> SequenceGroup:
    """n samples, or (beam_width > 1) a beam search of that width; a request is one or the other."""
    if n > 1 and beam_width > 1:
        raise ValueError(f"request {request_id}: n={n} samples and beam_width={beam_width} together; "
                         "a request samples n sequences or searches beam_width beams, not both")
    count = max(n, beam_width)
    seqs = [Sequence(next_seq_id(), prompt_len, output_len) for _ in range(count)]
    return SequenceGroup(request_id, arrival_s, seqs, prefix_len=prefix_len, is_beam=beam_width > 1,
                         block_keys=block_keys)
