"""Decode through CUDA graphs: one capture per batch-size bucket, replayed over static buffers.

A decode iteration of a large model on a fast GPU is host-bound when run eagerly: Python launches a
dozen kernels per layer and the GPU waits for them. vLLM captures the decode step once per batch-size
bucket (1, 2, 4, 8, then multiples of 8 up to the largest batch) and replays it; so does this engine.
A batch of n decodes runs in the smallest bucket B >= n: its inputs are copied into the first B rows
of static buffers (token ids, positions, slots, block tables padded to the widest table the model
allows, context lengths), and the rows past n are padding that cannot touch the real ones: slot -1
(nothing written to the KV cache), context length 0 (the paged kernel reads nothing and writes zeros),
token 0 at position 0. Every operation of the decoder works row by row, so the first n rows of the
logits are the eager forward's.

Prefills, and decodes of more sequences than the largest bucket, run eagerly. Capture needs kernels
that never read the device on the host: the Triton ones (the torch references compute their longest
context with a sync), so graphs run only with them, on CUDA. `capture` is a parameter so that the
staging and padding run on a CPU in tests, with an eager stand-in for the graph.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.runtime.inputs import HostInputs
from engine.runtime.model import AttentionMetadata

MAX_GRAPH_BATCH = 256  # vLLM's default max_num_seqs: the largest bucket captured
PAD_SLOT = -1  # a slot < 0 is never written (engine.kernels.write_kv_cache)
WARMUP_RUNS = 2  # eager runs before a capture: Triton compiles, the allocator settles
# (replay, static output) from a forward over static buffers; the pool handle lets captures share memory
Capture = Callable[[Callable[[], torch.Tensor], object], tuple[Callable[[], None], torch.Tensor]]


def bucket_size(num_seqs: int) -> int:
    """The bucket a batch of num_seqs decodes runs in: 1, 2, 4, 8, then the next multiple of 8."""
    if num_seqs < 1:
        raise ValueError(f"a decode batch holds at least one sequence, got {num_seqs}")
    for small in (1, 2, 4):
        if num_seqs <= small:
            return small
    return -(-num_seqs // 8) * 8


def decode_buckets(max_batch: int) -> tuple[int, ...]:
    """Every bucket up to the one that holds max_batch decodes (vLLM's capture list)."""
    top = bucket_size(max_batch)
    return tuple(b for b in (1, 2, 4, *range(8, top + 1, 8)) if b <= top)


@dataclass(frozen=True)
class PaddedDecode:
    """A decode batch's inputs padded to its bucket, as host lists (what is copied to the static buffers)."""

    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    block_tables: list[list[int]]  # bucket rows x width
    context_lens: list[int]


def pad_decode(host: HostInputs, bucket: int, width: int) -> PaddedDecode:
    """`host` (decodes only) padded to `bucket` rows and its block tables to `width` columns."""
    num = len(host.context_lens)
    if host.prefill_lens or num == 0:
        raise ValueError("only a batch of decodes alone runs in a decode graph")
    if num > bucket:
        raise ValueError(f"{num} decodes do not fit a bucket of {bucket}")
    widest = max(len(t) for t in host.block_tables)
    if widest > width:
        raise ValueError(f"a block table of {widest} blocks is wider than the graph's {width}")
    pad = bucket - num
    tables = [list(t) + [-1] * (width - len(t)) for t in host.block_tables] + [[-1] * width] * pad
    return PaddedDecode(host.input_ids + [0] * pad, host.positions + [0] * pad,
                        host.slot_mapping + [PAD_SLOT] * pad, tables, host.context_lens + [0] * pad)


def padding_only(bucket: int, width: int) -> PaddedDecode:
    """A bucket of padding alone: what a capture runs over, so that its warm-up writes nothing."""
    return PaddedDecode([0] * bucket, [0] * bucket, [PAD_SLOT] * bucket, [[-1] * width] * bucket, [0] * bucket)


class DecodeBuffers:
    """The static inputs every decode graph reads: the largest bucket's rows; bucket B uses the first B."""

    def __init__(self, rows: int, width: int, device: torch.device):
        ints = dict(dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(rows, **ints)
        self.positions = torch.zeros(rows, **ints)
        self.slot_mapping = torch.full((rows,), PAD_SLOT, **ints)
        self.block_tables = torch.full((rows, width), -1, dtype=torch.int32, device=device)
        self.context_lens = torch.zeros(rows, dtype=torch.int32, device=device)
        self.width = width

    def meta(self, bucket: int, backend: str) -> AttentionMetadata:
        return AttentionMetadata(prefill_lens=[], slot_mapping=self.slot_mapping[:bucket],
                                 block_tables=self.block_tables[:bucket], context_lens=self.context_lens[:bucket],
                                 backend=backend)

    def stage(self, padded: PaddedDecode) -> None:
        """Copy a padded batch into the first rows: non-blocking from page-locked memory on CUDA (no sync)."""
        rows = len(padded.context_lens)
        for name, dtype in (("input_ids", torch.int64), ("positions", torch.int64), ("slot_mapping", torch.int64),
                            ("block_tables", torch.int32), ("context_lens", torch.int32)):
            static = getattr(self, name)[:rows]
            host = torch.tensor(getattr(padded, name), dtype=dtype).view(static.shape)
            if static.device.type == "cuda":
                host = host.pin_memory()
            static.copy_(host, non_blocking=static.device.type == "cuda")


def cuda_capture(forward: Callable[[], torch.Tensor], pool) -> tuple[Callable[[], None], torch.Tensor]:
    """Warm up on a side stream (Triton compiles outside the capture), then capture one run."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_RUNS):
            forward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = forward()
    return graph.replay, output


def eager_capture(forward: Callable[[], torch.Tensor], pool) -> tuple[Callable[[], None], torch.Tensor]:
    """A stand-in for a graph on a CPU: a replay reruns the forward into the same static output."""
    output = forward()
    return (lambda: output.copy_(forward())), output


class DecodeGraphs:
    """The decode step captured per bucket (on first use, or all at once with `capture_all`) and replayed."""

    def __init__(self, model, caches, max_batch: int, width: int, backend: str, *,
                 capture: Capture = cuda_capture):
        self.model, self.caches, self.backend, self.capture = model, caches, backend, capture
        self.buckets = decode_buckets(max_batch)
        device = model.device
        self.buffers = DecodeBuffers(self.buckets[-1], width, device)
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
        self.graphs: dict[int, tuple[Callable[[], None], torch.Tensor]] = {}

    @property
    def largest(self) -> int:
        return self.buckets[-1]

    def serves(self, host: HostInputs) -> bool:
        """A batch of decodes alone, no more than the largest bucket holds."""
        return not host.prefill_lens and 0 < len(host.context_lens) <= self.largest

    @torch.inference_mode()
    def capture_all(self) -> None:
        """Capture every bucket now, largest first (as vLLM does: the later ones fit in its memory)."""
        for bucket in reversed(self.buckets):
            if bucket not in self.graphs:
                self._capture(bucket)

    def prepare(self, host: HostInputs) -> int:
        """Stage a decode batch into its bucket's static rows (capturing the bucket first if need be);
        returns the bucket to replay."""
        bucket = bucket_size(len(host.context_lens))
        if bucket not in self.graphs:
            self._capture(bucket)
        self.buffers.stage(pad_decode(host, bucket, self.buffers.width))
        return bucket

    def replay(self, bucket: int) -> torch.Tensor:
        """Logits [bucket, vocab] of the staged batch: the graph's static output (read it before the next replay)."""
        replay, logits = self.graphs[bucket]
        replay()
        return logits

    def run(self, host: HostInputs) -> torch.Tensor:
        """Logits [n, vocab] of a decode batch: prepare, then replay."""
        return self.replay(self.prepare(host))[:len(host.context_lens)]

    def forward(self, bucket: int) -> torch.Tensor:
        """The eager decode step over the first `bucket` rows of the static buffers: what a graph captures."""
        buffers = self.buffers
        hidden = self.model(buffers.input_ids[:bucket], buffers.positions[:bucket],
                            buffers.meta(bucket, self.backend), self.caches)
        return self.model.logits(hidden)

    def _capture(self, bucket: int) -> None:
        self.buffers.stage(padding_only(bucket, self.buffers.width))  # the warm-up runs write nothing
        self.graphs[bucket] = self.capture(lambda: self.forward(bucket), self.pool)


def resolve_cuda_graphs(requested: bool | None, device: torch.device, backend: str,
                        moe: bool = False, keeps_hidden: bool = False) -> tuple[bool, str]:
    """Whether decodes replay graphs here, and a line saying why (shown where the mode is reported).
    `backend` is the resolved kernel backend (triton | torch); `moe`: the model is a mixture of experts;
    `keeps_hidden`: an EAGLE or MTP head reads every token's hidden state. Asked for where they cannot run:
    a warning, eager."""
    if device.type != "cuda":
        on, why = False, f"eager: CUDA graphs need a CUDA device, the engine runs on {device.type}"
    elif backend != "triton":
        on, why = False, ("eager: the torch reference kernels read the device on the host (a sync), which a "
                          "CUDA graph cannot capture; graphs need the Triton kernels")
    elif moe:
        on, why = False, ("eager: a mixture of experts reads on the host how many tokens each expert gets (a sync), "
                          "which a CUDA graph cannot capture")
    elif keeps_hidden:
        on, why = False, ("eager: an EAGLE or MTP head reads every token's hidden state, which a decode graph does not "
                          "keep (its speculating decodes are verify chunks, eager in any case)")
    elif requested is False:
        on, why = False, "eager: engine.cuda_graphs is false"
    else:
        on, why = True, "CUDA graphs: each decode batch replays its bucket's graph (prefills run eagerly)"
    if requested and not on:
        warnings.warn(f"engine.cuda_graphs: true is ignored ({why})", RuntimeWarning, stacklevel=3)
    return on, why
