"""Bad configs, overrides and traces, each kept as a regression test: a one-line SpecError before anything runs.

The cases met at the command line run `python -m servesim` in subprocesses (started
together, so they cost about one start-up) and check the exit status 2, one line on stderr and
nothing written; the rest load in-process and check the message.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.clock.costmodel import CostModel
from calibrate.work.features import TERMS
from engine.errors import SpecError
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.metrics import summarize
from sim.experiment.run import run_one, simulate_trace
from sim.workload.trace import Trace
from tests.helpers.hostile import TINY, profile

REPO = Path(__file__).resolve().parents[2]

NO_TORCH = "import sys; sys.modules['torch'] = None; from servesim.cli import main; sys.exit(main())"


# --- from the command line ------------------------------------------------------------------
CLI_CASES = {  # name: (command after `python`, what stderr must say)
    "binary config": (["-m", "servesim", "run", "binary.yaml"], "binary.yaml: not a text file: byte 0x80"),
    "non-UTF-8 config": (["-m", "servesim", "run", "latin1.yaml"], "latin1.yaml: not a text file: byte 0xe9"),
    "folder as config": (["-m", "servesim", "run", "folder"], "folder: is a folder; give the path of a config"),
    "unparsable --set": (["-m", "servesim", "run", "tiny.yaml", "--set", "rates=[1,2"],
                         "tiny.yaml: rates: --set 'rates=[1,2': not valid YAML: expected ',' or ']'"),
    # both read as numbers (YAML 1.1 would read them as text): 2000 s of warm-up in 1000 s of arrivals
    "1e3 is a number": (["-m", "servesim", "run", "tiny.yaml", "--set", "workload.duration_s=1e3", "--set",
                         "warmup_s=2e3"], "warmup_s: 2000 s of warm-up leaves nothing to measure in 1000 s"),
    "validate without torch": (["-c", NO_TORCH, "validate", "tiny.yaml"],
                               "servesim validate: needs the real engine, and torch is not installed: install "
                               "servesim[engine] (pip install torch==2.13.0 'servesim[engine]')"),
    "calibrate profile without torch": (["-c", NO_TORCH, "calibrate", "profile", "--model", "opt-tiny"],
                                        "servesim calibrate profile: needs the real engine, and torch is not "
                                        "installed: install servesim[engine]"),
}


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every CLI case, started at once in its own folder; each writes (if it wrongly ran) to ./out."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = {}
    for name, (argv, _) in CLI_CASES.items():
        folder = tmp_path_factory.mktemp("cli")
        (folder / "tiny.yaml").write_text(textwrap.dedent(TINY))
        (folder / "binary.yaml").write_bytes(bytes(range(256)))
        (folder / "latin1.yaml").write_bytes("name: café\n".encode("latin-1"))
        (folder / "folder").mkdir()
        out = folder / "out"
        started[name] = (subprocess.Popen([sys.executable, *argv, "--out", str(out)], cwd=folder, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out)
    return {name: (process.communicate(timeout=120), process.returncode, out)
            for name, (process, out) in started.items()}


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_refuses_in_one_line_and_writes_nothing(cli_runs, name):
    (stdout, stderr), returncode, out = cli_runs[name]
    assert returncode == 2, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("servesim: error: "), stderr
    assert CLI_CASES[name][1] in stderr, stderr
    assert not out.exists()


# the same, in this process: the command's own main()
@pytest.mark.parametrize("argv, message", [
    (["run", "tiny.yaml", "--set", "rates=[.nan]"],
     "tiny.yaml: rates[0]: must be a positive number or inf (every request at 0 s), got nan"),
    (["run", "tiny.yaml", "--set", "workload.max_concurrency=0"],
     "tiny.yaml: workload.max_concurrency: must be a positive integer, got 0"),
    # died inside SimPy ("Negative delay") after the first swap
    (["run", "tiny.yaml", "--set", "cost_model=swap.yaml"],
     "swap.yaml: swap_s_per_copy: must be a non-negative number, got -0.001"),
    (["calibrate", "show", "binary.yaml"], "binary.yaml: not a text file: byte 0x80 at offset 128"),
])
def test_main_refuses_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(textwrap.dedent(TINY))
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    profile(swap_s_per_copy=-0.001).save(tmp_path / "swap.yaml")
    out = ["--out", "out"] if argv[0] == "run" else []
    assert main(argv + out) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


# --- at load time ----------------------------------------------------------------------------
def _refused(tmp_path, *overrides: str, text: str = TINY) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SpecError) as err:
        load_experiment(path, list(overrides))
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path))
    for item in overrides:  # an error about a value a --set gave ends by naming it
        message = message.removesuffix(f" (given by --set {item}, not by the file)")
    return message.removeprefix(f"{path}: ")


@pytest.mark.parametrize("override, message", [
    ("rates=[.inf]", "rates[0]: inf sends every request at 0 s (vLLM's --request-rate inf), so the requests must be "
                     "counted, not drawn for workload.duration_s: give workload.num_requests (vLLM's --num-prompts)"),
    ("rates=[inf]", "rates[0]: inf sends every request at 0 s (vLLM's --request-rate inf), so the requests must be "
                    "counted, not drawn for workload.duration_s: give workload.num_requests (vLLM's --num-prompts)"),
    ("workload.max_concurrency=-3", "workload.max_concurrency: must be a positive integer, got -3"),
    ("workload.max_concurrency=2.5", "workload.max_concurrency: must be a positive integer, got 2.5"),
    ("workload.max_concurrency=lots", "workload.max_concurrency: must be a positive integer, got 'lots'"),
    ("workload.burstiness=0", "workload.burstiness: must be a number in [0.01, 1000000], got 0"),
    ("workload.burstiness=-1", "workload.burstiness: must be a number in [0.01, 1000000], got -1"),
    ("workload.burstiness=bursty", "workload.burstiness: must be a number in [0.01, 1000000], got 'bursty'"),
    ("workload.burstiness=.nan", "workload.burstiness: must be a number in [0.01, 1000000], got nan"),
    ("workload.burstiness=2", "workload.burstiness: shapes gamma arrivals (vLLM's gaps), not poisson; leave "
                              "workload.arrival out or set it to gamma"),
    ("concurrencies=[4, 0]", "concurrencies[1]: must be a positive integer, got 0"),
    ("workload.num_requests=0", "workload.num_requests: must be a positive integer, got 0"),
    ("workload.num_requests=100", "workload.num_requests: and workload.duration_s both say how many requests "
                                  "arrive; give one"),
    ("kv_cache_gib=.nan", "kv_cache_gib: must be a positive number, got nan"),
    ("max_time_factor=0.1", "max_time_factor: must be a number >= 1, got 0.1"),
    ("warmup_s=20", "warmup_s: 20 s of warm-up leaves nothing to measure in 20 s of arrivals "
                    "(workload.duration_s); must be less than workload.duration_s"),
    ("cost_model={kind: roofline, compute_efficiency: 5}",
     "cost_model.compute_efficiency: must be a number in (0, 1], got 5"),
    ("cost_model={kind: roofline, overhead_s: -1}", "cost_model.overhead_s: must be a non-negative number, got -1"),
    ("tensor_parallel=3", "tensor_parallel: 3 does not divide opt-13b's 40 attention heads; "
                          "valid: [1, 2, 4, 5, 8, 10, 20, 40]"),
    ("systems=[{preset: vllm, max_num_batched_tokens: 64}]",
     "systems[0].max_num_batched_tokens: 64 tokens per iteration cannot prefill a 2048-token prompt "
     "(opt-13b's max_seq_len) under prefill_policy mixed, which prefills a prompt in one iteration; give at "
     "least 2048, null for no cap, or prefill_policy: chunked, which splits a prompt over iterations"),
    ("swap_space_gib=-1", "swap_space_gib: must be a non-negative number, got -1"),
    ("kv_cache_gib=30", "kv_cache_gib: 30 GiB of KV cache and 23.9 GiB of weights per GPU do not fit "
                        "a100-40gb's 39.59 GiB; at most 15.65"),
    ("workload.n=300", "workload.n: 300 samples per request can never run together: vLLM batches at most "
                       "256 sequences (systems[0]); give at most 256"),
])
def test_numbers_are_checked_for_sense(tmp_path, override, message):
    assert _refused(tmp_path, override) == message


def test_1e3_override_is_a_thousand(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(TINY))
    assert load_experiment(path, ["workload.duration_s=1e3"]).workload.duration_s == 1000.0


def test_tensor_parallelism_must_divide_the_kv_heads(tmp_path):
    model = {"name": "gqa", "family": "llama", "num_layers": 2, "hidden_size": 512, "num_heads": 8,
             "num_kv_heads": 2, "ffn_dim": 1024, "vocab_size": 1000, "max_seq_len": 2048}
    (tmp_path / "gqa.yaml").write_text("\n".join(f"{k}: {v}" for k, v in model.items()))
    text = TINY.replace("model: opt-13b", "model: gqa.yaml").replace("kv_cache_gib: 12", "kv_cache_gib: 1")
    assert _refused(tmp_path, "tensor_parallel=4", text=text) == \
        "tensor_parallel: 4 does not divide gqa's 2 KV heads; valid: [1, 2]"


def test_a_nan_hardware_field_is_refused(tmp_path):
    (tmp_path / "gpu.yaml").write_text("name: gpu\npeak_flops: .nan\nhbm_bytes_per_s: 1.0e+12\nmemory_gib: 40\n"
                                       "nvlink_bytes_per_s: 1.0e+11\npcie_bytes_per_s: 3.0e+10\n")
    with pytest.raises(SpecError, match=r"gpu.yaml: peak_flops: must be a positive number, got nan"):
        load_experiment(_config(tmp_path, TINY.replace("hardware: a100-40gb", "hardware: gpu.yaml")))


@pytest.mark.parametrize("changes, message", [
    (dict(coefficients={**{t: 0.0 for t in TERMS}, "decode_context_s": math.nan}),
     "coefficients.decode_context_s: must be a non-negative number, got nan"),
    (dict(token_costs_s=[0.01, math.inf, 0.05]), "token_costs_s[1]: must be a non-negative number, got inf"),
    (dict(heldout_mape=math.nan), "heldout_mape: must be a non-negative number, got nan"),
])
def test_every_profile_number_is_checked(tmp_path, changes, message):
    profile(**changes).save(tmp_path / "p.yaml")
    with pytest.raises(SpecError) as err:
        load_experiment(_config(tmp_path, TINY + "cost_model: p.yaml\n"))
    assert str(err.value) == f"{tmp_path / 'p.yaml'}: {message}"


def test_a_wrong_model_profile_suggests_the_key_that_exists(tmp_path):
    profile(model="opt-6.7b").save(tmp_path / "p.yaml")
    with pytest.raises(SpecError) as err:  # at load, no longer in the first run
        load_experiment(_config(tmp_path, TINY + "cost_model: p.yaml\n"))
    assert f"cost_model: {{kind: transfer, path: {tmp_path / 'p.yaml'}}}" in str(err.value)
    assert "profile: ..." not in str(err.value)


# --- replays -----------------------------------------------------------------------------------
REPLAY = TINY.replace("{dataset: sharegpt-standin, arrival: poisson, duration_s: 20}", "{trace: t.csv}") \
    .replace("warmup_s: 2", "warmup_s: 0")


def _trace(folder: Path, rows: str) -> None:
    (folder / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows)


def test_a_trace_whose_arrivals_are_all_at_zero(tmp_path):
    _trace(tmp_path, "0,10,10\n0,20,20\n")
    message = _refused(tmp_path, text=REPLAY)
    assert message == ("workload.trace: every arrival of t.csv is at 0 s, so it has no recorded rate to rescale "
                       "to 1 req/s; set workload.time_scale: 1 to replay it as recorded")
    exp = load_experiment(tmp_path / "exp.yaml", ["workload.time_scale=1"])  # the way out it names
    assert run_one(exp, exp.systems[0], 1.0, 0).summary["num_requests"] == 2


def test_an_unordered_trace_is_refused_at_load_before_any_worker(tmp_path):
    _trace(tmp_path, "0.1,10,10\n0.5,10,10\n0.3,10,10\n")
    with pytest.raises(SpecError, match="row 3: .line 4. column arrived_at: 0.3 is earlier than the row before it"):
        load_experiment(_config(tmp_path, REPLAY))


def test_every_request_too_long_names_the_trace_not_an_unset_window(tmp_path):
    _trace(tmp_path, "0,3000,10\n1,2000,100\n")
    assert _refused(tmp_path, text=REPLAY) == (
        "workload.trace: every request of t.csv (2) has prompt + output >= 2048 tokens, the model's "
        "max_seq_len: none can be served")


def test_warm_up_past_the_last_replayed_arrival(tmp_path):
    _trace(tmp_path, "0,10,10\n10,20,20\n")
    assert _refused(tmp_path, "warmup_s=30", text=REPLAY) == (
        "warmup_s: 30 s of warm-up leaves nothing to measure: replayed at 1 req/s, the last request of t.csv "
        "arrives at 2 s; must be at most that")


def test_relative_trace_is_looked_up_like_cost_model(tmp_path, monkeypatch):
    """Beside the config first, then in the current directory, for workload.trace as for cost_model."""
    config_dir, cwd = tmp_path / "configs", tmp_path / "cwd"
    config_dir.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    text = REPLAY + "cost_model: p.yaml\n"
    for home in (config_dir, cwd):
        _trace(home, "0,10,10\n1,20,20\n")
        profile().save(home / "p.yaml")
        exp = load_experiment(_config(config_dir, text))
        assert exp.workload.trace == home / "t.csv" and exp.cost_model.profile_path == home / "p.yaml"
        (home / "t.csv").unlink()
        (home / "p.yaml").unlink()


def _config(folder: Path, text: str) -> Path:
    path = folder / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    return path


# --- the clock and the metrics --------------------------------------------------------------------
class Broken(CostModel):
    source = "broken(test)"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def iteration_time(self, batch) -> float:
        return self.seconds

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


@pytest.mark.parametrize("seconds", [-0.001, math.nan, math.inf])
def test_the_clock_refuses_a_bad_step_time_naming_the_cost_model(tmp_path, seconds):
    exp = load_experiment(_config(tmp_path, TINY))
    trace = Trace(arrival_s=[0.0, 0.5], prompt_len=[100, 37], output_len=[20, 5], source="test")
    with pytest.raises(SpecError) as err:
        simulate_trace(exp, exp.systems[0], trace, Broken(seconds))
    assert str(err.value) == (
        f"broken(test): step time {seconds!r} s for a batch of 1 prefills (100 tokens) and 0 decodes, at 0 s on "
        "replica 0; every step must take a finite, non-negative number of seconds")


def test_tpot_is_nan_where_undefined_never_zero():
    """At overload most requests never got a first token: their TPOT is unknown, not 0.0."""
    requests = pd.DataFrame({
        "arrival_s": [0.0, 0.0, 0.0, 0.0], "first_token_s": [1.0, 2.0, np.nan, np.nan],
        "finish_s": [5.0, 2.0, np.nan, np.nan], "output_len": [5, 1, 10, 10], "n": [1, 1, 1, 1],
        "num_preemptions": [0, 0, 0, 0]})
    iterations = pd.DataFrame({"start_s": [0.0], "duration_s": [1.0], "num_running_groups": [1],
                               "num_swap_blocks": [0], **{c: [0.0] for c in (
                                   "kv_token", "kv_reserved", "kv_internal", "kv_external", "kv_idle",
                                   "unshared_blocks", "saved_blocks")}})
    summary = summarize(requests, iterations, pool_slots=16, warmup_s=0.0, horizon_s=10.0)
    assert summary["tpot_p50_s"] == summary["tpot_mean_s"] == 1.0  # only the request with a decode
    only_overload = summarize(requests.iloc[2:], iterations, pool_slots=16, warmup_s=0.0, horizon_s=10.0)
    assert all(math.isnan(only_overload[k]) for k in ("tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s"))
