"""ShareGPT JSON -> prompt_len,output_len CSV: streaming parse, pairing, the paper's filters."""
import json
import sys

import pytest

from engine.errors import SpecError
from sim.workload.sharegpt import build_sharegpt_csv
from tests.helpers.sharegpt_json import conversation, needs_the_real_tokenizer, truncated_json, turn, words

CONVERSATIONS = [
    conversation(1, turn("human", 5), turn("gpt", 4), turn("human", 99), turn("gpt", 99)),   # kept (5, 4)
    conversation(2, turn("gpt", 9), turn("human", 6), turn("gpt", 8)),                         # kept (6, 8)
    conversation(3, turn("human", ""), turn("gpt", 4)),                                        # empty human turn
    conversation(4, turn("human", 5), turn("gpt", "   ")),                                     # empty reply
    conversation(5, turn("human", 5)),                                                         # no reply
    conversation(6),                                                                           # no turns
    conversation(7, turn("human", 5), turn("human", 5), turn("gpt", 5)),                       # no reply right after
    conversation(8, turn("human", 3), turn("gpt", 50)),                                        # prompt < 4
    conversation(9, turn("human", 50), turn("gpt", 3)),                                        # output < 4
    conversation(10, turn("human", 1025), turn("gpt", 10)),                                    # prompt > 1024
    conversation(11, turn("human", 1000), turn("gpt", 1048)),                                  # sum == 2048
    conversation(12, turn("human", 1000), turn("gpt", 1047)),                                  # kept (1000, 1047)
]


def test_pairs_and_filters_on_a_truncated_file(tmp_path):
    source = tmp_path / "sharegpt.json"
    source.write_text(truncated_json(CONVERSATIONS))
    out = tmp_path / "out" / "sharegpt_opt.csv"
    build = build_sharegpt_csv(out, source, count_tokens=words)
    assert build.walk.num_items == 12 and build.walk.truncated_at_line is not None
    assert build.num_pairs == 7
    assert build.walk.skipped == {"empty human turn": 1, "empty reply": 1, "no reply right after the human turn": 2,
                                  "no human turn": 1}
    lines = out.read_text().splitlines()
    header = lines.index("prompt_len,output_len")
    assert lines[header + 1:] == ["5,4", "6,8", "1000,1047"]
    assert all(line.startswith("# ") for line in lines[:header])
    assert any("servesim trace build sharegpt" in line for line in lines[:header])
    assert any("kept: 3 pairs" in line for line in lines[:header])


def test_rebuild_is_byte_identical(tmp_path):
    source = tmp_path / "sharegpt.json"
    source.write_text(json.dumps(CONVERSATIONS))
    first = build_sharegpt_csv(tmp_path / "a.csv", source, count_tokens=words).path.read_bytes()
    assert build_sharegpt_csv(tmp_path / "b.csv", source, count_tokens=words).path.read_bytes() == first


@pytest.mark.parametrize("text, key", [
    ('{"conversations": []}', "top level"),
    ('[{"id": "a", "text": "hello"}]', "item 1"),
    ('[{"id": "a", "conversations": []}, {"conversations": [{"speaker": "human"}]}]', "item 2"),
    ('[{"id": "a", "conversations": []}, {bad json}]', "item 2"),        # complete file: a real syntax error
    ('[{"id": "a", "conversations": [{"from": "gpt", "value": "hi"}]}]', "conversations"),  # nothing to pair
])
def test_not_sharegpt_shaped(tmp_path, text, key):
    source = tmp_path / "not_sharegpt.json"
    source.write_text(text)
    out = tmp_path / "out.csv"
    with pytest.raises(SpecError) as caught:
        build_sharegpt_csv(out, source, count_tokens=words)
    assert caught.value.key == key and caught.value.source == str(source)
    assert not out.exists() and list(tmp_path.iterdir()) == [source]     # nothing written, not even a temp file


def test_gpt2_tokenizer_offline():
    needs_the_real_tokenizer()
    from sim.workload.tokenizer import count_tokens, gpt2_encoding
    assert gpt2_encoding().encode("Hello world") == [15496, 995]
    assert count_tokens(["Hello world", "<|endoftext|>"]) == [2, 7]   # special-token text counts as plain text


def test_build_with_the_real_tokenizer(tmp_path):
    needs_the_real_tokenizer()
    source = tmp_path / "sharegpt.json"
    source.write_text(json.dumps([conversation(1, turn("human", "Hello world, how are you today?"),
                                               turn("gpt", "Very well, thank you for asking."))]))
    out = tmp_path / "s.csv"
    build_sharegpt_csv(out, source)
    assert out.read_text().splitlines()[-2:] == ["prompt_len,output_len", "8,8"]
    assert "GPT-2 byte-level BPE" in out.read_text()


def test_without_the_rebuild_data_extra_a_real_tokenizer_test_skips_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # an import of it fails, as where it is not installed
    with pytest.raises(pytest.skip.Exception, match=r"\[rebuild-data\]"):
        needs_the_real_tokenizer()
