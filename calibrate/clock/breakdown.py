"""Where one iteration's seconds go: the device's kernels by kind and the host's work by term.

Every cost model answers `breakdown(batch)` with an IterationTime. Its device_s and host_s are the model's own
device and host parts, so device_s + host_s is iteration_time to the bit, and step_s is step_time (the swaps
before the forward). Its parts say where those seconds went: a roofline adds its kinds up in the order its
clock does, so they sum to device_s exactly; a profile's fitted terms are scaled by its serving factor after
they are added, so theirs sum to it within rounding. The simulator's iterations file, its summary's shares and
its trace events all read these (sim/experiment/breakdown.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# the device kinds a roofline prices, in the order it adds them
DEVICE_KINDS = ("linear", "attention", "all_reduce", "expert_dispatch", "block_copies", "overhead", "other_kernels")
# what each kind is, for the docs and the trace's legend
KIND_MEANINGS = {
    "linear": "the linear layers and the LM head: compute and weight reads under one roof",
    "attention": "prefill and decode attention: FLOPs of new tokens, K/V bytes read, the paged kernel's blocks",
    "all_reduce": "tensor parallelism's all-reduces of the activations",
    "expert_dispatch": "expert parallelism's all-gather of the data-parallel ranks' tokens before each MoE layer and "
                       "reduce-scatter after it",
    "block_copies": "copy-on-write block copies",
    "overhead": "a fixed cost per iteration",
    "other_kernels": "measured kernels the roofline leaves out: norms, rotary, activation, residual adds, "
                     "embedding, each GEMM's launch latency",
    "forward": "the whole forward, where a model does not price it by kind",
    # a fitted profile's terms (calibrate/work/features.py), where "linear" is its token-cost table
    "per_sequence": "a fitted profile's cost per sequence in the batch",
    "prefill": "a fitted profile's prefill attention (per prompt token pair) and cost per prompt",
    "mixed": "a fitted profile's extra cost of an iteration that mixes prefills and decodes",
    "decode_blocks": "a fitted profile's cost per KV block a decode reads",
    "swap": "KV blocks moved between GPU and host before the forward",
}


@dataclass(frozen=True)
class IterationTime:
    """One iteration's time: `device` seconds by kernel kind and `host` seconds by term, each in the order the
    cost model adds them; device_s and host_s are its two parts as the model charges them."""

    device: dict[str, float]
    host: dict[str, float]
    device_s: float
    host_s: float
    swap_s: float = 0.0
    parts_exact: bool = field(default=True, compare=False)  # whether the parts add up to device_s to the bit

    @property
    def total_s(self) -> float:
        """iteration_time: the device part, then the host work in series."""
        return self.device_s + self.host_s if self.host_s else self.device_s

    @property
    def step_s(self) -> float:
        """step_time: the swaps, then the forward."""
        return self.total_s + self.swap_s if self.swap_s else self.total_s


def fold(values: Iterable):
    """Values added left to right, skipping exact zeros: a clock's running sum of its terms. Adding 0.0 to a
    positive time changes no bit, so skipping it only spares numpy an operation on a stretch's arrays."""
    total = None
    for value in values:
        if total is None:
            total = value
        elif _nonzero(value):
            total = total + value
    return 0.0 if total is None else total


def _nonzero(value) -> bool:
    return bool(value) if isinstance(value, (int, float)) else True


def whole_forward(device_s: float, host_s: float, swap_s: float = 0.0) -> IterationTime:
    """The breakdown of a model that prices its forward as one: all of the device part is "forward"."""
    return IterationTime({"forward": device_s}, {"host": host_s} if host_s else {}, device_s, host_s, swap_s)
