"""arxiv-summarization: Vidur's Arxiv-Summarization request lengths, shipped as they were read, and built again
from Vidur's file by `servesim trace build arxiv-summarization --csv PATH`."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.workload.arxiv import MIT_NOTICE, build_arxiv_csv
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.lengths import load_lengths
from sim.workload.paths import ARXIV_CSV

# Computed from microsoft/vidur data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv
# at 7d47513363ec447a741ac5e47241580b47724fbf (28,257 rows; numpy's default, linear, percentiles):
# (mean, p50, p90, max) of num_prefill_tokens and of num_decode_tokens
SOURCE_ROWS = 28_257
SOURCE_PROMPT = (2588.0780337615456, 2730.0, 3702.0, 4054)
SOURCE_OUTPUT = (291.4303712354461, 167.0, 372.0, 4056)
SOURCE_MAX_TOTAL = 4096
VIDUR_HEADER = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"


def stats(values: np.ndarray) -> tuple:
    return (values.mean(), np.percentile(values, 50), np.percentile(values, 90), values.max())


def test_the_shipped_lengths_are_the_sources():
    table = load_lengths("arxiv-summarization")
    assert len(table) == SOURCE_ROWS
    assert stats(table.prompt_len) == pytest.approx(SOURCE_PROMPT, rel=1e-12)
    assert stats(table.output_len) == pytest.approx(SOURCE_OUTPUT, rel=1e-12)
    assert int((table.prompt_len + table.output_len).max()) == SOURCE_MAX_TOTAL
    assert "Arxiv-Summarization" in table.source and "4,096" in table.source


def test_a_config_names_it_and_the_model_decides_what_fits():
    cfg = WorkloadConfig.from_dict({"dataset": "arxiv-summarization", "duration_s": 600}, "exp.yaml")
    long = build_trace(cfg, 2.0, 131_072, np.random.default_rng(0))
    short = build_trace(cfg, 2.0, 2048, np.random.default_rng(0))
    assert (long.prompt_len + long.output_len).max() > 3500       # Llama-3.1's positions hold the longest
    assert (short.prompt_len + short.output_len).max() < 2048      # OPT's keep the fifth that fits
    assert long.prompt_len.mean() > 2000 and "arxiv-summarization" in long.source


def vidur_file(tmp_path, rows: str):
    path = tmp_path / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
    path.write_text(VIDUR_HEADER + rows)
    return path


def test_the_build_keeps_the_two_lengths_in_order_with_the_licence(tmp_path):
    source = vidur_file(tmp_path, "3772,54,3826,69.85\n2015,156,2171,12.91\n")
    out = tmp_path / "arxiv.csv"
    build = build_arxiv_csv(source, out)
    text = out.read_text()
    assert text.splitlines()[-3:] == ["prompt_len,output_len", "3772,54", "2015,156"]
    assert "Copyright (c) Microsoft Corporation." in text and MIT_NOTICE.splitlines()[-1] in text
    assert list(build.prompt_len) == [3772, 2015]
    assert load_lengths(out).prompt_len.tolist() == [3772, 2015]


def test_the_shipped_file_is_what_the_build_writes(tmp_path):
    shipped = load_lengths("arxiv-summarization")
    rows = "".join(f"{p},{o},{p + o},{p / o}\n" for p, o in zip(shipped.prompt_len, shipped.output_len))
    out = tmp_path / "arxiv.csv"
    build_arxiv_csv(vidur_file(tmp_path, rows), out)
    assert out.read_bytes() == ARXIV_CSV.read_bytes()


@pytest.mark.parametrize("text, where", [
    ("num_prefill_tokens,pd_ratio\n10,1.0\n", "num_decode_tokens"),
    (VIDUR_HEADER + "10,0,10,inf\n", "row 1"),
    (VIDUR_HEADER + "10,2.5,12.5,4\n", "row 1"),
])
def test_a_file_that_is_not_vidurs_names_the_file_and_what_is_wrong(tmp_path, text, where):
    source = tmp_path / "other.csv"
    source.write_text(text)
    with pytest.raises(SpecError) as caught:
        build_arxiv_csv(source, tmp_path / "out.csv")
    message = str(caught.value)
    assert "other.csv" in message and where in message and "\n" not in message


def test_the_build_command_needs_vidurs_file(tmp_path, capsys):
    assert main(["trace", "build", "arxiv-summarization", "--out", str(tmp_path / "a.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--csv" in err and "\n" not in err
    assert main(["trace", "build", "sharegpt", "--csv", str(tmp_path / "x.csv")]) == 2
    source = vidur_file(tmp_path, "100,20,120,5.0\n")
    assert main(["trace", "build", "arxiv-summarization", "--csv", str(source),
                 "--out", str(tmp_path / "a.csv")]) == 0
    assert (tmp_path / "a.csv").read_text().endswith("prompt_len,output_len\n100,20\n")
