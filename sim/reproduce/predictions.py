"""The paper's two microbenchmarks, which it timed on an A100, as a paper config's cost model predicts
them (no simulation, no device): the panels of Figs. 18a and 19a and the claims read off them.

- Fig. 18a: decode attention of one layer through 16-token block tables (vLLM's paged kernel) against
  FasterTransformer's dense kernel, at batch 8 and 32 and contexts 64-256. A decode iteration's time
  less the same iteration with nothing to attend to is its attention; a cost model whose attention
  does not depend on block size predicts no overhead.
- Fig. 19a: bringing back a preempted sequence (sim/reproduce/ablations.py), recomputed or swapped out and
  in, at block sizes 1-256.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from calibrate.clock.costmodel import CostModel
from engine.core.batch import BatchShape
from engine.core.system import PAPER_SYSTEMS
from sim.experiment.config import Experiment
from sim.experiment.run import make_cost_model
from sim.reproduce.ablations import FIG18A_BATCHES, FIG18A_CONTEXTS, fig19a_frame

PAGED_BLOCK_SIZE = 16  # the paper's default, at which it timed Fig. 18a


def cost_model_at(exp: Experiment, block_size: int, system: str = "vllm") -> CostModel:
    """The experiment's cost model for a preset system at a block size: vLLM prices the paged kernel,
    FasterTransformer the dense one."""
    return make_cost_model(exp, replace(PAPER_SYSTEMS[system], block_size=block_size))


def attention_s(cost_model: CostModel, batch: int, context: int) -> float:
    """A decode iteration's time less the same iteration with nothing to attend to (all layers)."""
    full = cost_model.iteration_time(BatchShape(decode_context_lens=(context,) * batch))
    bare = cost_model.iteration_time(BatchShape(decode_context_lens=(0,) * batch))
    return full - bare


def kernel_frame(paged: CostModel, dense: CostModel, num_layers: int) -> pd.DataFrame:
    """Fig. 18a's shapes: batch, context, dense_us, paged_us (one layer), overhead (paged / dense - 1)."""
    rows = []
    for batch in FIG18A_BATCHES:
        for context in FIG18A_CONTEXTS:
            dense_s = attention_s(dense, batch, context) / num_layers
            paged_s = attention_s(paged, batch, context) / num_layers
            rows.append({"batch": batch, "context": context, "block_size": PAGED_BLOCK_SIZE,
                         "dense_us": dense_s * 1e6, "paged_us": paged_s * 1e6, "overhead": paged_s / dense_s - 1})
    return pd.DataFrame(rows)


def kernel_rows(exp: Experiment) -> pd.DataFrame:
    paged = cost_model_at(exp, PAGED_BLOCK_SIZE)
    dense = cost_model_at(exp, PAGED_BLOCK_SIZE, "fastertransformer")
    return kernel_frame(paged, dense, exp.model.num_layers).assign(cost_model=paged.source)


def preemption_cost_rows(exp: Experiment) -> pd.DataFrame:
    """Fig. 19a: block_size, tokens, recompute_ms, swap_in_ms, swap_out_ms, swap_in_out_ms."""
    return fig19a_frame(lambda block_size: cost_model_at(exp, block_size)).assign(
        cost_model=cost_model_at(exp, PAGED_BLOCK_SIZE).source)

