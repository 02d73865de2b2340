"""`servesim trace build|stats|sample`, through the parser the top-level CLI will use."""
import json

import pytest

from servesim.cli import main
from sim.workload.recorded import read_recorded_trace
from tests.helpers.sharegpt_json import needs_the_real_tokenizer


def test_sample_writes_a_trace_and_stats_reads_it(tmp_path, capsys):
    out = tmp_path / "trace.csv"
    args = ["trace", "sample", "--dataset", "alpaca-standin", "--arrival", "exponential", "--rate", "5",
            "--duration-s", "60", "--seed", "3", "--out", str(out)]
    assert main(args) == 0
    trace = read_recorded_trace(out)
    assert trace.is_stand_in and trace.duration_s == 60.0 and len(trace) > 0
    first = out.read_bytes()
    assert main(args) == 0 and out.read_bytes() == first                 # same seed, same bytes
    assert main(["trace", "stats", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mean rate" in printed and "p99" in printed and "19.31" in printed   # Fig. 11 beside Alpaca-like data


def test_stats_of_a_lengths_file_with_a_plot(tmp_path, capsys):
    data = tmp_path / "sharegpt_like.csv"
    data.write_text("prompt_len,output_len\n" + "".join(f"{i},{2 * i}\n" for i in range(1, 101)))
    png = tmp_path / "hist.png"
    assert main(["trace", "stats", str(data), "--plot", str(png), "--max-seq-len", "100"]) == 0
    printed = capsys.readouterr().out
    assert "pairs   100" in printed and "161.31" in printed and "fit prompt+output < 100: 33 of 100" in printed
    assert png.read_bytes().startswith(b"\x89PNG")


def test_stats_of_a_stand_in(capsys):
    assert main(["trace", "stats", "sharegpt-standin"]) == 0
    assert "stand-in" in capsys.readouterr().out


@pytest.mark.parametrize("args", [
    ["--dataset", "no-such-dataset"],
    ["--rate", "-1"],
    ["--arrival", "gamma", "--cv", "0"],
])
def test_sample_errors_write_nothing(tmp_path, capsys, args):
    out = tmp_path / "trace.csv"
    base = ["trace", "sample", "--dataset", "alpaca-standin", "--rate", "1", "--duration-s", "10", "--out", str(out)]
    assert main(base + args) == 2
    assert "error:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_stats_error_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\nx,1,1\n")
    assert main(["trace", "stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "row 2" in err


def test_build_sharegpt_from_a_given_json(tmp_path, capsys):
    needs_the_real_tokenizer()
    source = tmp_path / "sg.json"
    source.write_text(json.dumps([{"id": "a", "conversations": [
        {"from": "human", "value": "Tell me a story about a dragon."},
        {"from": "gpt", "value": "Once upon a time there was a small dragon."}]}]))
    out = tmp_path / "sharegpt_opt.csv"
    assert main(["trace", "build", "sharegpt", "--json", str(source), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[-1] == "8,10"
    assert "161.31" in capsys.readouterr().out
