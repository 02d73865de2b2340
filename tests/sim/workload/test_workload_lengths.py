"""Length sources: CSVs, Alpaca JSON, parametric stand-ins, and the authors' cycle-and-shuffle draw."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.alpaca import alpaca_lengths
from sim.workload.lengths import LengthTable, load_lengths, read_lengths_csv
from sim.workload.standin import FIG11_MEANS, SHAREGPT_FIG11_SCALE, STAND_INS, scale_pairs


def words(texts):
    return [len(t.split()) for t in texts]


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_stand_in_means_match_fig11_after_the_2048_filter(name):
    stand_in = STAND_INS[name]
    prompt, output = stand_in.sample(200_000, 2048, np.random.default_rng(0))
    assert np.all(prompt + output < 2048) and prompt.min() >= 1 and output.min() >= 1
    want_prompt, want_output = FIG11_MEANS[stand_in.dataset]
    assert prompt.mean() == pytest.approx(want_prompt, rel=0.02)
    assert output.mean() == pytest.approx(want_output, rel=0.02)
    assert "stand-in" in stand_in.source


def test_sharegpt_stand_in_has_high_variance():
    prompt, output = STAND_INS["sharegpt-standin"].sample(50_000, 2048, np.random.default_rng(0))
    alpaca_prompt, _ = STAND_INS["alpaca-standin"].sample(50_000, 2048, np.random.default_rng(0))
    assert prompt.std() / prompt.mean() > 1.0 > alpaca_prompt.std() / alpaca_prompt.mean()


def test_lengths_csv_with_comments(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("# made by hand\n# second comment\nprompt_len,output_len\n5,7\n9,0\n11,13\n")
    table = read_lengths_csv(path)
    assert table.prompt_len.tolist() == [5, 11] and table.output_len.tolist() == [7, 13]
    assert "dropped 1" in table.source and not table.is_stand_in


def test_blank_lines_and_rows_of_blank_cells_are_skipped_and_rows_keep_their_lines(tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("prompt_len,output_len\n5,7\n\n , \n,\n9,11\n3\n")
    with pytest.raises(SpecError) as caught:  # the short row: counted as the third, found on the file's 7th line
        read_lengths_csv(path)
    assert caught.value.key == "row 3" and "(line 7) has 1 fields" in str(caught.value)
    path.write_text("prompt_len,output_len\n5,7\n\n , \n,\n9,11\n")
    assert read_lengths_csv(path).prompt_len.tolist() == [5, 9]


def test_lengths_csv_errors_name_the_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("prompt_len,output_len\n5,7\n5,x\n")
    with pytest.raises(SpecError) as caught:
        read_lengths_csv(path)
    assert caught.value.key == "row 2" and str(path) in str(caught.value)


def test_draw_follows_the_authors_generator():
    table = LengthTable([1, 2, 3, 2000, 4], [10, 20, 30, 100, 40], "t")
    prompt, output = table.sample(10, 2048, np.random.default_rng(0))
    # 2000+100 is dropped, the 4 kept pairs are cycled to 10 (2-3 copies each), then shuffled
    assert sorted(prompt.tolist()) == [1, 1, 1, 2, 2, 2, 3, 3, 4, 4]
    assert np.array_equal(output, prompt * 10)
    few, _ = table.sample(2, 2048, np.random.default_rng(0))
    assert sorted(few.tolist()) == [1, 2]           # fewer than the file: its first pairs, shuffled


def test_draw_is_seeded():
    table = LengthTable(np.arange(1, 101), np.arange(1, 101), "t")
    first = table.sample(250, 2048, np.random.default_rng(3))
    again = table.sample(250, 2048, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], table.sample(250, 2048, np.random.default_rng(4))[0])


def test_nothing_fits():
    with pytest.raises(SpecError, match="no pair"):
        LengthTable([3000], [10], "t").sample(5, 2048, np.random.default_rng(0))


def test_alpaca_prompt_is_instruction_plus_input(tmp_path):
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps([
        {"instruction": "Give three tips.", "input": "", "output": "Eat well and sleep."},
        {"instruction": "Translate this", "input": "guten Tag", "output": "good day"},
    ]))
    prompt, output = alpaca_lengths(path, count_tokens=words)
    assert prompt.tolist() == [3, 4] and output.tolist() == [4, 2]


@pytest.mark.parametrize("content, key", [
    ({"instruction": "x"}, "top level"),
    ([{"instruction": "x", "output": 3}], "item 1"),
    ([{"instruction": "x", "output": "y"}, {"prompt": "x"}], "item 2"),
])
def test_alpaca_shape_errors(tmp_path, content, key):
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SpecError) as caught:
        alpaca_lengths(path, count_tokens=words)
    assert caught.value.key == key and caught.value.source == str(path)


def test_load_lengths_by_name_and_path(tmp_path):
    assert load_lengths("alpaca-standin") is STAND_INS["alpaca-standin"]
    path = tmp_path / "l.csv"
    path.write_text("prompt_len,output_len\n1,2\n")
    assert load_lengths(path).prompt_len.tolist() == [1]
    path.write_text("prompt_len,output_len\n1,2\n3,4\n")     # an edited file is read again
    assert load_lengths(path).prompt_len.tolist() == [1, 3]


def test_load_lengths_rereads_a_file_rewritten_at_the_same_size_and_time(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("prompt_len,output_len\n1,2\n")
    stat = path.stat()
    assert load_lengths(path).prompt_len.tolist() == [1]
    path.write_text("prompt_len,output_len\n5,6\n")  # the same size, and (below) the same time
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert load_lengths(path).prompt_len.tolist() == [5]


def test_load_lengths_of_a_folder_is_one_line_naming_it(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_lengths(tmp_path)
    assert caught.value.source == str(tmp_path) and "folder" in str(caught.value)


def test_load_lengths_of_an_unreadable_file_is_one_line_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "l.csv"
    path.write_text("prompt_len,output_len\n1,2\n")

    def refuse(self):  # as a file without read permission does for anyone but root
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: refuse(self))
    with pytest.raises(SpecError) as caught:
        load_lengths(path)
    assert caught.value.source == str(path) and "cannot read it: Permission denied" in str(caught.value)


def _shape(prompt, output):
    prompt, output = prompt.astype(float), output.astype(float)
    return prompt.std() / prompt.mean(), output.std() / output.mean(), float(np.corrcoef(prompt, output)[0, 1])


def test_sharegpt_fig11_standin_means_and_shape():
    """Fig. 11's means within 1% after the < 2048 filter; the real pairs' CVs within 10% and their
    correlation within 0.1 (it is near zero, where a relative bound says nothing)."""
    real = load_lengths("sharegpt").fitting(2048)
    standin = load_lengths("sharegpt-fig11-standin")
    assert standin.is_stand_in and "stand-in" in standin.source
    kept = standin.fitting(2048)
    want_prompt, want_output = FIG11_MEANS["sharegpt"]
    assert kept.prompt_len.mean() == pytest.approx(want_prompt, rel=0.01)
    assert kept.output_len.mean() == pytest.approx(want_output, rel=0.01)
    real_cv_p, real_cv_o, real_corr = _shape(real.prompt_len, real.output_len)
    cv_p, cv_o, corr = _shape(kept.prompt_len, kept.output_len)
    assert cv_p == pytest.approx(real_cv_p, rel=0.10)
    assert cv_o == pytest.approx(real_cv_o, rel=0.10)
    assert abs(corr - real_corr) <= 0.1


def test_sharegpt_fig11_standin_is_the_real_pairs_scaled():
    real = load_lengths("sharegpt")
    standin = load_lengths("sharegpt-fig11-standin")
    assert len(standin) == len(real)
    # pair i of the stand-in is pair i of the real table, each axis scaled by its own constant
    prompt, output = scale_pairs(real.prompt_len, real.output_len, SHAREGPT_FIG11_SCALE)
    assert np.array_equal(standin.prompt_len, prompt) and np.array_equal(standin.output_len, output)
    assert np.array_equal(scale_pairs(np.array([1, 10]), np.array([3, 1]), (2.0, 0.1))[0], [2, 20])
    assert np.array_equal(scale_pairs(np.array([1, 10]), np.array([3, 1]), (2.0, 0.1))[1], [1, 1])  # at least 1


def test_an_alpaca_path_that_is_a_folder_is_one_line_naming_it(tmp_path):
    folder = tmp_path / "alpaca_data.json"
    folder.mkdir()
    with pytest.raises(SpecError) as caught:
        load_lengths(folder)
    assert caught.value.source == str(folder) and "is a folder" in str(caught.value)
