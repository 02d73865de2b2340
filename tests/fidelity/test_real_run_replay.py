"""A real run's replay reproduces its workload one for one: arrivals (seconds after the first, not rescaled),
lengths, and token identities, as prefix-cache block keys equal exactly when the token ids' full blocks agree up to
there, whatever Python's hash seed; and the simulator, fed them, hits the cache exactly where the prompts agree."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np

from fidelity.runs.block_keys import prompt_block_keys
from fidelity.runs.command import validate_run
from fidelity.runs.read import read_run
from fidelity.runs.replay_trace import replay_trace
from tests.helpers.real_runs import BLOCK, PROMPTS, TIMES, write_bench_run

# a pinned key: the chain of BLAKE2b digests must never change between releases, machines or hash seeds
FIRST_KEY_OF_1_2_3_4 = 0x3377388391923D04


def _equal_prefix_blocks(a, b, size: int) -> int:
    """How many leading full blocks two token streams share."""
    shared = 0
    while (shared + 1) * size <= min(len(a), len(b)) and list(a[:(shared + 1) * size]) == list(b[:(shared + 1) *
                                                                                               size]):
        shared += 1
    return shared


def test_keys_agree_exactly_on_the_leading_full_blocks_the_token_ids_share():
    rng = np.random.default_rng(7)
    stems = [rng.integers(0, 50, 24) for _ in range(3)]
    prompts = [np.concatenate([stems[i % 3][:rng.integers(0, 25)], rng.integers(0, 3, rng.integers(1, 20))])
               for i in range(40)]
    keys = [prompt_block_keys(p, BLOCK) for p in prompts]
    for a, ka in zip(prompts, keys):
        assert len(ka) == len(a) // BLOCK  # full blocks only
        for b, kb in zip(prompts, keys):
            shared = _equal_prefix_blocks(a, b, BLOCK)
            agree = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), min(len(ka), len(kb)))
            assert agree == shared


def test_a_later_block_key_depends_on_every_token_before_it():
    base = np.arange(12)
    changed = base.copy()
    changed[0] = 99  # only the first block differs
    assert prompt_block_keys(base, 4)[1:] != prompt_block_keys(changed, 4)[1:]
    assert prompt_block_keys(base[4:], 4) != prompt_block_keys(base, 4)[1:]  # a block's key is its prefix's too


def test_keys_are_the_same_under_every_hash_seed():
    code = ("from fidelity.runs.block_keys import prompt_block_keys\n"
            "print(prompt_block_keys([1, 2, 3, 4, 5, 6, 7, 8], 4))")
    seen = set()
    for seed in ("0", "1", "random"):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, check=True)
        seen.add(out.stdout)
    assert len(seen) == 1
    assert prompt_block_keys(np.array([1, 2, 3, 4]), 4) == (FIRST_KEY_OF_1_2_3_4,)


def test_the_trace_is_the_runs_requests_one_for_one(tmp_path):
    run = read_run(write_bench_run(tmp_path))
    replay = replay_trace(run, BLOCK)
    trace = replay.trace
    queued = [t[0] for t in TIMES]
    assert trace.arrival_s.tolist() == [q - queued[0] for q in queued]  # recorded, not rescaled
    assert trace.prompt_len.tolist() == [len(p) for p in PROMPTS]
    assert trace.output_len.tolist() == run.requests.output_len.tolist()
    assert trace.block_keys == [prompt_block_keys(np.array(p), BLOCK) for p in PROMPTS]
    keys = trace.block_keys
    assert keys[0][:2] == keys[2][:2] and keys[0][0] == keys[1][0] and keys[0][1] != keys[1][1]
    assert not set(keys[3]) & set(keys[0] + keys[1] + keys[2])
    assert replay_trace(run, None).trace.block_keys is None  # no prefix caching: no keys


def test_a_run_logged_out_of_arrival_order_is_replayed_in_order_and_mapped_back(tmp_path):
    run = read_run(write_bench_run(tmp_path))
    swapped = run.requests.arrival_s.copy()
    swapped[[1, 2]] = swapped[[2, 1]]  # request 2 reached the engine before request 1
    run = dataclasses.replace(run, requests=dataclasses.replace(run.requests, arrival_s=swapped))
    replay = replay_trace(run, BLOCK)
    assert replay.order.tolist() == [0, 2, 1, 3]
    assert replay.trace.arrival_s.tolist() == sorted(swapped.tolist())
    assert replay.trace.prompt_len.tolist() == [len(PROMPTS[i]) for i in (0, 2, 1, 3)]
    assert replay.trace.block_keys[1] == prompt_block_keys(np.array(PROMPTS[2]), BLOCK)


def test_the_simulator_hits_the_cache_exactly_where_the_prompts_agree(tmp_path):
    result = validate_run(write_bench_run(tmp_path), out_dir=tmp_path / "out")
    # request 1 shares one block with request 0 (still holding it), request 2 two: each hit is that many blocks
    assert result.simulated.requests["cached_tokens"].tolist() == [0, BLOCK, 2 * BLOCK, 0]
    assert result.simulated.requests["arrival_s"].tolist() == result.replay.trace.arrival_s.tolist()
