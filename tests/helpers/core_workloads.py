"""Random workloads and end-of-run checks the control plane's invariant tests share: the paper's systems'
(tests/engine/core/test_scheduler_invariants.py), prefix caching's (test_prefix_caching.py) and speculation's
(test_speculative_paging.py)."""
from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from engine.core.blocks import blocks_for
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from tests.helpers.core_harness import Req

MAX_LEN = 64  # tiny model: Max reserves 64 tokens


def requests(max_n: int):
    req = st.builds(Req, arrival=st.integers(0, 4), prompt=st.integers(1, 24), output=st.integers(1, 24),
                    n=st.integers(1, max_n))
    return st.lists(req, min_size=1, max_size=24)


def pool_blocks(block_size: int, extra: int, kind: str = "orca") -> int:
    if kind == "vllm":  # tight: three unshared 48-token samples plus one block each for appends
        return 3 * blocks_for(48, block_size) + 3 + extra // 4
    # enough for 3 Max reservations (n <= 3), so every request fits an empty pool in every system
    per_seq = 1
    while per_seq * block_size < MAX_LEN:
        per_seq *= 2
    return 3 * per_seq + extra


class FinalState:
    def __init__(self, sched):
        self.sched = sched

    def check(self):
        sched = self.sched
        assert not sched.has_unfinished() and sched.num_waiting == 0 and len(sched.running) == 0
        usage = sched.kv_usage()
        assert usage.idle == sched.num_gpu_blocks * sched.block_size, f"memory left behind: {usage}"
        if isinstance(sched, VLLMScheduler):
            assert sched.allocator.gpu.num_free == sched.num_gpu_blocks
            assert sched.allocator.cpu.num_free == sched.num_cpu_blocks
            assert not sched.allocator.block_tables
        else:
            assert sched.allocator.num_free_blocks == sched.num_gpu_blocks
            assert not sched.allocator.reservations


BS = 4


def caching(preemption: str = "auto", **overrides) -> SystemSpec:
    return dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=BS, preemption=preemption, prefix_caching=True,
                               **overrides)


def stream_keys(family: int, shared_blocks: int, request: int, num_blocks: int) -> tuple[int, ...]:
    """A request's keys: its family's first shared_blocks blocks (a system prompt, a conversation's
    history), then its own. Chained: once two streams differ they never agree again."""
    keys, key = [], 0
    for i in range(num_blocks):
        key = hash((key, ("family", family) if i < shared_blocks else ("own", request, i)))
        keys.append(key)
    return tuple(keys)


FAMILY_BLOCKS = (3, 1, 5)  # each family's shared prompt, in blocks


@st.composite
def workloads(draw, max_n: int):
    reqs = []
    for rid in range(draw(st.integers(1, 14))):
        family = draw(st.integers(0, len(FAMILY_BLOCKS) - 1))
        shared = FAMILY_BLOCKS[family] * BS
        prompt = draw(st.sampled_from([shared, shared + 1, shared + 3, 2, 7, shared + 9]))
        output = draw(st.integers(1, 12))
        n = draw(st.integers(1, max_n))
        keys = stream_keys(family, FAMILY_BLOCKS[family], rid, (prompt + output) // BS)
        reqs.append(Req(draw(st.integers(0, 12)), prompt, output, n, keys=keys))
    return reqs
