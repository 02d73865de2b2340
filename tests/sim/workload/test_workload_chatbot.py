"""The chatbot generator (paper Fig. 17, the authors' benchmark_chatbot.py): who starts a conversation,
which round each arrival plays, the 1,024-token cuts, determinism, and the workload config that selects it."""
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.chatbot import ChatbotCuts, chatbot_requests
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.conversations import Conversations
from sim.workload.trace import write_trace_csv

ROOT = Path(__file__).resolve().parents[3]


def uniform_conversations(num_conversations: int, rounds: int, query: int = 10, response: int = 20) -> Conversations:
    total = num_conversations * rounds
    return Conversations(np.arange(num_conversations), np.arange(0, total + 1, rounds),
                         np.full(total, query), np.full(total, response), "test conversations")


def play(conversations, count, p, seed=0, max_seq_len=2048):
    return chatbot_requests(conversations, count, p, max_seq_len, np.random.default_rng(seed))


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_reproduces_the_new_conversation_probability(p):
    # conversations long enough that one is always open: every start is the coin's (none forced)
    count = 20_000
    requests = play(uniform_conversations(count // 10, 60), count, p, seed=11)
    share = requests.started[1:].mean()  # the first arrival starts one whatever the coin says
    assert abs(share - p) <= 4 * np.sqrt(p * (1 - p) / (count - 1))


def test_rounds_play_in_order_each_after_the_one_before():
    conversations = uniform_conversations(2000, 8)   # more than the ~600 that 3000 arrivals start
    requests = play(conversations, 3000, 0.2, seed=3)
    row, started = requests.row, requests.started
    assert np.array_equal(started, np.isin(row, conversations.start[:-1]))
    seen = set()
    for r, first in zip(row.tolist(), started.tolist()):
        assert first or r - 1 in seen      # a round follows its conversation's previous round
        assert r not in seen               # and no round is played twice while the file lasts
        seen.add(r)


def test_no_conversation_open_starts_one_whatever_the_coin():
    # p = 0: one conversation at a time, each played to its end before the next starts
    conversations = Conversations([1, 2, 3], [0, 3, 4, 6], [1] * 6, [1] * 6, "three")
    requests = play(conversations, 6, 0.0)
    assert requests.started.sum() == 3
    rows = requests.row.tolist()
    for start, end in zip(conversations.start[:-1].tolist(), conversations.start[1:].tolist()):
        i = rows.index(start)
        assert rows[i:i + end - start] == list(range(start, end))
    # single-round conversations close at once: with nothing open, every arrival starts one
    singles = play(uniform_conversations(50, 1), 200, 0.1)
    assert singles.started.all()


def test_every_arrival_starts_a_conversation_at_p_1():
    requests = play(uniform_conversations(100, 5), 400, 1.0)
    assert requests.started.all() and set(requests.row.tolist()) <= set(range(0, 500, 5))


def test_the_file_is_played_again_when_every_conversation_has_started():
    requests = play(uniform_conversations(3, 2), 30, 0.5)
    assert len(requests.row) == 30 and requests.started.sum() >= 15


def test_prompt_is_the_conversation_so_far_cut_to_its_last_1024_tokens():
    # queries 5, 7, 2000 with responses 10, 3000, 4, played in order (p = 0, one conversation)
    conversations = Conversations([1], [0, 3], [5, 7, 2000], [10, 3000, 4], "one")
    requests = play(conversations, 3, 0.0)
    assert requests.cuts == ChatbotCuts(1024, 1016)
    assert requests.prompt_len.tolist() == [5, 5 + 10 + 7, 1024]   # the third: 3022 + 2000, cut
    # the whole 3000-token response enters the history; the request generates at most 1016 of it
    assert requests.output_len.tolist() == [10, 1016, 4]


def test_cuts_follow_the_models_max_length():
    assert ChatbotCuts.for_model(4096) == ChatbotCuts(2048, 2040)
    with pytest.raises(SpecError, match="max_seq_len"):
        ChatbotCuts.for_model(16)


def test_shipped_trace_respects_the_cuts_and_fits_the_model():
    cfg = WorkloadConfig.from_dict({"dataset": "chatbot", "duration_s": 3600}, "exp.yaml")
    trace = build_trace(cfg, 0.8, 2048, np.random.default_rng(0))
    assert 0.7 < len(trace) / 3600 < 0.9
    assert trace.prompt_len.max() == 1024 and trace.output_len.max() == 1016   # long histories are cut
    assert trace.prompt_len.min() >= 1 and np.all(trace.prompt_len + trace.output_len < 2048)
    assert "chatbot" in trace.source and "p=0.1" in trace.source and "sharegpt conversations" in trace.source
    assert "last 1024 tokens" in trace.source and "stand-in" not in trace.source


def test_same_seed_same_trace(tmp_path):
    cfg = WorkloadConfig.from_dict({"dataset": "chatbot", "duration_s": 600, "new_conversation_prob": 0.2}, "e")
    first, again, other = (build_trace(cfg, 0.5, 2048, np.random.default_rng(seed)) for seed in (4, 4, 5))
    written = [write_trace_csv(t, tmp_path / f"{i}.csv").read_bytes() for i, t in enumerate((first, again, other))]
    assert written[0] == written[1] and written[0] != written[2]


def test_new_conversation_prob_is_a_probability_of_a_conversation_dataset(tmp_path):
    (tmp_path / "conv.csv").write_text("conversation,round,query_len,response_len\n1,1,5,6\n1,2,7,8\n")
    assert WorkloadConfig.from_dict({"dataset": "chatbot"}, "e").new_conversation_prob == 0.1
    cfg = WorkloadConfig.from_dict({"dataset": "conv.csv", "new_conversation_prob": 0}, "e", tmp_path)
    trace = build_trace(cfg, 2.0, 2048, np.random.default_rng(0))
    assert set(trace.prompt_len.tolist()) == {5, 18} and "conv" in trace.source
    for raw, words in [({"dataset": "sharegpt", "new_conversation_prob": 0.1}, "conversation dataset"),
                       ({"dataset": "chatbot", "new_conversation_prob": 1.5}, "[0, 1]"),
                       ({"dataset": "chatbot", "new_conversation_prob": "often"}, "number")]:
        with pytest.raises(SpecError) as caught:
            WorkloadConfig.from_dict(raw, "exp.yaml")
        assert caught.value.key == "workload.new_conversation_prob" and words in caught.value.message


def test_a_run_reads_the_shipped_conversations_for_its_fingerprint():
    from sim.experiment.config import load_experiment
    from sim.experiment.fingerprint import data_files
    from sim.workload.paths import CHATBOT_CSV
    exp = load_experiment(ROOT / "configs" / "paper" / "fig17_chatbot.yaml")
    assert exp.workload.is_chatbot and data_files(exp)["workload.dataset"] == CHATBOT_CSV


def test_fig17_runs_end_to_end(tmp_path, capsys):
    from servesim.cli import main
    out = tmp_path / "fig17"
    args = ["run", str(ROOT / "configs" / "paper" / "fig17_chatbot.yaml"), "--out", str(out), "--jobs", "1",
            "--set", "workload.duration_s=180", "--set", "rates=[0.4]", "--set", "warmup_s=20"]
    assert main(args) == 0
    import pandas as pd
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 5 and summary["system"].nunique() == 5   # the five systems of Fig. 12
    assert summary["workload"].str.contains("chatbot: new conversation p=0.1").all()
    assert (summary["normalized_latency"] > 0).all()


def test_trace_sample_writes_a_chatbot_trace(tmp_path):
    from servesim.cli import main
    from sim.workload.recorded import read_recorded_trace
    out = tmp_path / "chat.csv"
    assert main(["trace", "sample", "--dataset", "chatbot", "--new-conversation-prob", "0.3", "--rate", "0.5",
                 "--duration-s", "200", "--out", str(out)]) == 0
    trace = read_recorded_trace(out)
    assert "chatbot: new conversation p=0.3" in trace.source and trace.prompt_len.max() <= 1024
