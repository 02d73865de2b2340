"""Recorded traces in both accepted forms, and the errors a user's file can cause."""
import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.recorded import load_recorded, read_recorded_trace

SECONDS = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n1.0,200,20\n2.5,1900,200\n4.0,300,30\n"
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,100,10\n"
         "2023-11-16 18:15:47.1805900,200,20\n"
         "2023-11-16 18:15:49.6805900,300,30\n")


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_seconds_form(tmp_path):
    trace = read_recorded_trace(write(tmp_path, SECONDS))
    assert trace.arrival_s.tolist() == [0.0, 1.0, 2.5, 4.0]
    assert trace.prompt_len.tolist() == [100, 200, 1900, 300]
    assert trace.output_len.tolist() == [10, 20, 200, 30]
    assert trace.n.tolist() == [1, 1, 1, 1]


def test_azure_form_converts_datetimes_to_seconds_from_the_first(tmp_path):
    trace = read_recorded_trace(write(tmp_path, AZURE))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5, 3.0], atol=1e-9)
    assert trace.prompt_len.tolist() == [100, 200, 300]


def test_window_fit_and_scale_in_that_order(tmp_path):
    replay = load_recorded(write(tmp_path, SECONDS), window_s=(1.0, 4.0), max_seq_len=2048, time_scale=2.0)
    assert replay.num_read == 4 and replay.num_outside_window == 2 and replay.num_too_long == 1
    # 0.0 and 4.0 are outside; 1.0 is rebased to 0; 2.5 is dropped (1900 + 200 >= 2048)
    assert replay.trace.arrival_s.tolist() == [0.0]
    assert replay.trace.duration_s == 1.5                     # 3 s window replayed at 2x
    assert "dropped 1 of 2" in replay.trace.source


def test_zero_token_rows_are_dropped_and_counted(tmp_path):
    replay = load_recorded(write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,0\n1,5,5\n"))
    assert replay.num_empty == 1 and len(replay.trace) == 1


def test_comments_and_column_order_do_not_matter(tmp_path):
    text = "# from somewhere\nnum_decode_tokens,arrived_at,num_prefill_tokens,n\n7,0.5,3,2\n"
    trace = read_recorded_trace(write(tmp_path, text))
    assert (trace.arrival_s.tolist(), trace.prompt_len.tolist(), trace.output_len.tolist(), trace.n.tolist()) \
        == ([0.5], [3], [7], [2])


@pytest.mark.parametrize("text, key, words", [
    ("arrived_at,num_prefill_tokens\n0,1\n", "column num_decode_tokens",
     ["found columns", "TIMESTAMP,ContextTokens,GeneratedTokens"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,abc,1\n", "row 2", ["line 3", "abc"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,1,-4\n", "row 2", ["negative"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,1.5,4\n", "row 2", ["whole number"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n2,1,1\n1,1,1\n", "row 3", ["arrival order"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n1,1\n", "row 2", ["fields"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nyesterday,1,1\n", "row 2", ["date-time"]),
    ("", "", ["empty file"]),
    ("# only a comment\n", "", ["empty file"]),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n", "", ["no data rows"]),
])
def test_bad_files_name_the_file_and_the_row(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        read_recorded_trace(path)
    assert caught.value.source == str(path) and caught.value.key == key
    for word in words:
        assert word in str(caught.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        read_recorded_trace(tmp_path / "nope.csv")


def test_a_datetime_in_a_seconds_column_is_named(tmp_path):
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n2023-11-16 18:15:46,1,1\n")
    with pytest.raises(SpecError) as caught:
        read_recorded_trace(path)
    assert caught.value.key == "row 2" and "not a number" in caught.value.message
