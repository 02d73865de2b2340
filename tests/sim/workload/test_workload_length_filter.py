"""workload.length_filter: `paper` keeps ShareGPT as the paper cut it (prompt <= 1024, prompt + output < 2048,
whatever the model), `model` reads the uncut build, so the model's max_seq_len alone decides."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.lengths import load_lengths
from sim.workload.paths import SHAREGPT_CSV, SHAREGPT_UNCUT_CSV
from sim.workload.recorded import read_recorded_trace
from sim.workload.sharegpt import build_sharegpt_csv
from tests.helpers.sharegpt_json import conversation, turn, words

ROOT = Path(__file__).resolve().parents[3]
LLAMA31_POSITIONS = 131_072
# the uncut build's facts, as `servesim trace build sharegpt-uncut` printed them
UNCUT_PAIRS, UNCUT_LONGEST_PROMPT = 16_245, 162_306


def draw(keys: dict, max_seq_len: int, rate: float = 50.0):
    cfg = WorkloadConfig.from_dict({"duration_s": 600, **keys}, "exp.yaml")
    return build_trace(cfg, rate, max_seq_len, np.random.default_rng(0))


def test_the_paper_cut_stays_for_a_model_with_more_positions():
    trace = draw({"dataset": "sharegpt"}, LLAMA31_POSITIONS)
    assert (trace.prompt_len + trace.output_len).max() < 2048 and trace.prompt_len.max() <= 1024
    explicit = draw({"dataset": "sharegpt", "length_filter": "paper"}, LLAMA31_POSITIONS)
    assert np.array_equal(explicit.prompt_len, trace.prompt_len) and explicit.source == trace.source


def test_the_model_filter_keeps_every_pair_up_to_the_models_max():
    uncut = load_lengths("sharegpt", "model")
    assert len(uncut) == UNCUT_PAIRS and int(uncut.prompt_len.max()) == UNCUT_LONGEST_PROMPT
    sums = uncut.prompt_len + uncut.output_len
    trace = draw({"dataset": "sharegpt", "length_filter": "model"}, LLAMA31_POSITIONS)
    kept = set(zip(trace.prompt_len.tolist(), trace.output_len.tolist()))
    fitting = set(zip(uncut.prompt_len[sums < LLAMA31_POSITIONS].tolist(),
                      uncut.output_len[sums < LLAMA31_POSITIONS].tolist()))
    assert kept == fitting                       # 30,000 draws cycle the kept list: every fitting pair, no other
    assert (trace.prompt_len + trace.output_len).max() >= 8192 and trace.prompt_len.max() > 1024
    assert "uncut" in trace.source


def test_the_model_filter_at_2048_keeps_what_the_paper_dropped_for_its_prompt():
    trace = draw({"dataset": "sharegpt", "length_filter": "model"}, 2048)
    assert (trace.prompt_len + trace.output_len).max() < 2048
    assert trace.prompt_len.max() > 1024         # vLLM's benchmark dropped prompts over 1,024; the model need not


PAPER = sorted((ROOT / "configs" / "paper").glob("*.yaml")) + [ROOT / "configs" / "quickstart.yaml"]


@pytest.mark.parametrize("path", [p for p in PAPER if "sharegpt" in p.read_text()], ids=lambda p: p.stem)
def test_the_paper_configs_keep_the_papers_cut(path):
    exp = load_experiment(path)
    assert exp.workload.length_filter == "paper"
    if exp.workload.is_chatbot:
        return  # its rounds are cut to the model's halves, as its generator did (test_workload_chatbot.py)
    trace = build_trace(exp.workload, max(exp.rates), exp.model.max_seq_len, np.random.default_rng(0))
    assert (trace.prompt_len + trace.output_len).max() < 2048


def test_the_uncut_file_holds_the_paper_files_pairs_and_more():
    paper, uncut = load_lengths(SHAREGPT_CSV), load_lengths(SHAREGPT_UNCUT_CSV)
    cut = (uncut.prompt_len <= 1024) & (uncut.prompt_len + uncut.output_len < 2048)
    assert np.array_equal(uncut.prompt_len[cut], paper.prompt_len)   # the same build, less the paper's filter
    assert np.array_equal(uncut.output_len[cut], paper.output_len)
    assert "no length limit" in SHAREGPT_UNCUT_CSV.read_text()[:2000]


def test_the_uncut_build_keeps_long_pairs_and_drops_short_ones(tmp_path):
    source = tmp_path / "sharegpt.json"
    source.write_text(json.dumps([
        conversation(1, turn("human", 1025), turn("gpt", 10)),      # the paper drops it: prompt > 1024
        conversation(2, turn("human", 1000), turn("gpt", 1048)),    # the paper drops it: sum == 2048
        conversation(3, turn("human", 3), turn("gpt", 50)),         # both drop it: prompt < 4
    ]))
    uncut = build_sharegpt_csv(tmp_path / "u.csv", source, count_tokens=words, cut="uncut")
    paper = build_sharegpt_csv(tmp_path / "p.csv", source, count_tokens=words)
    assert list(zip(uncut.prompt_len.tolist(), uncut.output_len.tolist())) == [(1025, 10), (1000, 1048)]
    assert len(paper.prompt_len) == 0
    assert "servesim trace build sharegpt-uncut" in (tmp_path / "u.csv").read_text()


@pytest.mark.parametrize("keys, message", [
    ({"length_filter": "uncut"}, "'uncut' is not one of ['paper', 'model']"),
    ({"length_filter": ["model"]}, "is not one of ['paper', 'model']"),
    ({"dataset": "sharegpt-fig11-standin", "length_filter": "model"}, "has no uncut form"),
])
def test_bad_values_name_the_file_and_the_key(tmp_path, keys, message):
    with pytest.raises(SpecError) as caught:
        WorkloadConfig.from_dict(keys, str(tmp_path / "exp.yaml"))
    text = str(caught.value)
    assert "exp.yaml" in text and "workload.length_filter" in text and message in text and "\n" not in text


def test_a_config_file_with_a_bad_value_is_named(tmp_path):
    config = tmp_path / "long.yaml"
    config.write_text((ROOT / "configs/examples/long_context_llama31_8b.yaml").read_text()
                      .replace("../../calibrate", str(ROOT / "calibrate")))
    with pytest.raises(SpecError) as caught:
        load_experiment(config, ["workload.dataset=sharegpt", "workload.length_filter=models"])
    assert "long.yaml" in str(caught.value) and "workload.length_filter" in str(caught.value)


def test_other_datasets_are_kept_by_the_model_under_either_filter():
    for dataset in ("arxiv-summarization", "alpaca-standin"):
        paper = draw({"dataset": dataset}, 4096)
        model = draw({"dataset": dataset, "length_filter": "model"}, 4096)
        assert np.array_equal(paper.prompt_len, model.prompt_len) and np.array_equal(paper.output_len,
                                                                                     model.output_len)


def test_a_replay_sets_the_filter_aside_with_the_dataset(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5000,10\n1,10,10\n")
    cfg = WorkloadConfig.from_dict({"trace": str(trace), "length_filter": "model"}, "exp.yaml")
    assert len(build_trace(cfg, None, LLAMA31_POSITIONS, np.random.default_rng(0))) == 2


def test_trace_sample_takes_the_filter(tmp_path):
    out = tmp_path / "t.csv"
    args = ["trace", "sample", "--dataset", "sharegpt", "--rate", "20", "--duration-s", "600",
            "--max-seq-len", str(LLAMA31_POSITIONS), "--out", str(out)]
    assert main([*args, "--length-filter", "model"]) == 0
    assert read_recorded_trace(out).prompt_len.max() > 1024
    assert main(args) == 0
    assert read_recorded_trace(out).prompt_len.max() <= 1024
