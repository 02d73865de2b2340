"""Beam search in the simulator: the workload key, trace files, the parent-choice model, a whole run."""
import pickle
from functools import partial

import numpy as np
import pytest

import sim.core.simulate
from engine.core.batch import Batch
from engine.core.beam import beam_parents
from engine.errors import SpecError
from sim.core.beams import DRAW_BLOCK, BeamParentModel, UniformDraws
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model, run_one, trace_for
from sim.workload.recorded import read_recorded_trace
from sim.workload.trace import Trace, write_trace_csv
from tests.helpers.build import patches_the_control_plane

BEAMS = """
name: beams
model: opt-13b
hardware: a100-40gb
kv_cache_gib: 12
workload:
  dataset: alpaca-standin
  duration_s: 40
  beam_width: 4
systems: [orca-oracle, vllm]
rates: [4]
warmup_s: 5
"""


# --- config ---------------------------------------------------------------------------------------


def _error(write_config, text) -> str:
    path = write_config(text)
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message, message
    return message


def test_a_beam_wider_than_max_num_seqs_is_one_line_naming_the_key(write_config):
    text = BEAMS.replace("systems: [orca-oracle, vllm]", "systems:\n  - {preset: vllm, max_num_seqs: 3}")
    message = _error(write_config, text)
    assert "workload.beam_width" in message and "at most 3" in message


def test_samples_and_beams_together_are_refused(write_config):
    message = _error(write_config, BEAMS.replace("beam_width: 4", "beam_width: 4\n  n: 2"))
    assert "workload.beam_width" in message and "not both" in message


@pytest.mark.parametrize("line, key", [("beam_width: 0", "workload.beam_width"),
                                       ("beam_width: 2.5", "workload.beam_width"),
                                       ("beam_width: 4\n  beam_continue: 1.5", "workload.beam_continue")])
def test_bad_beam_keys_are_refused(write_config, line, key):
    assert key in _error(write_config, BEAMS.replace("beam_width: 4", line))


def same_summary(a: dict, b: dict) -> bool:
    """Equal summaries, where NaN (a metric with nothing to measure: the prefix hit rate without caching)
    equals NaN."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def test_beam_width_one_changes_nothing(write_config):
    plain = load_experiment(write_config(BEAMS.replace("  beam_width: 4\n", ""), "plain.yaml"))
    one = load_experiment(write_config(BEAMS.replace("beam_width: 4", "beam_width: 1"), "one.yaml"))
    a, b = (run_one(exp, exp.systems[1], 4.0, 0).summary for exp in (plain, one))
    assert same_summary(a, b)


# --- trace files ----------------------------------------------------------------------------------


def test_a_trace_file_carries_its_beam_widths(tmp_path):
    trace = Trace([0.0, 0.5, 1.0], [5, 6, 7], [8, 9, 10], [1, 3, 1], "test", 2.0, beam_width=[4, 1, 1])
    path = write_trace_csv(trace, tmp_path / "t.csv")
    assert path.read_text().splitlines()[2] == "arrived_at,num_prefill_tokens,num_decode_tokens,n,beam_width"
    back = read_recorded_trace(path)
    assert back.beam_width.tolist() == [4, 1, 1] and back.n.tolist() == [1, 3, 1]


def test_a_trace_without_beams_writes_no_beam_column(tmp_path):
    path = write_trace_csv(Trace([0.0], [5], [8], source="test"), tmp_path / "t.csv")
    assert "beam_width" not in path.read_text()


def test_a_trace_row_with_samples_and_beams_is_refused_by_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,n,beam_width\n0,5,5,1,2\n1,5,5,2,2\n")
    with pytest.raises(SpecError) as err:
        read_recorded_trace(path)
    assert "line 3" in str(err.value) and "not both" in str(err.value)


def test_a_replayed_trace_gets_the_configured_width(write_config, tmp_path):
    write_trace_csv(Trace(np.arange(20) * 0.5, [5] * 20, [8] * 20, source="test", duration_s=10.0),
                    tmp_path / "rec.csv")
    text = BEAMS.replace("dataset: alpaca-standin\n  duration_s: 40", "trace: rec.csv")
    text = text.replace("warmup_s: 5", "warmup_s: 1")
    exp = load_experiment(write_config(text))
    trace = trace_for(exp, 2.0, 0)
    assert trace.beam_width.tolist() == [4] * 20 and "beam search, width 4" in trace.source


# --- the parent-choice model ------------------------------------------------------------------------


def _decode_batch(groups):
    return Batch(decode_seq_ids=[s for g in groups for s in g], decode_context_lens=[9] * sum(map(len, groups)),
                 beam_groups=[tuple(g) for g in groups])


def test_beams_that_always_continue_themselves_never_fork():
    model = BeamParentModel(1.0, np.random.default_rng(0))
    assert all(model.parents(_decode_batch([(0, 1, 2, 3), (4, 5)])) == {} for _ in range(50))


def test_forks_grow_as_beam_continue_falls_and_repeat_with_the_seed():
    groups = [(0, 1, 2, 3, 4, 5), (6, 7)]

    def forks(p, seed):
        model = BeamParentModel(p, np.random.default_rng(seed))
        return [model.parents(_decode_batch(groups)) for _ in range(400)]

    counts = {p: sum(map(len, forks(p, 0))) for p in (0.0, 0.5, 0.9)}
    assert counts[0.0] > counts[0.5] > counts[0.9] > 0
    assert forks(0.5, 1) == forks(0.5, 1)
    for step in forks(0.0, 2):
        for child, parent in step.items():
            assert (child in groups[0]) == (parent in groups[0]), "a fork stays inside its beam search"


@pytest.mark.parametrize("bit_generator", ["PCG64", "PCG64DXSM", "MT19937"])
@pytest.mark.parametrize("half_kept", [False, True])
def test_draws_taken_a_block_at_a_time_are_those_of_one_call_each(bit_generator, half_kept):
    # the same floats as rng.random(n) call by call, across blocks; settled, the Generator is where those calls
    # leave it, down to a 32-bit half kept for the next 32-bit draw; MT19937 cannot be advanced: call by call
    def generator():
        rng = np.random.Generator(getattr(np.random, bit_generator)(7))
        if half_kept:
            rng.integers(0, 10, dtype=np.uint32)
        return rng

    buffered, reference = generator(), generator()
    draws = UniformDraws(buffered, mark=0.75)
    sizes = [3, 1, 8, DRAW_BLOCK - 5, 4, DRAW_BLOCK + 3, 2]
    for n in sizes:
        expected = reference.random(n).tolist()
        at = draws.take(n)
        assert [draws.value(p) for p in range(at, at + n)] == expected
        assert draws.at_least(at, at + n) == [at + i for i, u in enumerate(expected) if u >= 0.75]
    draws.settle()
    # MT19937's state holds arrays: compared pickled
    assert pickle.dumps(buffered.bit_generator.state) == pickle.dumps(reference.bit_generator.state)
    assert buffered.integers(0, 1 << 30, 5, dtype=np.uint32).tolist() == \
        reference.integers(0, 1 << 30, 5, dtype=np.uint32).tolist()
    at = draws.take(2)  # and it goes on after a settle
    assert [draws.value(at), draws.value(at + 1)] == reference.random(2).tolist()


def _parents_one_by_one(beam_continue, rng, batch):
    # the model as first written: every candidate's two draws read, a numpy call each per step
    prefilled = set(batch.prefill_sample_ids)
    decoded = [ids for ids in batch.beam_groups if ids not in prefilled]
    if not decoded:
        return {}
    total = sum(map(len, decoded))
    stays = [u < beam_continue for u in rng.random(total).tolist()]
    uniform = rng.random(total).tolist()
    forks, start = {}, 0
    for ids in decoded:
        width = len(ids)
        parents = [ids[j] if stays[start + j] else ids[int(uniform[start + j] * width)] for j in range(width)]
        forks.update(beam_parents(ids, parents))
        start += width
    return forks


@pytest.mark.parametrize("beam_continue", [0.0, 0.5, 0.93, 1.0])
@pytest.mark.parametrize("block", [0, 64])
def test_parents_read_from_the_leavers_alone_are_those_of_every_candidate_read(beam_continue, block):
    # widths 1-6, some groups prefilled in the batch, across refills of a small block
    shapes = np.random.default_rng(5)
    model = BeamParentModel(beam_continue, np.random.default_rng(11), draw_block=block)
    reference = np.random.default_rng(11)
    next_id = 0
    for _ in range(300):
        groups = []
        for width in shapes.integers(1, 7, shapes.integers(1, 9)).tolist():
            groups.append(tuple(range(next_id, next_id + width)))
            next_id += width
        prefilled = [g for g in groups if shapes.random() < 0.2]
        batch = Batch(beam_groups=groups, prefill_sample_ids=prefilled)
        assert model.parents(batch) == _parents_one_by_one(beam_continue, reference, batch)
    model.settle()
    assert model.rng.random() == reference.random()


def test_a_beam_run_draws_and_leaves_the_generator_as_a_numpy_call_per_step_does(write_config, monkeypatch):
    exp = load_experiment(write_config(BEAMS))
    trace = trace_for(exp, 4.0, 0)
    for system in exp.systems:
        pool = exp.kv_pool(system)
        runs = {}
        for block in (0, DRAW_BLOCK):  # 0: rng.random() per step, as before draws came in blocks
            monkeypatch.setattr(sim.core.simulate, "BeamParentModel", partial(BeamParentModel, draw_block=block))
            rng = np.random.default_rng(3)
            records = simulate(trace, exp.model, system, make_cost_model(exp, system), pool.num_gpu_blocks,
                               pool.num_cpu_blocks, rng=rng)
            runs[block] = (records.requests_frame().to_csv(), records.iterations_frame().to_csv(),
                           rng.bit_generator.state)
        assert runs[0] == runs[DRAW_BLOCK], system.name


def test_no_parents_are_drawn_after_a_prefill():
    rng = np.random.default_rng(0)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[5], prefill_sample_ids=[(0, 1, 2)], beam_groups=[(0, 1, 2)])
    assert BeamParentModel(0.0, rng).parents(batch) == {}
    assert rng.random() == np.random.default_rng(0).random(), "nothing drawn"


# --- a whole simulated run ------------------------------------------------------------------------


def test_a_simulated_beam_run_shares_under_vllm_and_copies_under_orca(write_config):
    exp = load_experiment(write_config(BEAMS))
    orca, vllm = (run_one(exp, system, 4.0, 0) for system in exp.systems)
    for result in (orca, vllm):
        assert result.summary["num_unfinished"] == 0
        assert (result.requests["n"] == 4).all(), "a request's record counts its beams"
        assert "beam search, width 4" in result.summary["workload"]
    # Orca copies every fork's blocks; vLLM copies only the shared last block it writes
    assert orca.iterations["num_copy_blocks"].sum() > vllm.iterations["num_copy_blocks"].sum() > 0
    assert same_summary(run_one(exp, exp.systems[1], 4.0, 0).summary, vllm.summary), "same config and seed, same run"
    assert not same_summary(run_one(exp, exp.systems[1], 4.0, 1).summary, vllm.summary)


def test_less_forking_means_fewer_copies(write_config):
    copies = []
    for p in (0.1, 1.0):
        exp = load_experiment(write_config(BEAMS.replace("beam_width: 4", f"beam_width: 4\n  beam_continue: {p}")))
        copies.append(run_one(exp, exp.systems[0], 4.0, 0).iterations["num_copy_blocks"].sum())
    assert copies[0] > copies[1]


def test_a_beam_trace_needs_the_runs_rng(write_config):
    exp = load_experiment(write_config(BEAMS))
    system = exp.systems[1]
    pool = exp.kv_pool(system)
    with pytest.raises(ValueError, match="seeded rng"):
        simulate(trace_for(exp, 4.0, 0), exp.model, system, make_cost_model(exp, system), pool.num_gpu_blocks,
                 pool.num_cpu_blocks)


def test_a_replayed_beam_trace_states_its_parent_model_once(write_config, tmp_path):
    exp = load_experiment(write_config(BEAMS))
    write_trace_csv(trace_for(exp, 4.0, 0), tmp_path / "rec.csv")
    text = BEAMS.replace("dataset: alpaca-standin\n  duration_s: 40", "trace: rec.csv\n  beam_continue: 0.5")
    replay = load_experiment(write_config(text, "replay.yaml"))
    source = trace_for(replay, 4.0, 0).source
    assert source.count("beam search") == 1 and "beam_continue=0.5" in source, source


@patches_the_control_plane
# caching: automatic prefix caching, the prompts' blocks found in the cache (not at 1-token blocks: slow)
@pytest.mark.parametrize("block_size, caching", [pytest.param(1, False, marks=pytest.mark.slow), (4, False),
                                                 (16, False), (4, True), (16, True)])
@pytest.mark.parametrize("prefix", [0, 40])
@pytest.mark.parametrize("pool_tokens", [4096, 2400])  # roomy, and tight enough to swap beam searches out
def test_the_held_slots_of_beams_are_those_counted_block_by_block(monkeypatch, block_size, prefix, pool_tokens,
                                                                  caching):
    """held_token_slots, and the scheduler's running sum of what beams share (kept per group, and counted
    again only when one of its tables changes), against every distinct block counted at every step."""
    from dataclasses import replace

    from engine.core.block_manager import BlockManager
    from engine.core.kv_usage import shared_prompt_token_slots
    from engine.core.scheduler.vllm import VLLMScheduler
    from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, random_trace

    checked, summed, swaps = [], [], []
    counted = BlockManager.held_token_slots
    kv_usage = VLLMScheduler.kv_usage

    def by_block(self, group):  # every distinct block once, as its first holder's table fills it
        fills: dict[int, int] = {}
        for seq in group.live_seqs():
            for i, block in enumerate(self.block_tables[seq.seq_id]):
                fills.setdefault(block, min(self.block_size, seq.length - i * self.block_size))
        return sum(fills.values())

    def both(self, group):
        slots = counted(self, group)
        assert slots == by_block(self, group), (group.request_id, [s.length for s in group.seqs])
        checked.append(slots)
        return slots

    def kv_usage_summed(self):
        usage = kv_usage(self)
        beams = [group for group in self.running if group.is_beam]
        expected = sum(by_block(self.allocator, group) - shared_prompt_token_slots(group) for group in beams)
        assert (self.kv.beam_sharing_slots if beams else 0) == expected, [g.request_id for g in beams]
        summed.append(expected)
        swaps.append(self.num_swapped_out_blocks)
        return usage

    monkeypatch.setattr(BlockManager, "held_token_slots", both)
    monkeypatch.setattr(VLLMScheduler, "kv_usage", kv_usage_summed)
    system = replace(SYSTEMS["vllm"], block_size=block_size, watermark=0.0, prefix_caching=caching)
    for beam_continue in (0.3, 0.93):  # many forks and copies on write, and few
        simulate(random_trace(12, count=60, rate=6.0, beams=4, prefix=prefix), MODEL, system, ROOFLINE,
                 pool_tokens // block_size, 4096 // block_size, rng=np.random.default_rng(3),
                 beam_continue=beam_continue)
    assert len(checked) > 100
    assert len(summed) > 100 and min(summed) < 0  # checked at every step, with forks sharing blocks
    if pool_tokens < 4096:
        assert max(swaps) > 0
