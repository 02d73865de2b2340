"""Where (prompt_len, output_len) pairs come from, and how a trace draws from them.

A dataset is a name (`sharegpt`, `arxiv-summarization`, `sharegpt-fig11-standin`, `sharegpt-standin`,
`alpaca-standin`, `wmt16-en-de-standin`) or a file: a CSV of
`prompt_len,output_len` (leading `#` lines allowed; a trace CSV's length columns also work) or an
Alpaca `alpaca_data.json`. Drawing follows the authors' generator (paper-facts A,
benchmark/trace.py): keep pairs with prompt + output < max_seq_len, repeat the kept list
cyclically to cover the requests needed, cut, and shuffle with the run's rng.

`sharegpt` was also cut when it was built, by the paper's 2,048 tokens (LENGTH_FILTERS): under
`workload.length_filter: model` it is read from the uncut build instead, so the model's max_seq_len
alone decides which pairs it keeps. Both builds ship in each tokenizer's counts (tokenizer_choice.py):
`tokenizer` picks whose, and changes no other dataset.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from engine.errors import SpecError

from .arxiv import ARXIV_SUMMARIZATION
from .paths import ARXIV_CSV, SHAREGPT_CSV, chatbot_csv, sharegpt_csv
from .standin import SHAREGPT_FIG11_SCALE, SHAREGPT_FIG11_STANDIN, STAND_INS, StandIn, scale_pairs
from .table import find_columns, numeric_column, read_table
from .tokenizer_choice import OPT, TOKENIZERS, tokens_label
from .trace import STAND_IN
from .translation import TRANSLATION_STAND_INS, TranslationStandIn

LENGTH_FORMS = {
    "lengths": ("prompt_len", "output_len"),
    "trace": ("num_prefill_tokens", "num_decode_tokens"),
    "azure": ("ContextTokens", "GeneratedTokens"),
}
DATASET_NAMES = ("sharegpt", ARXIV_SUMMARIZATION, SHAREGPT_FIG11_STANDIN, *STAND_INS, *TRANSLATION_STAND_INS)
# workload.length_filter: `paper` reads sharegpt as cut when built (prompt <= 1024, prompt + output < 2048,
# the paper's and vLLM's benchmark filter); `model` reads its uncut build. Either way the generator then keeps
# the pairs with prompt + output < the model's max_seq_len, which is all the other datasets ever had.
LENGTH_FILTERS = ("paper", "model")
# the fig11 stand-in's scale constants were solved on the pairs of the paper's cut: uncut, they would miss
PAPER_CUT_ONLY = (SHAREGPT_FIG11_STANDIN,)


class LengthSource(Protocol):
    source: str

    def sample(self, count: int, max_seq_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ...


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class LengthTable:
    """Pairs read from a file, in file order (the generator's cycling depends on that order)."""
    prompt_len: np.ndarray
    output_len: np.ndarray
    source: str

    def __post_init__(self):
        for name in ("prompt_len", "output_len"):
            values = np.array(getattr(self, name), dtype=np.int64).reshape(-1)
            values.setflags(write=False)
            object.__setattr__(self, name, values)
        if len(self.prompt_len) != len(self.output_len):
            raise ValueError("prompt_len and output_len differ in length")

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def is_stand_in(self) -> bool:
        return STAND_IN in self.source

    def fitting(self, max_seq_len: int) -> LengthTable:
        keep = self.prompt_len + self.output_len < max_seq_len
        return LengthTable(self.prompt_len[keep], self.output_len[keep], self.source)

    def sample(self, count: int, max_seq_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        kept = self.fitting(max_seq_len)
        if len(kept) == 0:
            raise SpecError(self.source, "max_seq_len", f"no pair has prompt + output < {max_seq_len}")
        cycled = np.resize(np.arange(len(kept)), count)  # repeats cyclically, then cuts to `count`
        order = cycled[rng.permutation(count)]
        return kept.prompt_len[order], kept.output_len[order]


# a prefix must leave room for this share of a dataset's pairs, or drawing the fitting ones takes forever
MIN_FITTING_SHARE = 0.01
SHARE_DRAWS = 20_000


def longest_prefix(lengths: LengthSource, max_seq_len: int) -> int:
    """The longest shared prefix that leaves room (prompt + output < max_seq_len - prefix) for some pair
    of a table, or for MIN_FITTING_SHARE of a stand-in's draws (fixed seed: the same answer every time)."""
    if isinstance(lengths, LengthTable):
        sums = lengths.prompt_len + lengths.output_len
        shortest = int(sums.min()) if len(sums) else max_seq_len
    else:
        prompt, output = lengths.draw(SHARE_DRAWS, np.random.default_rng(0))
        shortest = int(np.quantile(prompt + output, MIN_FITTING_SHARE, method="higher"))
    return max_seq_len - shortest - 1


def shipped_file(dataset: str | Path, length_filter: str = "paper", tokenizer: str = OPT) -> Path | None:
    """The shipped file a dataset name reads, or None for a name drawn in code or a user's file."""
    if str(dataset) == "sharegpt":
        return sharegpt_csv(TOKENIZERS[tokenizer].stem, uncut=length_filter == "model")
    if str(dataset) == "chatbot":
        return chatbot_csv(TOKENIZERS[tokenizer].stem)
    if str(dataset) == ARXIV_SUMMARIZATION:
        return ARXIV_CSV
    return None


def data_path(dataset: str | Path, length_filter: str = "paper", tokenizer: str = OPT) -> str:
    """Where a dataset's file really is (the shipped ShareGPT file's label names where it was first kept)."""
    return str(shipped_file(dataset, length_filter, tokenizer) or dataset)


def read_lengths_csv(path: str | Path) -> LengthTable:
    table = read_table(path)
    _, (p_col, o_col) = find_columns(table, LENGTH_FORMS)
    prompt = numeric_column(table, p_col, integer=True)
    output = numeric_column(table, o_col, integer=True)
    served = (prompt > 0) & (output > 0)  # zero tokens: nothing to prefill or generate
    source = f"{Path(path).stem} ({table.source})"
    if not served.all():
        source += f"; dropped {int((~served).sum())} pairs with zero tokens"
    return LengthTable(prompt[served], output[served], source)


def read_alpaca_json(path: str | Path) -> LengthTable:
    from .alpaca import alpaca_lengths
    prompt, output = alpaca_lengths(path)
    served = (prompt > 0) & (output > 0)
    return LengthTable(prompt[served], output[served], f"alpaca ({path}, GPT-2 BPE)")


_cache: dict[tuple, LengthTable] = {}


def load_lengths(dataset: str | Path, length_filter: str = "paper",
                 tokenizer: str = OPT) -> LengthTable | StandIn | TranslationStandIn:
    """A dataset by name, or by path (already resolved: see paths.resolve_data_path); `length_filter` chooses
    between sharegpt's builds (LENGTH_FILTERS) and `tokenizer` whose counts of them, and change no other dataset."""
    if str(dataset) in STAND_INS:
        return STAND_INS[str(dataset)]
    if str(dataset) in TRANSLATION_STAND_INS:
        return TRANSLATION_STAND_INS[str(dataset)]
    if str(dataset) == "sharegpt":
        return _sharegpt(length_filter == "model", tokenizer)
    if str(dataset) == ARXIV_SUMMARIZATION:
        table = _read_cached(ARXIV_CSV)
        return LengthTable(table.prompt_len, table.output_len, f"{ARXIV_SUMMARIZATION} (Vidur's Arxiv-Summarization "
                           "trace in Llama-2 tokens, each total at most 4,096: sim/workload/data/"
                           "arxiv_summarization_llama2.csv)")
    if str(dataset) == SHAREGPT_FIG11_STANDIN:
        table = _shipped_sharegpt()
        prompt, output = scale_pairs(table.prompt_len, table.output_len)
        scale = " and outputs x".join(f"{factor:g}" for factor in SHAREGPT_FIG11_SCALE)
        return LengthTable(prompt, output, f"{SHAREGPT_FIG11_STANDIN} (stand-in: the real ShareGPT pairs with "
                           f"prompts x{scale}, matched to Fig. 11 means)")
    return _read_cached(Path(dataset))


def _sharegpt(uncut: bool, tokenizer: str) -> LengthTable:
    """sharegpt's build, cut or uncut, in the tokenizer's counts, labelled with the file it is (and, for a
    tokenizer other than OPT's, whose tokens: tokens_label)."""
    path = sharegpt_csv(TOKENIZERS[tokenizer].stem, uncut)
    option = "" if tokenizer == OPT else f" --tokenizer {tokenizer}"
    table = _shipped(path, f"{'sharegpt-uncut' if uncut else 'sharegpt'}{option}")
    where = f"sim/workload/data/{path.name}{tokens_label(tokenizer)}"
    if uncut:
        return LengthTable(table.prompt_len, table.output_len, f"sharegpt, uncut ({where}; kept by the model's "
                           "max_seq_len, not the paper's 2,048)")
    return LengthTable(table.prompt_len, table.output_len, f"sharegpt ({where})")


def _shipped_sharegpt() -> LengthTable:
    return _shipped(SHAREGPT_CSV, "sharegpt")


def _shipped(path: Path, build: str) -> LengthTable:
    if not path.is_file():
        raise SpecError("workload", "dataset", f"{path} is missing; rebuild it with "
                        f"`servesim trace build {build}`, or use dataset: sharegpt-standin")
    return _read_cached(path)


def _read_cached(path: Path) -> LengthTable:
    reader = read_alpaca_json if path.suffix.lower() == ".json" else read_lengths_csv
    try:
        data = path.read_bytes()
    except OSError:  # missing, a folder, unreadable: the reader says which, in one line naming the file
        return reader(path)
    # by the bytes, not the file's time and size: a file rewritten within a clock tick is read again
    key = (str(path.resolve()), hashlib.blake2b(data, digest_size=16).digest())
    if key not in _cache:  # tables are immutable; a sweep reads the file once
        if len(_cache) >= 8:
            _cache.clear()
        _cache[key] = reader(path)
    return _cache[key]
