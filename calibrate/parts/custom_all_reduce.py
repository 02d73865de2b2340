"""vLLM's custom all-reduce: tensor parallelism's small messages over CUDA IPC buffers, NCCL's beyond.

vLLM (0.19: vllm/distributed/device_communicators/custom_all_reduce.py) all-reduces a message of at most its buffer
(8 MiB) with its own one-shot or two-shot kernel where it can: 2, 4, 6 or 8 GPUs, every pair joined by NVLink (two
GPUs may also be joined by PCIe peer-to-peer); otherwise, and above the buffer, NCCL does. Its kernel's times were
published for H100s (calibrate/network_tables/h100_custom_all_reduce.yaml, with their source); on another GPU they
are carried as the measured NCCL table is (AllReduceTable.scaled): latency as measured, the bandwidth-bound part at
the target's links. An iteration's all-reduces then cost the custom kernel's time up to the buffer and the cost
model's own all-reduce (its measured table, or the ring formula) above it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.parts.all_reduce import AllReduceTable
from engine.errors import SpecError
from engine.specs.checks import positive
from engine.specs.loader import read_yaml

SHIPPED = Path(__file__).resolve().parents[1] / "network_tables" / "h100_custom_all_reduce.yaml"
FORMAT = "servesim-all-reduce/1"
WORLD_SIZES = (2, 4, 6, 8)  # the GPU counts vLLM's custom all-reduce takes (CustomAllreduce._SUPPORTED_WORLD_SIZES)


@dataclass(frozen=True)
class CustomAllReduce:
    """The custom kernel's measured times by GPU count and message bytes, its buffer, and the GPU it was timed on."""

    table: AllReduceTable
    max_bytes: float
    measured_on: HardwareSpec

    def applies(self, hardware: HardwareSpec, tensor_parallel: int) -> bool:
        """Whether vLLM runs it for this many of these GPUs: a supported count, NVLink between every pair (taken to
        be there where the sheet's GPU-to-GPU link is faster than its PCIe), or two GPUs over PCIe."""
        if tensor_parallel not in WORLD_SIZES or not self.table.covers(tensor_parallel):
            return False
        return tensor_parallel == 2 or hardware.nvlink_bytes_per_s > hardware.pcie_bytes_per_s

    def on(self, hardware: HardwareSpec, beyond: Callable[[int, float], float]) -> SplitAllReduce:
        """The all-reduce on `hardware`: this kernel carried to its links up to the buffer, `beyond` above it."""
        speedup = hardware.nvlink_bytes_per_s / self.measured_on.nvlink_bytes_per_s
        return SplitAllReduce(self.table.scaled(speedup), self.max_bytes, beyond)


class SplitAllReduce:
    """An all-reduce priced by the custom kernel's table up to max_bytes and by `beyond` above (the interface the
    roofline reads of an AllReduceTable: covers and time)."""

    def __init__(self, small: AllReduceTable, max_bytes: float, beyond: Callable[[int, float], float]):
        self.small, self.max_bytes, self.beyond = small, max_bytes, beyond

    def covers(self, workers: int) -> bool:
        return self.small.covers(workers)

    def time(self, workers: int, size_bytes: float) -> float:
        if size_bytes <= self.max_bytes:
            return self.small.time(workers, size_bytes)
        return self.beyond(workers, size_bytes)


def load_custom_all_reduce(path: str | Path = SHIPPED) -> CustomAllReduce:
    source = str(path)
    raw = read_yaml(path, "custom all-reduce table")
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SpecError(source, "format", f"must be {FORMAT!r}")
    try:
        measured_on = load_hardware(raw.get("measured_on"))
    except SpecError as err:
        raise SpecError(source, "measured_on", err.message) from None
    max_bytes = positive(raw.get("max_bytes"), source, "max_bytes")
    return CustomAllReduce(AllReduceTable.from_dict(raw.get("all_reduce"), source), max_bytes, measured_on)
