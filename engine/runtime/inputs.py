"""From a Batch and token lists to the model's flattened inputs, validated on the host.

Everything a forward needs is checked here, before any swap, copy or cache write runs:
a wrong length or block id in a Triton kernel does not fail, it corrupts someone else's KV.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.core.batch import Batch
from engine.core.blocks import blocks_for
from engine.runtime.model import AttentionMetadata

BlockTableFn = Callable[[int], list[int]]


@dataclass
class PoolLimits:
    """What the inputs must fit: the model's vocabulary and length, the KV pool."""

    vocab_size: int
    max_seq_len: int
    block_size: int
    num_gpu_blocks: int


@dataclass(frozen=True)
class TokenRun:
    """One sequence's tokens in a forward: rows first_row.. of the flattened batch, at positions start.."""

    seq_id: int
    first_row: int
    start: int
    count: int


@dataclass
class HostInputs:
    """Python-side inputs of one forward; `to_device` makes the tensors."""

    input_ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    slot_mapping: list[int] = field(default_factory=list)
    prefill_lens: list[int] = field(default_factory=list)  # tokens each prefill computes
    prefill_cached_lens: list[int] = field(default_factory=list)  # tokens before them already cached
    prefill_block_tables: list[list[int]] = field(default_factory=list)  # one per prefill
    block_tables: list[list[int]] = field(default_factory=list)  # decodes only
    context_lens: list[int] = field(default_factory=list)
    # row r of the logits belongs to these sequences (a prefill samples for all its forks)
    sample_ids: list[tuple[int, ...]] = field(default_factory=list)
    logit_rows: list[int] = field(default_factory=list)  # token index of each logits row
    # speculative decoding: the decodes verified (each a chunk of its last token and its proposals, among the
    # prefills), and how many proposals each; their logits rows follow the sampled ones', proposals + 1 each
    verify_ids: list[int] = field(default_factory=list)
    verify_proposed: list[int] = field(default_factory=list)
    runs: list[TokenRun] = field(default_factory=list)  # each sequence's tokens, in row order

    def to_device(self, device: torch.device, backend: str
                  ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """input_ids, positions, attention metadata, and the token index of each logits row.
        Every tensor is uploaded without a sync (see `upload`)."""
        ints, ints32 = dict(dtype=torch.int64, device=device), dict(dtype=torch.int32, device=device)
        meta = AttentionMetadata(
            prefill_lens=self.prefill_lens,
            slot_mapping=upload(self.slot_mapping, **ints),
            block_tables=_padded_tables(self.block_tables, device),
            context_lens=upload(self.context_lens, dtype=torch.int32, device=device),
            backend=backend,
            prefill_cached_lens=self.prefill_cached_lens if any(self.prefill_cached_lens) else None,
            prefill_block_tables=(_padded_tables(self.prefill_block_tables, device)
                                  if self.prefill_block_tables else None),
            prefill_cu_seqlens=upload([0, *itertools.accumulate(self.prefill_lens)], **ints32),
            prefill_context_lens=upload([c + n for c, n in zip(self.prefill_cached_lens, self.prefill_lens)],
                                        **ints32))
        return (upload(self.input_ids, **ints), upload(self.positions, **ints), meta,
                upload(self.logit_rows, **ints))


def upload(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list as a tensor on `device`, with no host-device sync: on CUDA through page-locked memory
    and a non-blocking copy, ordered on the stream before the kernels that read it. (torch.tensor(...,
    device="cuda") copies from pageable memory, which waits for the stream: one sync per tensor.)
    The page-locked block comes from torch's caching host allocator, which keeps it until the copy is done."""
    host = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return host
    if host.numel() == 0:  # nothing to copy
        return torch.empty(host.shape, dtype=dtype, device=device)
    return host.pin_memory().to(device, non_blocking=True)


def _padded_tables(tables: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max((len(t) for t in tables), default=0)
    padded = [t + [-1] * (width - len(t)) for t in tables]  # -1: never read
    return upload(padded, dtype=torch.int32, device=device).view(len(padded), width)


def _slots(table: list[int], num_tokens: int, block_size: int, start: int = 0) -> list[int]:
    return [table[i // block_size] * block_size + i % block_size for i in range(start, num_tokens)]


def _check_table(seq_id: int, table: list[int], num_tokens: int, limits: PoolLimits) -> None:
    needed = blocks_for(num_tokens, limits.block_size)
    if len(table) < needed:
        raise ValueError(
            f"sequence {seq_id}: context of {num_tokens} tokens needs {needed} blocks of "
            f"{limits.block_size} but its block table holds {len(table)}")
    for block in table[:needed]:
        if not 0 <= block < limits.num_gpu_blocks:
            raise ValueError(f"sequence {seq_id}: block id {block} is outside the KV pool "
                             f"(0..{limits.num_gpu_blocks - 1})")


def _check_tokens(seq_id: int, tokens: dict[int, list[int]], length: int, role: str,
                  limits: PoolLimits) -> list[int]:
    if seq_id not in tokens:
        raise ValueError(f"no tokens given for sequence {seq_id} ({role} in the batch)")
    seq_tokens = tokens[seq_id]
    if len(seq_tokens) != length:
        raise ValueError(f"sequence {seq_id} has {len(seq_tokens)} tokens but the batch "
                         f"{role}s it at length {length}")
    if not 0 < length <= limits.max_seq_len:
        raise ValueError(f"sequence {seq_id}: length {length} is outside 1..{limits.max_seq_len} "
                         "(the model's max_seq_len)")
    return seq_tokens


def _check_vocab(input_ids: list[int], limits: PoolLimits) -> None:
    if input_ids and not 0 <= min(input_ids) <= max(input_ids) < limits.vocab_size:
        bad = min(input_ids) if min(input_ids) < 0 else max(input_ids)
        raise ValueError(f"token id {bad} is outside the vocabulary 0..{limits.vocab_size - 1}")


def build_inputs(batch: Batch, tokens: dict[int, list[int]], block_table_fn: BlockTableFn,
                 limits: PoolLimits, proposals: dict[int, list[int]] | None = None) -> HostInputs:
    """Prefills first (whole token runs), then the verifies (a speculating decode's last token and its
    proposals, a chunk over its cached context, as chunked prefill computes one), then one token per decode;
    raises ValueError on bad input. proposals: seq_id -> the tokens a decode proposes, as many as the batch's
    decode_proposed says."""
    if not (len(batch.prefill_seq_ids) == len(batch.prefill_lens) == len(batch.prefill_sample_ids)):
        raise ValueError("batch prefill_seq_ids, prefill_lens and prefill_sample_ids differ in length")
    if len(batch.decode_seq_ids) != len(batch.decode_context_lens):
        raise ValueError("batch decode_seq_ids and decode_context_lens differ in length")
    cached_lens = batch.prefill_cached_lens or [0] * len(batch.prefill_seq_ids)
    if len(cached_lens) != len(batch.prefill_seq_ids):
        raise ValueError("batch prefill_cached_lens must be empty or have one entry per prefill")
    out = HostInputs()
    for seq_id, length, sample_ids, cached in zip(batch.prefill_seq_ids, batch.prefill_lens,
                                                  batch.prefill_sample_ids, cached_lens):
        _add_prefill(out, seq_id, length, cached, tuple(sample_ids), tokens, block_table_fn, limits)
    proposed = _proposed_counts(batch)
    verify_rows: list[int] = []
    for seq_id, context, count in zip(batch.decode_seq_ids, batch.decode_context_lens, proposed):
        if count:
            _add_verify(out, seq_id, context, _proposal(seq_id, count, proposals), tokens, block_table_fn, limits)
            verify_rows.extend(range(len(out.input_ids) - count - 1, len(out.input_ids)))
    for seq_id, context, count in zip(batch.decode_seq_ids, batch.decode_context_lens, proposed):
        if not count:
            _add_decode(out, seq_id, context, tokens, block_table_fn, limits)
    out.logit_rows.extend(verify_rows)
    _check_vocab(out.input_ids, limits)
    if len(set(out.slot_mapping)) != len(out.slot_mapping):
        # two tokens into one slot: a shared block was written without copy-on-write
        raise ValueError("two tokens of the batch write the same KV slot (a missed copy-on-write?)")
    sampled = [s for ids in out.sample_ids for s in ids]
    if len(set(sampled)) != len(sampled):
        raise ValueError("a sequence is sampled twice in one batch")
    return out


def _add_prefill(out: HostInputs, seq_id, length, cached, sample_ids, tokens, block_table_fn, limits) -> None:
    """The prefill computes tokens [cached, cached + length) and attends over all before them too."""
    if length < 1 or cached < 0:
        raise ValueError(f"prefill of sequence {seq_id}: {length} new tokens after {cached} cached ones; "
                         "needs at least one new token")
    total = cached + length
    if sample_ids:
        seq_tokens = _check_tokens(seq_id, tokens, total, "prefill", limits)
    else:  # a chunk of a prompt that later chunks finish (chunked prefill): it computes KV and samples nothing
        seq_tokens = _check_tokens(seq_id, tokens, len(tokens.get(seq_id, ())), "prefill", limits)
        if len(seq_tokens) <= total:
            raise ValueError(f"prefill of sequence {seq_id} samples for no sequence, but its tokens [{cached}, "
                             f"{total}) are not a chunk of its {len(seq_tokens)} (only a prompt's last chunk samples)")
    for sample_id in sample_ids:
        # forks sample from the prefill's logits, so they must hold the very same tokens
        if sample_id != seq_id and tokens.get(sample_id) != seq_tokens:
            raise ValueError(f"sequence {sample_id} samples from the prefill of sequence {seq_id} "
                             "but their tokens differ")
    table = block_table_fn(seq_id)
    _check_table(seq_id, table, total, limits)
    start = len(out.input_ids)
    out.runs.append(TokenRun(seq_id, start, cached, length))
    out.input_ids.extend(seq_tokens[cached:total])
    out.positions.extend(range(cached, total))
    out.slot_mapping.extend(_slots(table, total, limits.block_size, start=cached))
    out.prefill_lens.append(length)
    out.prefill_cached_lens.append(cached)
    out.prefill_block_tables.append(list(table[:blocks_for(total, limits.block_size)]))
    if sample_ids:
        out.sample_ids.append(sample_ids)
        out.logit_rows.append(start + length - 1)


def _add_decode(out: HostInputs, seq_id, context, tokens, block_table_fn, limits) -> None:
    seq_tokens = _check_tokens(seq_id, tokens, context, "decode", limits)
    table = list(block_table_fn(seq_id))
    _check_table(seq_id, table, context, limits)
    out.logit_rows.append(len(out.input_ids))
    out.runs.append(TokenRun(seq_id, len(out.input_ids), context - 1, 1))
    out.input_ids.append(seq_tokens[-1])
    out.positions.append(context - 1)
    out.slot_mapping.extend(_slots(table, context, limits.block_size, start=context - 1))
    out.block_tables.append(table[:blocks_for(context, limits.block_size)])
    out.context_lens.append(context)
    out.sample_ids.append((seq_id,))


def _proposed_counts(batch: Batch) -> list[int]:
    if not batch.decode_proposed:
        return [0] * len(batch.decode_seq_ids)
    if len(batch.decode_proposed) != len(batch.decode_seq_ids):
        raise ValueError("batch decode_proposed must be empty or have one entry per decode")
    return batch.decode_proposed


def _proposal(seq_id: int, count: int, proposals: dict[int, list[int]] | None) -> list[int]:
    proposal = (proposals or {}).get(seq_id)
    if proposal is None or len(proposal) != count:
        got = "none" if proposal is None else len(proposal)
        raise ValueError(f"sequence {seq_id} proposes {count} tokens in the batch, but {got} were given")
    return proposal


def _add_verify(out: HostInputs, seq_id, context, proposal, tokens, block_table_fn, limits) -> None:
    """A speculating decode: its last token and its proposals, computed over its context's cached KV; every one
    of their logits rows is kept (the target's distribution after each)."""
    seq_tokens = _check_tokens(seq_id, tokens, context, "decode", limits)
    total = context + len(proposal)
    if total > limits.max_seq_len:
        raise ValueError(f"sequence {seq_id}: {context} tokens and {len(proposal)} proposals exceed "
                         f"{limits.max_seq_len} (the model's max_seq_len)")
    table = block_table_fn(seq_id)
    _check_table(seq_id, table, total, limits)
    out.runs.append(TokenRun(seq_id, len(out.input_ids), context - 1, len(proposal) + 1))
    out.input_ids.extend([seq_tokens[-1], *proposal])
    out.positions.extend(range(context - 1, total))
    out.slot_mapping.extend(_slots(table, total, limits.block_size, start=context - 1))
    out.prefill_lens.append(len(proposal) + 1)
    out.prefill_cached_lens.append(context - 1)
    out.prefill_block_tables.append(list(table[:blocks_for(total, limits.block_size)]))
    out.verify_ids.append(seq_id)
    out.verify_proposed.append(len(proposal))


@dataclass
class Chunk:
    """Tokens of one sequence computed at positions start.. over its cached KV (a draft model's work);
    logits: whether the last one's logits row is wanted."""

    seq_id: int
    start: int
    tokens: list[int]
    logits: bool = False


def chunk_inputs(chunks: list[Chunk], block_table_fn: BlockTableFn, limits: PoolLimits) -> HostInputs:
    """Every chunk as a prefill chunk over its cached context; raises ValueError on bad input."""
    out = HostInputs()
    for chunk in chunks:
        stop = chunk.start + len(chunk.tokens)
        if not chunk.tokens or chunk.start < 0 or stop > limits.max_seq_len:
            raise ValueError(f"sequence {chunk.seq_id}: a chunk of positions [{chunk.start}, {stop}) is empty or "
                             f"outside 0..{limits.max_seq_len - 1}")
        table = block_table_fn(chunk.seq_id)
        _check_table(chunk.seq_id, table, stop, limits)
        out.runs.append(TokenRun(chunk.seq_id, len(out.input_ids), chunk.start, len(chunk.tokens)))
        out.input_ids.extend(chunk.tokens)
        out.positions.extend(range(chunk.start, stop))
        out.slot_mapping.extend(_slots(table, stop, limits.block_size, start=chunk.start))
        out.prefill_lens.append(len(chunk.tokens))
        out.prefill_cached_lens.append(chunk.start)
        out.prefill_block_tables.append(list(table[:blocks_for(stop, limits.block_size)]))
        if chunk.logits:
            out.sample_ids.append((chunk.seq_id,))
            out.logit_rows.append(len(out.input_ids) - 1)
    _check_vocab(out.input_ids, limits)
    return out
