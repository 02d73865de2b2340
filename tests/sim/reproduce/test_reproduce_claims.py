"""The claim readers on small hand-made summaries, and the table they fill."""
import pandas as pd
import pytest

from calibrate.clock.costmodel import CostModel
from sim.reproduce.claims import CLAIMS
from sim.reproduce.figures import FIGURES
from sim.reproduce.memory_claims import prompt_share
from sim.reproduce.predictions import kernel_frame
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
    assert notes["fig19a.crossover"] == "not run yet: servesim reproduce fig19"
    assert "| fig13.vs_max | 13a |" in markdown(table, Results({}))


def test_every_claim_reads_a_reproduced_figure():
    assert all(claim.data in FIGURES for claim in CLAIMS)


class PerBlockAttention(CostModel):
    """1 s per iteration, plus per sequence 1 ms per context token and `per_block` s per block read."""

    def __init__(self, block_size, per_block=1e-2):
        self.block_size, self.per_block = block_size, per_block

    def iteration_time(self, batch):
        blocks = sum(-(-c // self.block_size) for c in batch.decode_context_lens)
        return 1.0 + 1e-3 * batch.sum_decode_context + self.per_block * blocks

    def swap_time(self, num_blocks):
        return 0.0


def test_the_kernel_prediction_is_paged_over_dense_attention_time():
    frame = kernel_frame(PerBlockAttention(16), PerBlockAttention(16, per_block=0), num_layers=2)
    overheads = {(r.batch, r.context): r.overhead for r in frame.itertuples()}
    assert set(overheads) == {(b, c) for b in (8, 32) for c in (64, 128, 256)}
    # context 64: 4 blocks of 16 (0.064 + 0.04 s per sequence) against the dense 0.064 s
    assert overheads[8, 64] == pytest.approx(0.04 / 0.064)
    assert overheads[32, 256] == pytest.approx(0.16 / 0.256)
    row = frame[(frame["batch"] == 32) & (frame["context"] == 256)].iloc[0]
    assert row["dense_us"] == pytest.approx(32 * 0.256 / 2 * 1e6)  # one layer of two


def test_the_kernel_claim_is_marked_as_a_prediction():
    # 3.68 ms a 16-token block on top of its 16 ms of tokens: 23% at every shape
    frame = kernel_frame(PerBlockAttention(16, 3.68e-3), PerBlockAttention(16, 0), num_layers=1)
    results = Results({"fig18": frame.assign(panel="a", cost_model="hand-made", scale="cost-model prediction")})
    reading = CLAIM["fig18a.kernel_overhead"].read(results)
    assert reading.lands == "yes" and reading.simulated.startswith("23.0% (cost-model prediction")
    assert "cost-model prediction" in reading.simulated and "needs a GPU" in reading.note
    assert claims_table(results).set_index("claim").loc["fig18a.kernel_overhead", "scale"].startswith("cost-model")


def preemption_costs(recompute, swap_in_out):
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    return Results({"fig19": pd.DataFrame({
        "panel": "a", "block_size": sizes, "tokens": 512, "recompute_ms": recompute,
        "swap_in_ms": [v / 2 for v in swap_in_out], "swap_out_ms": [v / 2 for v in swap_in_out],
        "swap_in_out_ms": swap_in_out, "cost_model": "hand-made"})})


def test_the_fig19a_crossover():
    paper_shape = preemption_costs([70.0] * 9, [440, 240, 135, 84, 58, 46, 39, 36, 34])
    crossover = CLAIM["fig19a.crossover"].read(paper_shape)
    assert crossover.lands == "yes" and crossover.simulated.startswith("swap in+out cheaper than recompute from "
                                                                       "block size 16")
    assert CLAIM["fig19a.swap_small_blocks"].read(paper_shape).lands == "yes"
    assert CLAIM["fig19a.recompute_flat"].read(paper_shape).lands == "yes"
    worst = CLAIM["fig19a.recompute_20pct"].read(paper_shape)
    assert worst.lands == "no" and worst.simulated == "at most 2.06x swap in+out's latency (block size 256)"
    # swapping priced by bytes alone: no crossover, nothing excessive at small blocks
    bytes_only = preemption_costs([70.0] * 9, [34.0] * 9)
    assert CLAIM["fig19a.crossover"].read(bytes_only).lands == "no"
    assert CLAIM["fig19a.swap_small_blocks"].read(bytes_only).lands == "no"
    rising = preemption_costs([70.0 + s for s in range(9)], [80.0] * 9)
    assert CLAIM["fig19a.recompute_flat"].read(rising).lands == "no"  # 70 to 78 ms: 11% apart
    assert CLAIM["fig19a.recompute_20pct"].read(rising).lands == "yes"


def savings(panel, per_width, series="Alpaca", rates=(1.0, 2.0)):
    """vLLM rows of Fig. 15: per width, a saving at each rate whose mean is the width's value."""
    frames = []
    for width, value in per_width.items():
        spread = [value - 0.01, value + 0.01]
        frames.append(rows(panel, "vLLM", list(rates), [0.1] * len(rates), series=series, memory_saving=spread,
                           n=width if panel == "a" else 1, beam_width=width if panel == "b" else 1))
    return frames


def test_memory_saving_in_the_papers_range():
    frame = pd.concat(savings("a", {2: 0.062, 4: 0.08, 6: 0.097}) + savings("b", {2: 0.40, 4: 0.50, 6: 0.60})
                      + savings("a", {2: 0.17, 4: 0.25, 6: 0.35}, "ShareGPT"))
    results = Results({"fig15": frame})
    parallel = CLAIM["fig15.parallel_alpaca"].read(results)
    assert parallel.lands == "yes" and parallel.simulated == "2: 6.2%, 4: 8.0%, 6: 9.7%"
    assert "the mean over 1, 2 req/s" in parallel.how
    beam = CLAIM["fig15.beam_alpaca"].read(results)
    assert beam.lands == "no"  # 60% at width 6 is above 55.2%
    assert CLAIM["fig15.beam_up_to_55"].read(results).simulated == "60.0% (beam width 6)"
    assert CLAIM["fig15.parallel_sharegpt"].read(results).lands == "no"  # 35% above 30.5%
    assert "not run yet" in claims_table(results).set_index("claim").loc["fig15.beam_sharegpt", "note"]


def test_the_prompt_share_from_the_memory_saving():
    # 2 samples of a 2-block prompt with 3 output blocks each: 10 blocks without sharing, 2 saved, 8 held
    assert prompt_share(2 / 10, 2) == pytest.approx(2 / 8)
    results = Results({"fig15": pd.concat(savings("a", {2: 0.2, 4: 0.1, 6: 0.05}))})
    reading = CLAIM["fig15.prompt_share"].read(results)
    assert reading.simulated == "n = 2: 25.0%, n = 4: 3.7%, n = 6: 1.1%" and reading.lands == "yes"


def test_chatbot_claims():
    def fig17(orca_crossings):
        frames = [rows("", "vLLM", *crossing_at(3.0))]
        frames += [rows("", orca, *crossing_at(c)) for orca, c in zip(("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)"),
                                                                      orca_crossings)]
        return Results({"fig17": pd.concat(frames, ignore_index=True)})

    alike = fig17([1.5, 1.5, 1.55])
    assert CLAIM["fig17.vs_orca"].read(alike).lands == "yes"  # 2.0x, 2.0x, 1.94x
    assert CLAIM["fig17.orca_alike"].read(alike).lands == "yes"
    apart = fig17([1.2, 1.5, 2.4])
    assert CLAIM["fig17.vs_orca"].read(apart).lands == "no"
    reading = CLAIM["fig17.orca_alike"].read(apart)
    assert reading.lands == "no" and reading.simulated.endswith("(highest / lowest 2.00x)")


def fig14(orca_crossings):
    """vLLM reaching 0.5 s/token at 3.5 req/s in every panel a-f, the Orcas at their panel's crossing."""
    frames = [rows(p, "vLLM", *crossing_at(3.5)) for p in "abcdef"]
    frames += [rows(p, orca, *crossing_at(c)) for p, c in zip("abcdef", orca_crossings)
               for orca in ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)")]
    return Results({"fig14": pd.concat(frames, ignore_index=True)})


def test_gains_that_rise_with_the_number_of_samples():
    claim = CLAIM["fig14.more_samples_more_gain"]
    assert claim.read(fig14([3.0, 2.0, 1.5] * 2)).lands == "yes"
    assert claim.read(fig14([2.0, 3.0, 1.5] * 2)).lands == "no"
    assert CLAIM["fig14.wider_beams_more_gain"].read(fig14([3.0, 3.0, 3.0, 3.0, 1.5, 2.0])).lands == "no"


def test_beam_search_claims():
    beams_gain_more = fig14([3.0, 2.0, 1.75, 2.5, 1.75, 1.5])  # vLLM over Oracle at width 6: 3.5 / 1.5 = 2.33x
    assert CLAIM["fig14.beam6_vs_oracle"].read(beams_gain_more).lands == "yes"
    assert CLAIM["fig14.wider_beams_more_gain"].read(beams_gain_more).lands == "yes"
    reading = CLAIM["fig14.beam_more_than_parallel"].read(beams_gain_more)
    assert reading.lands == "yes" and "2: 1.17x -> 1.40x" in reading.simulated
    assert CLAIM["fig14.beam_more_than_parallel"].read(fig14([1.5] * 3 + [3.0] * 3)).lands == "no"


def test_an_advantage_less_pronounced_on_opt_175b():
    def fig12_alpaca(f_crossing):
        frames = [rows(p, "vLLM", *crossing_at(3.5)) for p in "def"]
        frames += [rows(p, orca, *crossing_at(c)) for p, c in zip("def", [1.5, 1.5, f_crossing])
                   for orca in ("Orca (Pow2)", "Orca (Oracle)")]
        return Results({"fig12": pd.concat(frames, ignore_index=True)})

    claim = CLAIM["fig12.175b_less_pronounced"]
    assert claim.read(fig12_alpaca(3.0)).lands == "yes"
    assert claim.read(fig12_alpaca(1.2)).lands == "no"


def test_a_one_panel_figure_reads_without_panel_letters():
    results = Results({"fig17": rows("", "vLLM", [0.2, 0.4, 0.6, 0.8], [0.1, 0.3, 0.7, 0.9])})
    reading = CLAIM["fig17.capacity_in_axes"].read(results)
    assert reading.simulated == "0.50 req/s" and reading.lands == "yes"
    assert "(0-0.8)" in reading.how and "simulated rates: 0.2, 0.4, 0.6, 0.8" in reading.how
