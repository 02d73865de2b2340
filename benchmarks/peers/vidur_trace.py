"""The requests servesim simulates, as a trace Vidur's trace-replay request generator reads.

Vidur's `trace_replay` generator (vidur/request_generator/trace_replay_request_generator.py) reads a CSV
with one row per request: `Date` (it keeps the rows of one date), `Time` (arrival, seconds from the
trace start, multiplied by time_scale_factor), `PromptTokenCount` and `CompletionTokenCount` (output
tokens, the first of which the prefill produces, as in servesim). The trace here is the one servesim's
run draws: the same config, overrides, rate and seed through sim.experiment.run.trace_for.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from engine.atomic import replace_atomic
from sim.experiment.config import load_experiment
from sim.experiment.run import trace_for
from sim.workload.trace import Trace

COLUMNS = ("Date", "Time", "PromptTokenCount", "CompletionTokenCount")
DATE = "2026-01-01"  # any date; the generator keeps the rows whose Date equals its `date` setting


def servesim_trace(config: Path, overrides: list[str]) -> Trace:
    """The trace servesim's run of `config` with `overrides` simulates (its one rate and seed)."""
    exp = load_experiment(config, overrides)
    if len(exp.rates) != 1 or len(exp.seeds) != 1:
        raise ValueError(f"{config}: the comparison replays one run; got rates {list(exp.rates)} and "
                         f"seeds {list(exp.seeds)}")
    return trace_for(exp, exp.rates[0], exp.seeds[0])


def vidur_trace_frame(trace: Trace) -> pd.DataFrame:
    """One row per request, in arrival order (Vidur numbers requests in row order, as servesim does)."""
    if trace.prefix_len or (trace.n > 1).any() or (trace.beam_width > 1).any():
        raise ValueError("Vidur replays single-sequence requests only: this trace has parallel samples, "
                         "beams or a shared prefix")
    return pd.DataFrame({"Date": DATE, "Time": trace.arrival_s, "PromptTokenCount": trace.prompt_len,
                         "CompletionTokenCount": trace.output_len}, columns=list(COLUMNS))


def write_vidur_trace(trace: Trace, path: Path) -> Path:
    """Write the trace atomically; float arrivals keep every digit (pandas writes the shortest exact repr)."""
    frame = vidur_trace_frame(trace)
    return replace_atomic(path, lambda tmp: frame.to_csv(tmp, index=False))
