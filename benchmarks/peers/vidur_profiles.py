"""Vidur's profiling inputs, laid out as the offline Hugging Face datasets its predictor loads.

vidur 0.0.26 reads its per-operation timings from two Hugging Face datasets (`model_profiling_dataset`:
config.json, mlp.csv.xz, attention.csv.xz; `network_profiling_dataset`: config.json, all_reduce.csv.xz,
send_recv.csv.xz), through huggingface_hub.snapshot_download into `<cache_dir>/profiling_data/...`. With
HF_HUB_OFFLINE=1 that call returns a snapshot already in that cache, so a dataset written here in the
hub's cache layout (datasets--ORG--NAME/refs/main naming a snapshots/<commit>/ folder) is read as if it
had been downloaded, and Vidur runs unmodified, with no network.

The repository names carry a digest of the files: Vidur keys its trained models and predictions by the
dataset's name, not its content, so new inputs get a new name and never meet stale predictions.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.atomic import write_text_atomic

ORG = "servesim-standin"
COMPUTE, NETWORK = "compute", "network"


@dataclass(frozen=True)
class Datasets:
    compute: str  # repository id for model_profiling_dataset
    network: str  # for network_profiling_dataset


def repo_folder(vidur_cache: Path, kind: str, repo_id: str) -> Path:
    """Where snapshot_download(repo_id, repo_type="dataset", cache_dir=<cache>/profiling_data/<kind>/) looks."""
    return vidur_cache / "profiling_data" / kind / f"datasets--{repo_id.replace('/', '--')}"


def digest(files: dict[str, bytes]) -> str:
    sha = hashlib.sha1()
    for name in sorted(files):
        sha.update(name.encode() + b"\0" + files[name] + b"\0")
    return sha.hexdigest()


def write_dataset(vidur_cache: Path, kind: str, repo_id: str, files: dict[str, bytes]) -> Path:
    """The snapshot folder of `files` (name: contents; a .xz name is compressed here). The snapshot is
    filled in a temporary folder and renamed into place, and refs/main is written last, so an
    interrupted write leaves nothing Vidur would read."""
    folder = repo_folder(vidur_cache, kind, repo_id)
    commit = digest(files)
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{commit}.", dir=snapshot.parent))
        try:
            for name, contents in files.items():
                (staging / name).write_bytes(lzma.compress(contents) if name.endswith(".xz") else contents)
            os.replace(staging, snapshot)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    write_text_atomic(folder / "refs" / "main", commit)
    return snapshot


def write_datasets(vidur_cache: Path, model_name: str, device: str, network_device: str,
                   mlp_csv: bytes, attention_csv: bytes, all_reduce_csv: bytes) -> Datasets:
    """Both datasets, named by their content. TP 1 and one pipeline stage read neither all-reduce nor
    send/recv times; the all-reduce table travels for completeness, send_recv is not published."""
    compute = {"config.json": json.dumps({"model": model_name, "device_sku": device}).encode(),
               "mlp.csv.xz": mlp_csv, "attention.csv.xz": attention_csv}
    network = {"config.json": json.dumps({"sku": network_device}).encode(), "all_reduce.csv.xz": all_reduce_csv}
    slug = model_name.replace("/", "-").lower()
    compute_id = f"{ORG}/{device}-{slug}-{digest(compute)[:12]}"
    network_id = f"{ORG}/{network_device}-{digest(network)[:12]}"
    write_dataset(vidur_cache, COMPUTE, compute_id, compute)
    write_dataset(vidur_cache, NETWORK, network_id, network)
    return Datasets(compute_id, network_id)
