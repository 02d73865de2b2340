"""The paged KV cache: per-layer K and V block pools on the device, and swap pools on the host."""
from __future__ import annotations

import os

import torch

from engine import kernels
from engine.core.spec import ModelSpec
from engine.kernels.cache_ops_ref import copy_blocks_ref
from engine.runtime.inputs import upload
from engine.runtime.model import LayerKVCache

GIB = 1 << 30
# A CPU "device" has no free-memory query that means anything for a KV pool: the pool
# must fit a budget the caller chooses (or this default).
DEFAULT_CPU_KV_BUDGET_BYTES = 4 * GIB
DEFAULT_MEMORY_FRACTION = 0.9  # of free device memory; the rest is left for activations
DEFAULT_SWAP_SPACE_BYTES = 4 * GIB  # vLLM's default host swap space (swap_space per GPU)


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def kv_block_bytes(spec: ModelSpec, block_size: int, dtype: torch.dtype) -> int:
    """K and V of one block across all layers: block_size x kv_bytes_per_token."""
    return block_size * spec.kv_bytes_per_token(dtype_bytes(dtype))


def host_available_bytes() -> int:
    """Physical memory the OS can still hand out (Linux), for the host swap pool."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_device_bytes(device: torch.device | str, cpu_budget_bytes: int | None = None) -> int:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # memory the caching allocator holds but does not use is free to us
        free, _total = torch.cuda.mem_get_info(device)
        return free
    if device.type == "cpu":
        return DEFAULT_CPU_KV_BUDGET_BYTES if cpu_budget_bytes is None else cpu_budget_bytes
    raise ValueError(f"unsupported device {device}; use 'cpu' or 'cuda[:i]'")


def kv_pool_blocks_that_fit(spec: ModelSpec, block_size: int, dtype: torch.dtype,
                            device: torch.device | str, *, memory_fraction: float = DEFAULT_MEMORY_FRACTION,
                            cpu_budget_bytes: int | None = None) -> int:
    """How many KV blocks fit in free device memory now (call it after the weights are loaded)."""
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
    usable = int(free_device_bytes(device, cpu_budget_bytes) * memory_fraction)
    return usable // kv_block_bytes(spec, block_size, dtype)


def default_swap_blocks(spec: ModelSpec, block_size: int, dtype: torch.dtype, num_gpu_blocks: int) -> int:
    """The host swap pool when none is asked for: vLLM's 4 GiB, but never more blocks than the device pool.

    On the GPUs vLLM ran on, its 4 GiB is a fraction of the device pool (an A100-40GB's is ~25 GB); a
    small pool (a CPU's, a test's) given 4 GiB beside it would hold many times what it could ever swap out
    in one preemption, in host memory set aside (zeroed) at start-up. A workload that swaps more than the
    device pool at once is told to raise num_cpu_blocks (SwapSpaceExhausted)."""
    return min(DEFAULT_SWAP_SPACE_BYTES // kv_block_bytes(spec, block_size, dtype), num_gpu_blocks)


def _check_count(name: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "positive" if minimum else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, got {value!r}")


def _check_fits(what: str, num_blocks: int, block_bytes: int, free_bytes: int, hint: str) -> None:
    need = num_blocks * block_bytes
    if need > free_bytes:
        raise ValueError(
            f"{what} of {num_blocks} blocks needs {need / GIB:.2f} GiB but only "
            f"{free_bytes / GIB:.2f} GiB is free; at most {free_bytes // block_bytes} blocks fit ({hint})")


class PagedKVCache:
    """K/V pools of shape [num_blocks, block_size, num_kv_heads, head_dim], one pair per layer.

    Block ids are the scheduler's: device block b of every layer holds the same tokens.
    """

    def __init__(self, spec: ModelSpec, num_gpu_blocks: int, num_cpu_blocks: int, block_size: int,
                 device: torch.device | str, dtype: torch.dtype, *, cpu_budget_bytes: int | None = None,
                 backend: str = "auto"):
        _check_count("num_gpu_blocks", num_gpu_blocks, minimum=1)
        _check_count("num_cpu_blocks", num_cpu_blocks, minimum=0)  # 0: no swapping
        _check_count("block_size", block_size, minimum=1)
        self.spec, self.block_size, self.dtype, self.backend = spec, block_size, dtype, backend
        self.device = torch.device(device)
        self.num_gpu_blocks, self.num_cpu_blocks = num_gpu_blocks, num_cpu_blocks
        block_bytes = kv_block_bytes(spec, block_size, dtype)
        # check both pools before allocating either: nothing half-built
        _check_fits("the device KV pool", num_gpu_blocks, block_bytes,
                    free_device_bytes(self.device, cpu_budget_bytes),
                    "lower num_gpu_blocks" + (" or raise cpu_budget_bytes" if self.device.type == "cpu" else ""))
        _check_fits("the host swap pool", num_cpu_blocks, block_bytes, host_available_bytes(),
                    "lower num_cpu_blocks")
        shape = (num_gpu_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        cpu_shape = (num_cpu_blocks, *shape[1:])
        # zeros, not empty: a stale NaN in an unused slot must never meet a 0 softmax weight
        self.layers = [LayerKVCache(torch.zeros(shape, dtype=dtype, device=self.device),
                                    torch.zeros(shape, dtype=dtype, device=self.device))
                       for _ in range(spec.num_layers)]
        self.cpu_layers = [LayerKVCache(kernels.allocate_cpu_cache(cpu_shape, dtype),
                                        kernels.allocate_cpu_cache(cpu_shape, dtype))
                           for _ in range(spec.num_layers)]

    @property
    def bytes_per_block(self) -> int:
        return kv_block_bytes(self.spec, self.block_size, self.dtype)

    def swap_out(self, mapping: list[tuple[int, int]]) -> None:
        """(device block, host block) pairs: device -> host."""
        self._swap(mapping, self.layers, self.cpu_layers)

    def swap_in(self, mapping: list[tuple[int, int]]) -> None:
        """(host block, device block) pairs: host -> device."""
        self._swap(mapping, self.cpu_layers, self.layers)

    def copy(self, mapping: list[tuple[int, int]]) -> None:
        """(src, dst) device block pairs: copy-on-write of shared blocks. Checked on the host
        (check_block_plans), uploaded without a sync and copied by the launchers directly: the public
        kernels.copy_blocks reads the mapping back to check it, a sync per iteration that forks."""
        if not mapping:
            return
        block_mapping = upload(mapping, torch.int64, self.device).view(len(mapping), 2)
        keys, values = [c.key for c in self.layers], [c.value for c in self.layers]
        if kernels.resolve_backend(self.backend, self.device) == "torch":
            copy_blocks_ref(keys, values, block_mapping)
            return
        from engine.kernels.cache_ops import copy_blocks_triton

        copy_blocks_triton(keys, values, block_mapping)

    def _swap(self, mapping, src_layers, dst_layers) -> None:
        if not mapping:
            return
        block_mapping = torch.tensor(mapping, dtype=torch.int64)
        for src, dst in zip(src_layers, dst_layers):
            kernels.swap_blocks(src.key, dst.key, block_mapping)
            kernels.swap_blocks(src.value, dst.value, block_mapping)

    def check_block_plans(self, swap_out, swap_in, copies) -> None:
        """Every block id in range, before any plan touches memory."""
        plans = (("blocks_to_swap_out", swap_out, self.num_gpu_blocks, self.num_cpu_blocks),
                 ("blocks_to_swap_in", swap_in, self.num_cpu_blocks, self.num_gpu_blocks),
                 ("blocks_to_copy", copies, self.num_gpu_blocks, self.num_gpu_blocks))
        for name, pairs, num_src, num_dst in plans:
            for src, dst in pairs:
                if not (0 <= src < num_src and 0 <= dst < num_dst):
                    raise ValueError(f"{name} has pair ({src}, {dst}) outside the pools "
                                     f"(source has {num_src} blocks, destination {num_dst})")
        sources, targets = {src for src, _ in copies}, [dst for _, dst in copies]
        # the copy kernel moves every pair at once: a block written twice, or read and written, races
        if len(set(targets)) != len(targets) or sources & set(targets):
            raise ValueError(f"blocks_to_copy {copies} writes a block twice or copies from a block it writes")
