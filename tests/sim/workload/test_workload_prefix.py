"""The shared-prefix workload (paper Fig. 16): the WMT16 stand-in, workload.prefix_tokens, and traces
that carry a prefix."""
import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.lengths import DATASET_NAMES, load_lengths
from sim.workload.recorded import read_recorded_trace
from sim.workload.trace import Trace, write_trace_csv
from sim.workload.translation import (
    EUROPARL_V7_DE_EN,
    SEPARATOR_TOKENS,
    TRANSLATION_STAND_INS,
    tokens_per_word,
)

STAND_IN = TRANSLATION_STAND_INS["wmt16-en-de-standin"]


def parse(raw):
    return WorkloadConfig.from_dict(raw, "exp.yaml")


def test_the_stand_in_is_a_named_dataset_labelled_stand_in():
    assert "wmt16-en-de-standin" in DATASET_NAMES
    assert load_lengths("wmt16-en-de-standin") is STAND_IN
    assert "stand-in" in STAND_IN.source and "Europarl v7" in STAND_IN.source


def test_tokens_per_word_makes_the_papers_5_shot_prefix_from_europarl_means():
    words = (EUROPARL_V7_DE_EN["english_words"] + EUROPARL_V7_DE_EN["german_words"]) / EUROPARL_V7_DE_EN["pairs"]
    assert words == pytest.approx(48.10, abs=0.01)
    assert tokens_per_word() == pytest.approx(1.322, abs=0.001)
    # instruction + 5 x (pair + " =>" + newline) = the caption's 341 tokens
    assert 8 + 5 * (tokens_per_word() * words + 3) == pytest.approx(341)


def test_draws_have_europarls_means_in_tokens_and_correlated_lengths():
    prompt, output = STAND_IN.sample(100_000, 2048, np.random.default_rng(0))
    english = (prompt - SEPARATOR_TOKENS).mean() / STAND_IN.tokens_per_word
    german = output.mean() / STAND_IN.tokens_per_word
    assert english == pytest.approx(24.90, rel=0.02)
    assert german == pytest.approx(23.20, rel=0.02)
    assert np.corrcoef(np.log(prompt), np.log(output))[0, 1] > 0.8
    assert prompt.min() >= 1 + SEPARATOR_TOKENS and output.min() >= 1


def test_prefix_goes_before_every_prompt_and_requests_that_do_not_fit_are_dropped():
    cfg = parse({"dataset": "wmt16-en-de-standin", "prefix_tokens": 341, "duration_s": 60})
    trace = build_trace(cfg, 5.0, 2048, np.random.default_rng(1))
    assert trace.prefix_len == 341 and (trace.prompt_len > 341).all()
    assert "stand-in" in trace.source and "shared prefix of 341 tokens" in trace.source
    # with little room left after the prefix, only short pairs are kept: prefix + input + output < max
    tight = build_trace(cfg, 5.0, 341 + 60, np.random.default_rng(1))
    assert (tight.prompt_len + tight.output_len < 341 + 60).all() and len(tight) == len(trace)


def test_no_prefix_leaves_the_trace_as_it_was():
    base = {"dataset": "alpaca-standin", "duration_s": 60}
    with_key = build_trace(parse({**base, "prefix_tokens": 0}), 2.0, 2048, np.random.default_rng(3))
    without = build_trace(parse(base), 2.0, 2048, np.random.default_rng(3))
    assert with_key.prefix_len == 0 and with_key.source == without.source
    assert (with_key.prompt_len == without.prompt_len).all() and (with_key.output_len == without.output_len).all()


@pytest.mark.parametrize("value, words", [(-1, "non-negative integer"), (1.5, "non-negative integer"),
                                          (True, "non-negative integer"), ("80", "non-negative integer")])
def test_bad_prefix_tokens(value, words):
    with pytest.raises(SpecError) as err:
        parse({"prefix_tokens": value})
    assert "workload.prefix_tokens" in str(err.value) and words in str(err.value)




def test_a_written_trace_keeps_its_prefix(tmp_path):
    trace = Trace([0.0, 1.0], [100, 90], [5, 6], source="x", prefix_len=80)
    path = write_trace_csv(trace, tmp_path / "t.csv")
    assert "# prefix_tokens: 80" in path.read_text()
    back = read_recorded_trace(path)
    assert back.prefix_len == 80 and back.prompt_len.tolist() == [100, 90]
    assert trace.window(0.5).prefix_len == trace.scaled(2).prefix_len == trace.with_n(2).prefix_len == 80


@pytest.mark.parametrize("line, where, words", [
    ("# prefix_tokens: many", "prefix_tokens", "whole number"),
    ("# prefix_tokens: 95", "row 2", "cannot hold the shared prefix"),
])
def test_a_bad_prefix_line_names_the_file(tmp_path, line, where, words):
    path = tmp_path / "t.csv"
    path.write_text(f"{line}\narrived_at,num_prefill_tokens,num_decode_tokens\n0,100,5\n1,90,5\n")
    with pytest.raises(SpecError) as err:
        read_recorded_trace(path)
    message = str(err.value)
    assert str(path) in message and where in message and words in message


def test_a_trace_refuses_prompts_no_longer_than_its_prefix():
    with pytest.raises(ValueError, match="longer than the shared prefix"):
        Trace([0.0], [80], [5], prefix_len=80)


def test_trace_sample_writes_a_prefix_a_replay_reads_back(tmp_path, capsys):
    from servesim.cli import main
    out = tmp_path / "t.csv"
    args = ["trace", "sample", "--dataset", "wmt16-en-de-standin", "--rate", "2", "--duration-s", "30",
            "--prefix-tokens", "80", "--out", str(out)]
    assert main(args) == 0
    trace = read_recorded_trace(out)
    assert trace.prefix_len == 80 and "stand-in" in trace.source and (trace.prompt_len > 80).all()
    assert main(args[:-4] + ["--prefix-tokens", "2046", "--out", str(out)]) == 2
    assert "--prefix-tokens" in capsys.readouterr().err
