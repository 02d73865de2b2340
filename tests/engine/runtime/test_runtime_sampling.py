"""Sampling on the device: the same tokens as the host-side sampler it replaced, beams included, and an
iteration that reads the device once."""
import dataclasses
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from runtime_reference import BACKEND  # noqa: E402

from engine.core.beam import continue_beams  # noqa: E402
from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.beam import BeamSearch, BeamStep, batch_steps  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.sampler import Sampler, SamplingParams, top_p_filter  # noqa: E402

RUNTIME_DIR = str(Path(__file__).resolve().parents[3] / "engine" / "runtime")


# --- the sampler before it moved to the device, kept as the reference ----------------------------
def reference_sample(generator, logits, sample_ids, params):
    rows = torch.tensor([r for r, ids in enumerate(sample_ids) for _ in ids])
    if params.method == "greedy":
        chosen = logits.argmax(dim=-1)[rows]
    else:
        probs = torch.softmax(logits[rows].float() / params.temperature, dim=-1)
        chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return dict(zip([s for ids in sample_ids for s in ids], chosen.tolist()))


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams("random"), SamplingParams("random", 0.7)])
def test_device_sampler_draws_the_tokens_the_host_sampler_drew(params):
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(3))
    sample_ids = [(0,), (1, 2, 3), (4,), (5, 6), (7,)]
    sampler, generator = Sampler(torch.device("cpu"), 11), torch.Generator().manual_seed(11)
    for _ in range(4):  # the random stream advances the same way, step after step
        assert sampler.sample(logits, sample_ids, params) == reference_sample(generator, logits, sample_ids, params)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.97, 0.01, 0.01, 0.01]])
    kept = top_p_filter(probs, 0.7)
    assert torch.equal(kept > 0, torch.tensor([[False, True, False, True], [True, False, False, False]]))
    assert torch.equal(kept[kept > 0], probs[kept > 0])  # kept as they were: multinomial takes weights
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    sampler = Sampler(torch.device("cpu"), 0)
    chosen = sampler.choose(logits, torch.arange(3), SamplingParams("random", top_p=1e-6))
    assert torch.equal(chosen, logits.argmax(dim=-1)), "a tiny top_p leaves the most probable token alone"


@pytest.mark.parametrize("kwargs, message", [(dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
                                             (dict(temperature=0), "temperature"), (dict(method="beam"), "sampling")])
def test_sampling_parameters_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


# --- beams: the per-group host loop it replaced, kept as the reference ---------------------------
def reference_beam_step(scores, logits, sample_ids, beam_groups):
    row_of = {s: r for r, ids in enumerate(sample_ids) for s in ids}
    tokens, forks = {}, {}
    for seq_ids in beam_groups:
        rows = [row_of[s] for s in seq_ids]
        if len(set(rows)) == 1:
            lp = torch.log_softmax(logits[rows[0]].double(), dim=-1)
            ordered, index = torch.sort(lp, descending=True, stable=True)
            for s, v, i in zip(seq_ids, ordered[:len(seq_ids)].tolist(), index[:len(seq_ids)].tolist()):
                scores[s], tokens[s] = v, i
            continue
        k, vocab = len(seq_ids), logits.shape[1]
        totals = torch.log_softmax(logits[rows].double(), dim=-1)
        totals += torch.tensor([scores[s] for s in seq_ids], dtype=torch.float64).unsqueeze(1)
        ordered, index = torch.sort(totals.reshape(-1), descending=True, stable=True)
        best, flat = ordered[:k].tolist(), index[:k].tolist()
        parents = [seq_ids[i // vocab] for i in flat]
        for s, i in zip(seq_ids, continue_beams(seq_ids, parents)):
            tokens[s], scores[s] = flat[i] % vocab, best[i]
            if parents[i] != s:
                forks[s] = parents[i]
    return tokens, forks


def test_device_beam_step_equals_the_per_group_host_loop():
    gen = torch.Generator().manual_seed(5)
    vocab = 40
    # row 0: a prompt for beams 0-2 (first step); rows 1-3: beams 10-12; rows 4-5: beams 20-21;
    # rows 6-8: beams 30-32 (batched with 10-12); row 9: a plain sequence; row 10: a prompt for 40-41
    sample_ids = [(0, 1, 2), (10,), (11,), (12,), (20,), (21,), (30,), (31,), (32,), (9,), (40, 41)]
    groups = [(0, 1, 2), (10, 11, 12), (20, 21), (30, 31, 32), (40, 41)]
    logits = torch.randn(len(sample_ids), vocab, generator=gen)
    logits[6:9, :5] = 3.0  # ties across beams and tokens: the stable order decides, as before
    start = {s: float(v) for s, v in zip([10, 11, 12, 20, 21, 30, 31, 32], torch.randn(8, generator=gen).tolist())}
    start[31] = start[30]
    beam, reference_scores = BeamSearch(dict(start)), dict(start)
    tokens = beam.step(logits, sample_ids, groups)
    expected_tokens, expected_forks = reference_beam_step(reference_scores, logits, sample_ids, groups)
    assert tokens == expected_tokens
    assert beam.forks == expected_forks and beam.forks, "the step should fork some beams"
    assert beam.scores == reference_scores  # bit for bit: the same float64 operations


def test_beam_groups_batch_by_kind_and_width_in_first_seen_order():
    steps = [BeamStep((1, 2), (0, 0)), BeamStep((3, 4), (1, 2)), BeamStep((5, 6), (3, 3)),
             BeamStep((7, 8, 9), (4, 5, 6))]
    batches = batch_steps(steps)
    assert [(b.first, b.width, [s.seq_ids for s in b.steps]) for b in batches] == [
        (True, 2, [(1, 2), (5, 6)]), (False, 2, [(3, 4)]), (False, 3, [(7, 8, 9)])]
    assert batches[0].rows == [0, 3] and batches[2].rows == [4, 5, 6]


# --- one read of the device per iteration --------------------------------------------------------
SYNCING = ("tolist", "item", "cpu", "numpy", "__int__", "__float__", "__bool__")


class DeviceReads:
    """Counts the calls that read a tensor's values back to the host, made from the runtime's own code
    (engine/runtime): on a GPU each is a sync. The kernels' torch references are not counted: on a GPU
    the engine runs the Triton ones, which read nothing (the GPU test counts every sync there)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for name in SYNCING:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(original))

    def _counting(self, original):
        def counted(tensor, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(RUNTIME_DIR):
                self.count += 1
            return original(tensor, *args, **kwargs)
        return counted


def count_reads_per_iteration(engine, monkeypatch, run):
    reads = DeviceReads(monkeypatch)
    per_iteration = []
    execute = engine.runner.execute

    def counting_execute(batch, *args, **kwargs):
        before = reads.count
        result = execute(batch, *args, **kwargs)
        if batch.prefill_seq_ids or batch.decode_seq_ids:  # not a swap-only step
            per_iteration.append(reads.count - before)
        return result

    engine.runner.execute = counting_execute
    run()
    return per_iteration


@pytest.mark.parametrize("sampling", ["greedy", "random"])
def test_an_iteration_reads_the_device_once(opt_tiny, monkeypatch, sampling):
    # forks (n=2: copy-on-write), prefills, decodes and mixed batches
    engine = Engine(opt_tiny, SystemSpec("vLLM", "vllm", block_size=4), "cpu", num_gpu_blocks=64,
                    num_cpu_blocks=8, attention_backend=BACKEND)
    reads = count_reads_per_iteration(engine, monkeypatch, lambda: engine.replay(
        [(0.0, 6, 5, 2), (0.0, 9, 4, 1), (0.5, 5, 6, 1)], sampling, time_fn=lambda batch: 0.2))
    assert sum(it.num_copy_blocks for it in engine.records.iterations) > 0, "forks should copy on write"
    assert reads and set(reads) == {1}


def test_a_beam_iteration_reads_the_device_once(opt_tiny, monkeypatch):
    engine = Engine(opt_tiny, SystemSpec("vLLM", "vllm", block_size=4), "cpu", num_gpu_blocks=64,
                    num_cpu_blocks=8, attention_backend=BACKEND)
    reads = count_reads_per_iteration(engine, monkeypatch, lambda: engine.replay(
        [(0.0, 6, 5, 1, 3), (0.0, 4, 6, 2), (0.0, 7, 4, 1, 2)], time_fn=lambda batch: 1.0))
    assert reads and set(reads) == {1}


@pytest.mark.parametrize("method", ["ngram", "eagle"])
@pytest.mark.parametrize("sampling", ["greedy", "random"])
def test_a_speculating_iteration_reads_the_device_once(opt_tiny, monkeypatch, sampling, method):
    """The verify's kept counts and tokens ride in the iteration's one copy (the n-gram proposer reads nothing; a
    head reads its proposals back outside the target's step, as a draft does)."""
    system = dataclasses.replace(SystemSpec("vLLM", "vllm", block_size=4),
                                 speculative=SpeculativeSpec(method, 3, (0.5, 0.5, 0.5)))
    engine = Engine(opt_tiny, system, "cpu", num_gpu_blocks=64, num_cpu_blocks=8, attention_backend=BACKEND)
    reads = count_reads_per_iteration(engine, monkeypatch, lambda: engine.replay(
        [(0.0, 6, 5, 1), (0.0, 9, 4, 1), (0.5, 5, 6, 1)], sampling, time_fn=lambda batch: 0.2))
    assert sum(engine.records.request_columns()["proposed_tokens"]) > 0
    assert reads and set(reads) == {1}


def test_the_read_counter_sees_a_read(monkeypatch):
    reads = DeviceReads(monkeypatch)
    exec(compile("t.tolist(); int(t[0]); t.item() if t.numel() == 1 else None", RUNTIME_DIR + "/probe.py", "exec"),
         {"t": torch.ones(2)})
    assert reads.count == 2
