"""Where shipped workload data lives (a path a config names is found by engine/specs/paths.py)."""
from __future__ import annotations

from pathlib import Path

# Package data (sim/workload/data/), found beside this module in any install; its provenance and
# how to rebuild it: traces/README.md in the source tree.
DATA_DIR = Path(__file__).resolve().parent / "data"
SHAREGPT_CSV = DATA_DIR / "sharegpt_opt.csv"
# the same first exchanges without the paper's 2,048-token cut: a longer model keeps what it can hold
SHAREGPT_UNCUT_CSV = DATA_DIR / "sharegpt_opt_uncut.csv"
# Arxiv-Summarization request lengths in Llama-2 tokens, as Vidur (microsoft/vidur) ships them
ARXIV_CSV = DATA_DIR / "arxiv_summarization_llama2.csv"
# ShareGPT conversations as rounds of (query, response) lengths: the chatbot workload (paper Fig. 17)
CHATBOT_CSV = DATA_DIR / "sharegpt_opt_chatbot.csv"



def sharegpt_csv(stem: str, uncut: bool = False) -> Path:
    """The first exchanges as one tokenizer counted them (stem: tokenizer_choice.Tokenizer.stem), cut or uncut."""
    return DATA_DIR / f"sharegpt_{stem}{'_uncut' if uncut else ''}.csv"


def chatbot_csv(stem: str) -> Path:
    """The conversations as one tokenizer counted them."""
    return DATA_DIR / f"sharegpt_{stem}_chatbot.csv"
