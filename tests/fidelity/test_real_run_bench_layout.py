"""LLMServingSim's bench layout of a vLLM run is read exactly, field by field, with the publisher's metric
definitions; every kind of malformed file is refused in one line naming the file, the row and the field."""
from __future__ import annotations

import gzip
import json
import math
import shutil

import numpy as np
import pytest

from engine.errors import SpecError
from fidelity.runs.bench_layout import read_bench_run
from fidelity.runs.read import read_run
from tests.helpers.real_runs import (
    ARRIVALS_NS,
    BLOCK,
    GPU,
    META,
    MODEL_ID,
    OUTPUTS,
    PROMPTS,
    TIMES,
    jsonl,
    request_lines,
    workload_lines,
    write_bench_run,
)


def test_every_field_is_read_exactly(tmp_path):
    run = read_run(write_bench_run(tmp_path))
    r = run.requests
    queued = [t[0] for t in TIMES]
    assert run.format == "llmservingsim-bench" and run.name == "H100-Llama" and run.arrivals_recorded
    assert r.request_id == ("bench-0", "bench-1", "bench-2", "bench-3") and r.line.tolist() == [1, 2, 3, 4]
    assert r.arrival_s.tolist() == [q - queued[0] for q in queued]
    assert r.prompt_len.tolist() == [len(p) for p in PROMPTS] and r.output_len.tolist() == OUTPUTS
    # the publisher's definitions, to the bit
    assert r.ttft_s.tolist() == [f - q for q, _, f, _ in TIMES]
    assert r.e2e_s.tolist() == [last - q for q, _, _, last in TIMES]
    expected_tpot = [(last - f) / (n - 1) if n > 1 else math.nan for (_, _, f, last), n in zip(TIMES, OUTPUTS)]
    np.testing.assert_array_equal(r.tpot_s, expected_tpot)
    assert r.itl_s is None  # the bench records first and last tokens only


def test_the_engine_settings_are_read_most_resolved_first(tmp_path):
    s = read_run(write_bench_run(tmp_path)).settings
    assert (s.model_id, s.gpu_name, s.tensor_parallel, s.data_parallel, s.expert_parallel) == (MODEL_ID, GPU, 1, 1,
                                                                                               False)
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.block_size, s.prefix_caching) == (8, 64, BLOCK, True)
    assert (s.num_gpu_blocks, s.gpu_memory_utilization, s.dtype, s.async_scheduling) == (64, 0.9, "bfloat16", True)
    assert s.max_model_len == 256  # resolved_config's, where engine_kwargs gave null
    assert s.cudagraph_capture_sizes == (1, 2, 4, 8) and s.engine_version == "vllm 0.19.0"
    assert s.gpu_name_from.endswith("meta.json: hardware.device_name")


def test_the_series_and_the_workload_are_read_exactly(tmp_path):
    run = read_run(write_bench_run(tmp_path))
    series = run.series
    assert series.t_s.tolist() == [1.0, 2.0] and series.prompt_tokens_per_s.tolist() == [27.0, 5.0]
    assert series.generation_tokens_per_s.tolist() == [4.0, 3.0] and series.running.tolist() == [2, 1]
    assert series.waiting.tolist() == [1, 0] and series.kv_usage_pct.tolist() == [12.5, 3.13]
    w = run.workload
    assert [ids.tolist() for ids in w.input_tok_ids] == PROMPTS and w.output_len.tolist() == OUTPUTS
    assert w.intended_arrival_s.tolist() == [a / 1e9 for a in ARRIVALS_NS]
    assert w.path.endswith("workloads/tiny.jsonl")


def test_a_gzipped_workload_beside_the_run_is_found_by_its_name_and_checked_by_its_content(tmp_path):
    run_dir = write_bench_run(tmp_path)
    text = (tmp_path / "workloads" / "tiny.jsonl").read_bytes()
    (tmp_path / "workloads" / "tiny.jsonl").unlink()
    (run_dir / "tiny.jsonl.gz").write_bytes(gzip.compress(text))
    assert read_run(run_dir).workload.path == str((run_dir / "tiny.jsonl.gz").resolve())
    assert read_run(run_dir / "vllm").requests.request_id[0] == "bench-0"  # the vllm/ folder is the run too


def test_a_workload_published_under_another_name_is_found_by_its_hash(tmp_path):
    run_dir = write_bench_run(tmp_path)
    shutil.move(tmp_path / "workloads" / "tiny.jsonl", tmp_path / "workloads" / "renamed.jsonl")
    assert read_run(run_dir).workload.path.endswith("renamed.jsonl")


def test_a_workload_given_with_the_wrong_content_names_both_hashes(tmp_path):
    run_dir = write_bench_run(tmp_path)
    other = tmp_path / "other.jsonl"
    lines = workload_lines()
    lines[0]["arrival_time_ns"] = 1
    other.write_text(jsonl(lines))
    with pytest.raises(SpecError) as caught:
        read_run(run_dir, workload=other)
    text = str(caught.value)
    assert "other.jsonl: sha256" in text and "meta.json records dataset_hash" in text and "\n" not in text


def test_a_missing_workload_says_where_it_looked_and_what_to_give(tmp_path):
    run_dir = write_bench_run(tmp_path)
    (tmp_path / "workloads" / "tiny.jsonl").unlink()
    with pytest.raises(SpecError, match=r"meta.json: dataset_path: workloads/tiny.jsonl: .*give --workload PATH"):
        read_bench_run(run_dir)


def _requests(change):
    rows = request_lines()
    change(rows)
    return rows


def _workload(change):
    rows = workload_lines()
    change(rows)
    return rows


MALFORMED_REQUESTS = {
    "missing field": (lambda rows: rows[1].pop("first_token_ts"), "line 2: first_token_ts", "missing"),
    "wrong type": (lambda rows: rows[0].update(output_toks="3"), "line 1: output_toks", "integer"),
    "a float count": (lambda rows: rows[0].update(input_toks=9.0), "line 1: input_toks", "integer"),
    "negative time": (lambda rows: rows[2].update(queued_ts=-1.0), "line 3: queued_ts", ">= 0"),
    "not finite": (lambda rows: rows[2].update(last_token_ts=float("inf")), "line 3: last_token_ts", "finite"),
    "first before queued": (lambda rows: rows[3].update(first_token_ts=101.0), "line 4: first_token_ts",
                            "before scheduled_ts"),
    "last before first": (lambda rows: rows[0].update(last_token_ts=100.04), "line 1: last_token_ts",
                          "before first_token_ts"),
    "no output token": (lambda rows: rows[1].update(output_toks=0), "line 2: output_toks", ">= 1"),
    "lengths not the workload's": (lambda rows: rows[2].update(input_toks=11), "line 3: input_toks",
                                   "request 3 of its workload"),
    "output not the workload's": (lambda rows: rows[0].update(output_toks=5), "line 1: output_toks",
                                  "request 1 of its workload"),
    "a request too few": (lambda rows: rows.pop(), "requests.jsonl", "holds 3 requests, but its workload"),
    "empty request id": (lambda rows: rows[0].update(request_id=""), "line 1: request_id", "non-empty"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_REQUESTS))
def test_a_malformed_request_row_is_refused_naming_file_line_and_field(tmp_path, case):
    change, where, what = MALFORMED_REQUESTS[case]
    run_dir = write_bench_run(tmp_path, requests=_requests(change))
    with pytest.raises(SpecError) as caught:
        read_run(run_dir)
    text = str(caught.value)
    assert "requests.jsonl" in text and where in text and what in text and "\n" not in text, text


MALFORMED_WORKLOADS = {
    "ids not the length": (lambda rows: rows[1]["input_tok_ids"].append(5), "line 2: input_tok_ids",
                           "holds 9 token ids, but input_toks is 8"),
    "ids not integers": (lambda rows: rows[0].update(input_tok_ids=["a"] * 9), "line 1: input_tok_ids", "token ids"),
    "missing arrival": (lambda rows: rows[3].pop("arrival_time_ns"), "line 4: arrival_time_ns", "missing"),
    "an agentic session": (lambda rows: rows[0].update(sub_requests=[]), "line 1: sub_requests", "independent"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_WORKLOADS))
def test_a_malformed_workload_row_is_refused_naming_file_line_and_field(tmp_path, case):
    change, where, what = MALFORMED_WORKLOADS[case]
    run_dir = write_bench_run(tmp_path, workload=_workload(change), hashed=False)
    with pytest.raises(SpecError) as caught:
        read_run(run_dir)
    text = str(caught.value)
    assert "tiny.jsonl" in text and where in text and what in text and "\n" not in text, text


@pytest.mark.parametrize("line, what", [("{oops", "line 3: is not JSON"), ("[1, 2]", "line 3: must be a JSON object")])
def test_a_workload_line_that_is_not_a_json_object_is_refused_by_line(tmp_path, line, what):
    run_dir = write_bench_run(tmp_path, hashed=False)
    (tmp_path / "workloads" / "tiny.jsonl").write_text(jsonl(workload_lines()[:2]) + line + "\n")
    with pytest.raises(SpecError, match=rf"tiny.jsonl: {what}"):
        read_run(run_dir)


def test_a_line_that_is_not_json_and_a_bad_series_value_are_refused_by_line(tmp_path):
    run_dir = write_bench_run(tmp_path)
    (run_dir / "vllm" / "requests.jsonl").write_text(jsonl(request_lines()[:2]) + "{oops\n")
    with pytest.raises(SpecError, match=r"requests.jsonl: line 3: is not JSON"):
        read_run(run_dir)
    run_dir = write_bench_run(tmp_path / "b", series="t,prompt_throughput,gen_throughput,running,waiting,"
                              "kv_cache_pct\n1.0,2,3,4,5,6\n2.0,2,x,4,5,6\n")
    with pytest.raises(SpecError, match=r"timeseries.csv: line 3: gen_throughput: must be a number >= 0"):
        read_run(run_dir)


def test_a_bad_meta_value_is_refused_naming_its_key(tmp_path):
    meta = json.loads(json.dumps(META))
    meta["kv_cache"]["num_gpu_blocks"] = 0
    with pytest.raises(SpecError, match=r"meta.json: kv_cache.num_gpu_blocks: must be an integer >= 1"):
        read_run(write_bench_run(tmp_path, meta=meta))
    meta = json.loads(json.dumps(META))
    meta["engine_kwargs"] = [1]
    with pytest.raises(SpecError, match=r"meta.json: engine_kwargs: must be a mapping"):
        read_run(write_bench_run(tmp_path / "b", meta=meta))
