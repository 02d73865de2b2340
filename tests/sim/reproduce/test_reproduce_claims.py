"""The claim readers on small hand-made summaries, and the table they fill."""
import pandas as pd
import pytest

from calibrate.costmodel import CostModel
from sim.reproduce.claims import CLAIMS
from sim.reproduce.figures import FIGURES, NOT_RUNNABLE
from sim.reproduce.gpu_claims import kernel_overhead_prediction
from sim.reproduce.results import Results
from sim.reproduce.table import claims_table, markdown

CLAIM = {claim.id: claim for claim in CLAIMS}


def rows(panel, system, rates, latency, **columns):
    return pd.DataFrame({"panel": panel, "series": columns.pop("series", ""), "scale": "hand-made",
                         "system": system, "rate": rates, "normalized_latency": latency, "seed": 0, **columns})


def crossing_at(rate):
    """A straight curve over 1-4 req/s that reaches 0.5 s/token at `rate`."""
    rates = [1, 2, 3, 4]
    return rates, [0.5 * r / rate for r in rates]


def fig12(oracle_crossings):
    frames = []
    for panel, oracle in oracle_crossings.items():
        frames += [rows(panel, "vLLM", *crossing_at(3.5)), rows(panel, "Orca (Oracle)", *crossing_at(oracle))]
    return Results({"fig12": pd.concat(frames, ignore_index=True)})


def test_vllm_over_oracle_lands_when_every_panel_is_in_the_range():
    reading = CLAIM["fig12.sharegpt_vs_oracle"].read(fig12({"a": 1.5, "b": 1.75, "c": 2.0}))
    assert reading.lands == "yes"  # 2.33x, 2.0x, 1.75x
    assert reading.simulated.startswith("a 2.33x (3.5 / 1.5 req/s), b 2.00x")
    assert "0.5 s/token" in reading.how


def test_one_panel_out_of_the_range_makes_it_miss():
    assert CLAIM["fig12.sharegpt_vs_oracle"].read(fig12({"a": 1.5, "b": 1.75, "c": 3.0})).lands == "no"


def test_batched_request_ratios():
    frame = pd.concat([rows(p, s, [2.0 if p == "a" else 30.0], [0.1], mean_batched_requests=[b])
                       for p in "ab" for s, b in (("vLLM", 22.0), ("Orca (Oracle)", 10.0), ("Orca (Max)", 7.0))])
    results = Results({"fig13": frame})
    assert CLAIM["fig13.vs_oracle"].read(results).lands == "yes"  # 2.2x
    assert CLAIM["fig13.vs_max"].read(results).simulated.startswith("3.14x")
    assert CLAIM["fig13.vs_max"].read(results).lands == "no"  # 4.3x +-5%
    assert CLAIM["fig13.orca_max_seven"].read(results).lands == "yes"


def kv_row(system, token, reserved, internal, external, idle):
    return rows("", system, [2.0], [0.1], kv_token_share=[token], kv_reserved_share=[reserved],
                kv_internal_frag_share=[internal], kv_external_frag_share=[external], kv_idle_share=[idle])


def test_kv_shares_of_fig2():
    frame = pd.concat([kv_row("Orca (Max)", 0.21, 0.1, 0.6, 0.06, 0.03), kv_row("Orca (Pow2)", 0.27, 0.2, 0.13, 0.4, 0),
                       kv_row("Orca (Oracle)", 0.38, 0.25, 0, 0.37, 0), kv_row("vLLM", 0.5, 0, 0.01, 0.02, 0.47)])
    results = Results({"fig2": frame})
    assert CLAIM["fig2.orca_token_share"].read(results).lands == "yes"
    waste = CLAIM["fig2.vllm_waste"].read(results)  # 3% wasted; the 47% idle is not waste
    assert waste.lands == "yes" and waste.simulated == "3.0% (and 47.0% idle)"
    assert CLAIM["fig2.orca_max_external"].read(results).simulated == "9.0%"  # external + idle, as the paper lumps them


def by_block_size(series, latency):
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    return rows("b", [f"vLLM bs={s}" for s in sizes], [3.0] * 9, latency, series=series, block_size=sizes)


def test_best_block_sizes():
    sharegpt = by_block_size("ShareGPT", [3.0, 2.0, 1.5, 1.2, 1.0, 1.0, 1.05, 1.1, 1.4])
    alpaca = by_block_size("Alpaca", [3.0, 2.0, 1.5, 1.2, 1.0, 1.0, 1.5, 2.0, 3.0])
    results = Results({"fig18": pd.concat([sharegpt, alpaca])})
    assert CLAIM["fig18b.sharegpt_best"].read(results).lands == "yes"
    assert CLAIM["fig18b.alpaca_best"].read(results).lands == "yes"
    flat = Results({"fig18": pd.concat([by_block_size("ShareGPT", [1.0] * 9), alpaca])})
    reading = CLAIM["fig18b.sharegpt_best"].read(flat)
    assert reading.lands == "no" and reading.simulated.startswith("near-best 1, 2, 4")


def test_recompute_and_swap_comparable():
    frame = rows("b", ["recompute bs=16", "swap bs=16", "recompute bs=64", "swap bs=64"], [3.5] * 4,
                 [1.0, 1.05, 1.0, 1.3], preemption=["recompute", "swap"] * 2, block_size=[16, 16, 64, 64])
    reading = CLAIM["fig19b.comparable_16_64"].read(Results({"fig19": frame}))
    assert reading.lands == "no" and "bs 16: recompute 1.000, swap 1.050 s/token (5% apart)" in reading.simulated


def test_every_claim_has_a_row_with_a_value_or_a_reason():
    table = claims_table(Results({}))
    assert list(table["claim"]) == [c.id for c in CLAIMS] and table["claim"].is_unique
    for _, row in table.iterrows():
        assert row["simulated"] or row["note"], row["claim"]
    notes = dict(zip(table["claim"], table["note"]))
    assert notes["fig12.sharegpt_vs_oracle"] == "not run yet: servesim reproduce fig12"
    assert "beam search" in notes["fig14.beam6_vs_oracle"]
    assert "| fig13.vs_max | 13a |" in markdown(table, Results({}))


def test_claims_read_runnable_figures_or_say_what_they_need():
    for claim in CLAIMS:
        assert claim.read is not None or claim.needs, claim.id
        assert claim.data in FIGURES or claim.data in NOT_RUNNABLE or claim.data == "", claim.id


class PerBlockAttention(CostModel):
    """1 s per iteration, plus per sequence 1 ms per context token and 10 ms per block read."""

    def __init__(self, block_size):
        self.block_size = block_size

    def iteration_time(self, batch):
        blocks = sum(-(-c // self.block_size) for c in batch.decode_context_lens)
        return 1.0 + 1e-3 * batch.sum_decode_context + 1e-2 * blocks

    def swap_time(self, num_blocks):
        return 0.0


def test_the_kernel_prediction_is_paged_over_dense_attention_time():
    overheads = kernel_overhead_prediction(PerBlockAttention)
    assert set(overheads) == {(b, c) for b in (8, 32) for c in (64, 128, 256)}
    # context 64: 4 blocks of 16 (0.064 + 0.04 s per sequence) against one of 64 (0.064 + 0.01 s)
    assert overheads[8, 64] == pytest.approx((0.064 + 0.04) / (0.064 + 0.01) - 1)
    assert overheads[32, 256] == pytest.approx((0.256 + 0.16) / (0.256 + 0.01) - 1)


def test_the_kernel_claim_is_marked_as_a_prediction():
    reading = CLAIM["fig18a.kernel_overhead"].read(Results({}))
    assert "cost-model prediction" in reading.simulated and "needs a GPU" in reading.note


def test_gains_that_rise_with_the_number_of_samples():
    def fig14(orca_crossings):
        frames = [rows(p, "vLLM", *crossing_at(3.5)) for p in "abc"]
        frames += [rows(p, orca, *crossing_at(c)) for p, c in zip("abc", orca_crossings)
                   for orca in ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)")]
        return Results({"fig14": pd.concat(frames, ignore_index=True)})

    claim = CLAIM["fig14.more_samples_more_gain"]
    assert claim.read(fig14([3.0, 2.0, 1.5])).lands == "yes"
    assert claim.read(fig14([2.0, 3.0, 1.5])).lands == "no"


def test_an_advantage_less_pronounced_on_opt_175b():
    def fig12_alpaca(f_crossing):
        frames = [rows(p, "vLLM", *crossing_at(3.5)) for p in "def"]
        frames += [rows(p, orca, *crossing_at(c)) for p, c in zip("def", [1.5, 1.5, f_crossing])
                   for orca in ("Orca (Pow2)", "Orca (Oracle)")]
        return Results({"fig12": pd.concat(frames, ignore_index=True)})

    claim = CLAIM["fig12.175b_less_pronounced"]
    assert claim.read(fig12_alpaca(3.0)).lands == "yes"
    assert claim.read(fig12_alpaca(1.2)).lands == "no"
