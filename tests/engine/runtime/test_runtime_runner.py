"""The runner on hand-built batches: paged vs dense, bad input stopped before anything is written."""
import pytest

torch = pytest.importorskip("torch")

from runtime_reference import BACKEND, dense_logits  # noqa: E402

from engine.core.batch import Batch  # noqa: E402
from engine.runtime.model import Decoder  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402

BLOCK = 4


def make_runner(spec, **kw):
    kw.setdefault("num_gpu_blocks", 16)
    kw.setdefault("num_cpu_blocks", 4)
    return ModelRunner(spec, "cpu", None, 0, block_size=BLOCK, attention_backend=BACKEND, **kw)


def captured_logits(runner):
    rows = {}
    runner.logits_hook = lambda ids, logits: rows.update({ids[r][0]: logits[r] for r in range(len(ids))})
    return rows


def test_prefills_then_decode_match_dense(spec):
    runner = make_runner(spec)
    tokens = {0: [5, 6, 7, 8, 9, 10], 1: [42, 43, 44]}
    tables = {0: [3, 7], 1: [11]}
    logits = captured_logits(runner)
    batch = Batch(prefill_seq_ids=[0, 1], prefill_lens=[6, 3], prefill_sample_ids=[(0,), (1,)])
    sampled, seconds = runner.execute(batch, tokens, tables.__getitem__)
    assert set(sampled) == {0, 1} and seconds > 0
    for seq_id in (0, 1):
        torch.testing.assert_close(logits[seq_id], dense_logits(runner.model, tokens[seq_id])[-1], atol=1e-4, rtol=0)
        tokens[seq_id].append(sampled[seq_id])
    tables[1].append(2)  # seq 1 grows to 4 tokens: still one block; seq 0 to 7: still two
    decode = Batch(decode_seq_ids=[0, 1], decode_context_lens=[7, 4])
    runner.execute(decode, tokens, tables.__getitem__)
    for seq_id in (0, 1):
        torch.testing.assert_close(logits[seq_id], dense_logits(runner.model, tokens[seq_id])[-1], atol=1e-4, rtol=0)


def test_same_seed_same_weights_and_samples(opt_tiny):
    a, b = make_runner(opt_tiny), make_runner(opt_tiny)
    for (name, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(p, q), name
    other = ModelRunner(opt_tiny, seed=1, num_gpu_blocks=4, attention_backend=BACKEND)
    assert not torch.equal(a.model.embed_tokens.weight, other.model.embed_tokens.weight)


@pytest.mark.parametrize("name, published", [("opt-125m", 125_239_296), ("llama-7b", 6_738_415_616)])
def test_decoder_has_the_published_parameter_count(name, published):
    # built on the meta device: shapes only, no memory
    with torch.device("meta"):
        model = Decoder(load_model_spec(name))
    assert sum(p.numel() for p in model.parameters()) == published


def test_time_batch_times_synthetic_shapes(spec):
    runner = make_runner(spec, num_gpu_blocks=32, num_cpu_blocks=8)
    times = runner.time_batch([7, 12], [5, 9, 16], repeats=3, num_swap_blocks=2)
    assert len(times) == 3 and all(t > 0 for t in times)
    with pytest.raises(ValueError, match="needs 33 KV blocks but the pool has 32"):
        runner.time_batch([32 * BLOCK + 1], [], repeats=1)


def _assert_untouched(runner, before):
    for layer, (key, value) in zip(runner.cache.layers, before):
        assert torch.equal(layer.key, key) and torch.equal(layer.value, value)


BAD_BATCHES = [
    # (batch, tokens, tables, message)
    (Batch(decode_seq_ids=[0], decode_context_lens=[9]), {0: list(range(9))}, {0: [1, 2]},
     "needs 3 blocks of 4 but its block table holds 2"),
    (Batch(decode_seq_ids=[0], decode_context_lens=[5]), {0: list(range(4))}, {0: [1, 2]},
     "has 4 tokens but the batch decodes it at length 5"),
    (Batch(decode_seq_ids=[0], decode_context_lens=[5]), {}, {0: [1, 2]}, "no tokens given for sequence 0"),
    (Batch(decode_seq_ids=[0], decode_context_lens=[5]), {0: [1, 2, 3, 4, 9999]}, {0: [1, 2]}, "vocabulary"),
    (Batch(decode_seq_ids=[0], decode_context_lens=[5]), {0: list(range(5))}, {0: [1, 16]}, "outside the KV pool"),
    (Batch(decode_seq_ids=[0, 1], decode_context_lens=[3, 3]), {0: [1, 2, 3], 1: [1, 2, 3]},
     {0: [5], 1: [5]}, "same KV slot"),
    (Batch(prefill_seq_ids=[0], prefill_lens=[3], prefill_sample_ids=[(0, 1)]), {0: [1, 2, 3], 1: [1, 2, 4]},
     {0: [5]}, "tokens differ"),
    (Batch(decode_seq_ids=[0], decode_context_lens=[3], blocks_to_swap_in=[(4, 0)]), {0: [1, 2, 3]},
     {0: [5]}, "blocks_to_swap_in has pair"),
]


@pytest.mark.parametrize("batch, tokens, tables, message", BAD_BATCHES)
def test_bad_batches_fail_before_anything_is_written(opt_tiny, batch, tokens, tables, message):
    runner = make_runner(opt_tiny)
    runner.cache.layers[0].key.normal_()
    batch.blocks_to_copy = [(0, 1)]  # would change the cache if plans ran before validation
    before = [(layer.key.clone(), layer.value.clone()) for layer in runner.cache.layers]
    with pytest.raises(ValueError, match=message):
        runner.execute(batch, tokens, tables.__getitem__)
    _assert_untouched(runner, before)


def test_bad_construction(opt_tiny):
    with pytest.raises(ValueError, match="dtype"):
        ModelRunner(opt_tiny, dtype="int8", num_gpu_blocks=4)
    with pytest.raises(ValueError, match="attention_backend"):
        ModelRunner(opt_tiny, num_gpu_blocks=4, attention_backend="cuda")
    fp32 = make_runner(opt_tiny)
    with pytest.raises(ValueError, match="mismatched dtypes"):
        ModelRunner(opt_tiny, dtype=torch.bfloat16, num_gpu_blocks=4, model=fp32.model)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ModelRunner(opt_tiny, device="cuda", num_gpu_blocks=4)


def test_sampling_parameters_are_checked(opt_tiny):
    runner = make_runner(opt_tiny)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[2], prefill_sample_ids=[(0,)])
    with pytest.raises(ValueError, match="sampling must be one of"):
        runner.execute(batch, {0: [1, 2]}, {0: [0]}.__getitem__, sampling="beam")
