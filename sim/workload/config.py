"""The `workload:` section of an experiment YAML, validated, and the Trace it builds.

    workload:
      dataset: sharegpt      # sharegpt | sharegpt-standin | alpaca-standin | lengths CSV | alpaca_data.json
      arrival: poisson       # poisson (10 ms quanta) | exponential | gamma | constant
      cv: 1.0                # gamma only: coefficient of variation of the gaps
      duration_s: 3600
      n: 1                   # parallel samples per request
      trace: null            # recorded trace to replay (dataset and arrival are then ignored)
      time_scale: null       # replay only: k x the recorded rate; null + a rate: scale to that mean rate
      window_s: null         # replay only: [start, end) on the recorded clock

Relative paths are looked up beside the config file, then in the current directory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from engine.specs.errors import SpecError

from .arrivals import ARRIVALS
from .lengths import DATASET_NAMES, load_lengths
from .paths import resolve_data_path
from .recorded import load_recorded
from .trace import Trace

SECTION = "workload"


@dataclass(frozen=True)
class WorkloadConfig:
    dataset: str = "sharegpt"        # a dataset name, or an absolute path once resolved
    arrival: str = "poisson"
    cv: float = 1.0
    duration_s: float = 3600.0
    n: int | None = None             # None: 1, or the recorded trace's own n column
    trace: Path | None = None        # absolute path once resolved
    time_scale: float | None = None
    window_s: tuple[float, float] | None = None
    source: str = "config"           # the file this came from, for error messages

    @property
    def is_replay(self) -> bool:
        return self.trace is not None

    @classmethod
    def from_dict(cls, raw: dict | None, source: str = "config",
                  base_dir: str | Path | None = None) -> WorkloadConfig:
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise SpecError(source, SECTION, f"must be a mapping of keys to values, got {type(raw).__name__}")
        valid = [f.name for f in fields(cls) if f.name != "source"]
        unknown = sorted(set(raw) - set(valid), key=str)
        if unknown:
            raise SpecError(source, f"{SECTION}.{unknown[0]}", f"unknown key; valid keys are {valid}")
        values = {"source": source}
        values["trace"] = _path(raw, "trace", source, base_dir)
        values.update(_replay_options(raw, source, values["trace"] is not None))
        values["arrival"] = _choice(raw, "arrival", ARRIVALS, cls.arrival, source)
        values["cv"] = _positive(raw, "cv", cls.cv, source)
        values["duration_s"] = _positive(raw, "duration_s", cls.duration_s, source)
        values["n"] = _count(raw, "n", source)
        if values["trace"] is None:
            values["dataset"] = _dataset(raw.get("dataset", cls.dataset), source, base_dir)
        return cls(**values)


def build_trace(cfg: WorkloadConfig, rate: float | None, max_seq_len: int,
                rng: np.random.Generator) -> Trace:
    """The run's requests: a recorded trace replayed, or arrivals and lengths drawn from `rng`.

    Draw order is fixed (arrivals, then lengths) so the same seed gives the same trace.
    """
    if cfg.is_replay:
        return _replay(cfg, rate, max_seq_len)
    if rate is None:
        raise SpecError(cfg.source, SECTION, "a generated workload needs a request rate; only a recorded "
                        "trace (workload.trace) can run without one")
    process = ARRIVALS[cfg.arrival]
    options = {"cv": cfg.cv} if cfg.arrival == "gamma" else {}
    arrival_s = process(rate, cfg.duration_s, rng, **options)
    lengths = load_lengths(cfg.dataset)
    prompt, output = lengths.sample(len(arrival_s), max_seq_len, rng)
    shape = f" cv={cfg.cv:g}" if cfg.arrival == "gamma" else ""
    label = f"{lengths.source}; {cfg.arrival}{shape} arrivals at {rate:g} req/s for {cfg.duration_s:g} s"
    return Trace(arrival_s, prompt, output, cfg.n or 1, label, cfg.duration_s)


def _replay(cfg: WorkloadConfig, rate: float | None, max_seq_len: int) -> Trace:
    trace = load_recorded(cfg.trace, time_scale=cfg.time_scale, window_s=cfg.window_s,
                          max_seq_len=max_seq_len).trace
    if len(trace) == 0:
        raise SpecError(str(cfg.trace), f"{SECTION}.window_s",
                        f"no request left after the window and the prompt+output < {max_seq_len} filter")
    if cfg.time_scale is None and rate is not None:
        factor = rate / trace.mean_rate
        trace = trace.scaled(factor).with_source(
            f"{trace.source}; replayed at {factor:.4g}x the recorded rate ({rate:g} req/s)")
    return trace if cfg.n is None else trace.with_n(cfg.n)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(raw: dict, key: str, default: float, source: str) -> float:
    value = raw.get(key, default)
    if not _is_number(value) or value <= 0:
        raise SpecError(source, f"{SECTION}.{key}", f"must be a positive number, got {value!r}")
    return float(value)


def _count(raw: dict, key: str, source: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(source, f"{SECTION}.{key}", f"must be a positive integer, got {value!r}")
    return value


def _choice(raw: dict, key: str, choices, default: str, source: str) -> str:
    value = raw.get(key, default)
    if value not in choices:
        raise SpecError(source, f"{SECTION}.{key}", f"{value!r} is not one of {sorted(choices)}")
    return value


def _path(raw: dict, key: str, source: str, base_dir) -> Path | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SpecError(source, f"{SECTION}.{key}", f"must be a file path, got {value!r}")
    return resolve_data_path(value, base_dir, source, f"{SECTION}.{key}")


def _dataset(value, source: str, base_dir) -> str:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SpecError(source, f"{SECTION}.dataset", f"must be one of {list(DATASET_NAMES)} or a file path, "
                        f"got {value!r}")
    if str(value) in DATASET_NAMES:
        return str(value)
    try:
        return str(resolve_data_path(value, base_dir, source, f"{SECTION}.dataset"))
    except SpecError as e:
        hint = "; no Alpaca file is shipped: use alpaca-standin or a path to alpaca_data.json" \
            if str(value).lower() == "alpaca" else ""
        raise SpecError(source, e.key, f"{value!r} is neither a dataset name {list(DATASET_NAMES)} nor "
                        f"a prompt_len,output_len CSV or alpaca_data.json: {e.message}{hint}") from None


def _replay_options(raw: dict, source: str, replay: bool) -> dict:
    options = {}
    for key in ("time_scale", "window_s"):
        if raw.get(key) is not None and not replay:
            raise SpecError(source, f"{SECTION}.{key}", "applies only when replaying a recorded trace "
                            "(set workload.trace)")
    if raw.get("time_scale") is not None:
        options["time_scale"] = _positive(raw, "time_scale", 1.0, source)
    window = raw.get("window_s")
    if window is not None:
        if not (isinstance(window, (list, tuple)) and len(window) == 2 and all(map(_is_number, window))
                and 0 <= window[0] < window[1]):
            raise SpecError(source, f"{SECTION}.window_s",
                            f"must be [start, end] seconds with 0 <= start < end, got {window!r}")
        options["window_s"] = (float(window[0]), float(window[1]))
    return options
