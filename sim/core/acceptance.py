"""The simulated data plane's speculative decoding outcome: how many of each decode's proposals the target accepts.

The simulator has no logits, so a seeded model stands in for the rejection sampler (as vLLM's own synthetic
acceptance does for its benchmarks): proposal i of a step is accepted with its conditional rate
(SpeculativeSpec.rates[i]) given that every one before it was, and the first rejection ends the step's run. A
decode that proposes k_i < k tokens (its last steps: engine.core.speculative.lookahead_slots) reads the first k_i.

Draws come from a generator of the replica's own, spawned from the run's seeded one only where the system
speculates (so a run without speculation draws exactly what it did), k uniforms a decode in batch order; they are
taken from it a block at a time (sim.core.beams.UniformDraws), the same floats as one call a step.
"""
from __future__ import annotations

import numpy as np

from engine.core.batch import Batch
from engine.core.speculative import SpeculativeSpec
from sim.core.beams import UniformDraws


class AcceptanceModel:
    """Draws each speculating decode's accepted count from `rng`."""

    def __init__(self, spec: SpeculativeSpec, rng: np.random.Generator):
        self.k = spec.num_speculative_tokens
        self.rates = np.asarray(spec.rates, dtype=float)
        self.draws = UniformDraws(rng)

    def accepted(self, batch: Batch) -> list[int]:
        """The accepted count of each decode of the batch (Batch.decode_proposed's order)."""
        proposed = batch.decode_proposed
        if not proposed:
            return []
        k, n = self.k, len(proposed)
        at = self.draws.take(n * k)
        uniforms = self.draws.values[at:at + n * k].reshape(n, k)
        runs = (uniforms < self.rates).cumprod(axis=1).sum(axis=1)
        return np.minimum(runs, np.asarray(proposed)).tolist()
