"""Vidur's side of benchmarks/peers/vs_vidur.py: finding it, its command line, and what its run wrote.

Vidur runs unmodified from its own venv (`python -m vidur.main` with its CLI flags), offline
(HF_HUB_OFFLINE=1: its profiling inputs come from benchmarks/peers/vidur_profiles.py's datasets), with its
vLLM replica scheduler and its default execution-time predictor, the random forest.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.peers.vidur_profiles import Datasets
from benchmarks.peers.vidur_trace import DATE

VERSION = "0.0.26"  # the version whose flags and files this module was written against
MODEL_NAME = "meta-llama/Llama-2-7b-hf"  # Vidur's LLaMA-2-7B: LLaMA-7B's shape (32 x 4096, 32 heads, FFN 11008)
DEVICE, NETWORK_DEVICE = "a100", "a100_dgx"  # Vidur's A100 is the 80 GB part
PREDICTOR = "random_forrest"  # Vidur's default (sic); 0.0.26's linear_regression cannot be built (an abstract method)
# Vidur tabulates every prediction up to this many tokens a request; its default (2M, for long-context work)
# tabulates ~22M predictions and loads them all at every start. LLaMA-2-7B's context is 4096.
MAX_TOKENS_PER_REQUEST = 4096
MAX_BATCH_SIZE = 128  # Vidur predicts decode attention for at most prediction_max_batch_size (128) sequences
NUM_TRAINED_MODELS = 12  # 9 per-token operations, the KV-cache write, prefill and decode attention (TP 1, 1 stage)
TRAINED = "Trained model"  # what Vidur logs after fitting one model; a run that reused its cache logs none


@dataclass(frozen=True)
class VidurRun:
    python: Path
    trace_csv: Path
    datasets: Datasets
    cache_dir: Path  # Vidur's own cache_dir: the datasets, then its trained models and predictions
    output_dir: Path
    num_blocks: int
    block_size: int
    watermark: float
    max_tokens_in_batch: int
    native_predictor: bool = False  # Vidur's C++ execution-time lookup (use_native_execution_time_predictor)


def vidur_version(python: Path) -> str | None:
    """The installed vidur's version under `python`, or None where it cannot be imported."""
    if not Path(python).exists():
        return None
    probe = "import importlib.metadata as m, vidur.main; print(m.version('vidur'))"
    try:
        done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def vidur_command(run: VidurRun) -> list[str]:
    predictor = f"--{PREDICTOR}_execution_time_predictor_config"
    flags = {
        "--replica_config_model_name": MODEL_NAME, "--replica_config_device": DEVICE,
        "--replica_config_network_device": NETWORK_DEVICE, "--replica_config_tensor_parallel_size": 1,
        "--replica_config_num_pipeline_stages": 1, "--cluster_config_num_replicas": 1,
        "--cache_config_block_size": run.block_size, "--cache_config_num_blocks": run.num_blocks,
        "--cache_config_watermark_blocks_fraction": run.watermark,
        "--replica_scheduler_config_type": "vllm", "--vllm_scheduler_config_batch_size_cap": MAX_BATCH_SIZE,
        "--vllm_scheduler_config_max_tokens_in_batch": run.max_tokens_in_batch,
        "--request_generator_config_type": "trace_replay",
        "--trace_request_generator_config_trace_file": run.trace_csv,
        "--trace_request_generator_config_date": DATE,
        "--trace_request_generator_config_time_scale_factor": 1,
        "--trace_request_generator_config_prefill_scale_factor": 1,
        "--trace_request_generator_config_decode_scale_factor": 1,
        "--execution_time_predictor_config_type": PREDICTOR,
        f"{predictor}_model_profiling_dataset": run.datasets.compute,
        f"{predictor}_network_profiling_dataset": run.datasets.network,
        f"{predictor}_cache_dir": run.cache_dir,
        f"{predictor}_prediction_max_tokens_per_request": MAX_TOKENS_PER_REQUEST,
        f"{predictor}_prediction_max_batch_size": MAX_BATCH_SIZE,
        # one core: the training's grid search would otherwise start a worker per core
        f"{predictor}_num_training_job_threads": 1,
        "--metrics_config_output_dir": run.output_dir,
    }
    # plots need kaleido's Chrome, which an offline machine lacks; the Chrome trace is a debugging aid
    switches = ["--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"]
    if run.native_predictor:
        switches.append(f"{predictor}_use_native_execution_time_predictor")
    return [str(run.python), "-m", "vidur.main", *[str(a) for kv in flags.items() for a in kv], *switches]


def vidur_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def trained_models(log_text: str) -> int:
    return log_text.count(TRAINED)


def request_metrics(output_dir: Path) -> pd.DataFrame:
    """Vidur's per-request table (request_metrics.csv, in the timestamped folder it makes under output_dir)."""
    found = sorted(Path(output_dir).glob("*/request_metrics.csv"))
    if not found:
        raise FileNotFoundError(f"no request_metrics.csv under {output_dir}: Vidur wrote no metrics")
    return pd.read_csv(found[-1])
