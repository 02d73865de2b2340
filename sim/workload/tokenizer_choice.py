"""Whose tokenizer counted a workload's lengths: the shipped ShareGPT data comes counted by several.

The same ShareGPT text is a different number of tokens to each model's tokenizer (Llama-3's holds 128,256 ids,
OPT's GPT-2 BPE 50,257), so a workload reads the counts of the tokenizer its model uses where one ships
(`workload.tokenizer`, or the model's own by model_tokenizer), and OPT's otherwise. Only `sharegpt` (both its
builds) and `chatbot` ship in several counts; every other dataset carries its own. How each was built and
checked: traces/README.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.spec import ModelSpec


@dataclass(frozen=True)
class Tokenizer:
    """One tokenizer whose counts ship: its name in a workload, in the files' names, and in labels."""

    name: str     # workload.tokenizer's value
    stem: str     # the files: sharegpt_{stem}.csv, sharegpt_{stem}_uncut.csv, sharegpt_{stem}_chatbot.csv
    tokens: str   # what a label calls its counts: "Llama-3 tokens"


OPT = "opt"
TOKENIZERS = {
    OPT: Tokenizer(OPT, "opt", "OPT tokens"),
    "llama-3": Tokenizer("llama-3", "llama3", "Llama-3 tokens"),
    "mistral": Tokenizer("mistral", "mistral", "Mistral v1 tokens"),
    "qwen": Tokenizer("qwen", "qwen", "Qwen tokens"),
}
# the datasets that ship in each tokenizer's counts; the rest (stand-ins, Vidur's Arxiv lengths in Llama-2 tokens,
# a user's file) are counted once, by whoever made them
COUNTED_DATASETS = ("sharegpt", "chatbot")

# The vocabularies that tell a model's tokenizer: a model uses a tokenizer only if its embedding holds every id the
# tokenizer makes, so the tiny test models (512 ids) and the models of other tokenizers never match
LLAMA3_VOCAB = 128_256        # 128,000 BPE tokens and 256 special ones, from Llama 3 to 3.3
QWEN_BPE_TOKENS = 151_643     # Qwen2, 2.5 and 3 add their special tokens above these and pad the embedding
MISTRAL_V1_VOCAB = 32_000     # Mistral-7B v0.1 and Mixtral-8x7B v0.1; Llama-1 and 2 have 32,000 ids too, hence names


def model_tokenizer(model: ModelSpec) -> str:
    """The tokenizer whose counts `model` reads by default: its own where they ship, else OPT's (today's files)."""
    if model.family == "llama" and model.vocab_size == LLAMA3_VOCAB:
        return "llama-3"
    if model.family in ("qwen2", "qwen3") and model.vocab_size >= QWEN_BPE_TOKENS:
        return "qwen"
    if model.name.startswith(("mistral", "mixtral")) and model.vocab_size == MISTRAL_V1_VOCAB:
        return "mistral"
    return OPT


def tokens_label(tokenizer: str) -> str:
    """What a shipped file's label adds for its counts: nothing for OPT's, whose files' names say so as they
    always have, so that every label of a run on OPT's counts reads as before."""
    return "" if tokenizer == OPT else f"; {TOKENIZERS[tokenizer].tokens}"
