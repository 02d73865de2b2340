"""Conversation files (conversation,round,query_len,response_len): reading, and one-line errors on broken rows."""
from pathlib import Path

import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.workload.conversations import is_conversation_dataset, load_conversations, read_conversations_csv

HEADER = "conversation,round,query_len,response_len\n"
GOOD = HEADER + "7,1,5,10\n7,2,7,3000\n7,3,2000,4\n9,1,3,4\n12,1,1,1\n12,2,2,2\n"


def test_reads_conversations_in_file_order(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text("# a comment\n" + GOOD)
    conversations = read_conversations_csv(path)
    assert len(conversations) == 3 and conversations.conversation_id.tolist() == [7, 9, 12]
    assert conversations.start.tolist() == [0, 3, 4, 6] and conversations.num_rounds.tolist() == [3, 1, 2]
    assert conversations.round.tolist() == [1, 2, 3, 1, 1, 2]
    # every earlier query and whole response of the same conversation, nothing of another one
    assert conversations.history_len().tolist() == [0, 15, 3022, 0, 0, 2]
    assert "conv" in conversations.source and load_conversations(path).start.tolist() == [0, 3, 4, 6]


@pytest.mark.parametrize("rows, key, words", [
    ("7,1,5,10\n7,2,7\n", "row 2", ["3 fields", "header has 4"]),
    ("7,1,5,-10\n", "row 1", ["response_len", "negative"]),
    ("7,1,5,10\n7,2,7.5,3\n", "row 2", ["query_len", "whole number"]),
    ("7,1,5,10\n7,two,7,3\n", "row 2", ["round", "'two' is not a number"]),
    ("7,1,5,10\n7,3,7,3\n", "row 2", ["round", "after round 1 of conversation 7", "must be 2"]),
    ("7,1,5,10\n8,2,7,3\n", "row 2", ["first row of conversation 8", "must be 1"]),
    ("7,1,5,10\n8,1,7,3\n7,1,1,1\n", "row 3", ["conversation 7 appears again"]),
    ("7,1,0,10\n", "row 1", ["query_len", "0 tokens"]),
    ("7,1,5,10\n7,2,5,0\n", "row 2", ["response_len", "0 tokens"]),
])
def test_broken_rows_name_the_file_and_row(tmp_path, rows, key, words):
    path = tmp_path / "conv.csv"
    path.write_text("# comment\n" + HEADER + rows)
    with pytest.raises(SpecError) as caught:
        read_conversations_csv(path)
    error = caught.value
    assert error.source == str(path) and error.key == key and "\n" not in str(error)
    assert "(line " in error.message  # the file line too, to jump to it
    for word in words:
        assert word in error.message


def test_a_missing_column_is_named(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text("conversation,round,query_len\n1,1,5\n")
    with pytest.raises(SpecError) as caught:
        read_conversations_csv(path)
    assert caught.value.source == str(path) and caught.value.key == "column response_len"
    assert "missing" in caught.value.message


def test_a_broken_file_is_one_line_from_the_cli(tmp_path, capsys):
    path = tmp_path / "conv.csv"
    path.write_text(HEADER + "3,1,5,10\n3,2,4,4\n3,4,1,1\n")
    assert main(["trace", "stats", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "row 3" in err and "must be 3" in err


def test_recognised_by_its_columns(tmp_path):
    (tmp_path / "conv.csv").write_text("# c\n\n" + GOOD)
    (tmp_path / "lengths.csv").write_text("prompt_len,output_len\n1,2\n")
    assert is_conversation_dataset("chatbot") and is_conversation_dataset(tmp_path / "conv.csv")
    assert not is_conversation_dataset(tmp_path / "lengths.csv") and not is_conversation_dataset("sharegpt")
    assert not is_conversation_dataset(tmp_path / "missing.csv")


def test_shipped_conversations_are_package_data():
    import sim.workload
    from sim.workload.paths import CHATBOT_CSV
    assert CHATBOT_CSV.is_file()
    assert CHATBOT_CSV.parent == Path(sim.workload.__file__).resolve().parent / "data"
    assert load_conversations("chatbot").source == "sharegpt conversations (sim/workload/data/sharegpt_opt_chatbot.csv)"
