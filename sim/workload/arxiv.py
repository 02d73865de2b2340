"""Build sim/workload/data/arxiv_summarization_llama2.csv (shipped package data): the request lengths of
Vidur's Arxiv-Summarization trace, a long-prompt workload (summarize a paper: thousands of tokens in, a few
hundred out). Its provenance: traces/README.md.

Source: microsoft/vidur (MIT licence, Copyright (c) Microsoft Corporation),
data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv, added in commit
6d98aa8f71696520acc603d87439e77cc78160a7 and unchanged at 7d47513363ec447a741ac5e47241580b47724fbf:
28,257 rows of num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio in Llama-2 tokens. Every
row's total is at most 4,096 tokens, Llama-2's context (the `filtered` of its name). What is done to it:
the two length columns are kept, in file order, under servesim's `prompt_len,output_len` names; the
total and the ratio (both derived from them) are left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_text_atomic
from engine.errors import SpecError

from .paths import ARXIV_CSV
from .table import find_columns, numeric_column, read_table

ARXIV_SUMMARIZATION = "arxiv-summarization"
VIDUR_PATH = "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"    # the file as read, last changed in 6d98aa8
VIDUR_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
# Vidur's LICENSE, which its MIT terms ask every copy of a substantial portion to carry
MIT_NOTICE = """MIT License

Copyright (c) Microsoft Corporation.

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE."""


@dataclass(frozen=True)
class ArxivBuild:
    path: Path
    prompt_len: np.ndarray
    output_len: np.ndarray


def build_arxiv_csv(vidur_csv: str | Path, out: str | Path = ARXIV_CSV) -> ArxivBuild:
    """Vidur's trace file -> `prompt_len,output_len` with its provenance and licence, written atomically."""
    table = read_table(vidur_csv)
    _, columns = find_columns(table, {"vidur": VIDUR_COLUMNS})
    prompt, output = (numeric_column(table, index, integer=True) for index in columns)
    if not ((prompt > 0) & (output > 0)).all():
        row = int(np.flatnonzero((prompt == 0) | (output == 0))[0])
        raise SpecError(table.source, table.where(row), f"(line {table.line_of(row)}) has zero tokens to "
                        "prefill or decode; Vidur's file has none, so this is not it")
    lines = [
        "Arxiv-Summarization request lengths (prompt, output) in Llama-2 tokens, for servesim.",
        f"source: github.com/microsoft/vidur {VIDUR_PATH} at {VIDUR_COMMIT}",
        f"done: kept {list(VIDUR_COLUMNS)} as prompt_len,output_len, all {len(prompt)} rows in file order; "
        "dropped the derived num_total_tokens and pd_ratio",
        f"rebuild: servesim trace build {ARXIV_SUMMARIZATION} --csv PATH (PATH: that file)",
        "licence of the source (Vidur's LICENSE):",
        *MIT_NOTICE.splitlines(),
    ]
    header = "".join(f"# {line}".rstrip() + "\n" for line in lines)
    rows = "\n".join(f"{p},{o}" for p, o in zip(prompt.tolist(), output.tolist()))
    write_text_atomic(out, header + "prompt_len,output_len\n" + rows + "\n")
    return ArxivBuild(Path(out), prompt, output)
