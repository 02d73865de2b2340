"""The simulated data plane's speculative decoding outcome: how many of each decode's proposals the target accepts.

The simulator has no logits, so a seeded model stands in for the rejection sampler (as vLLM's own synthetic
acceptance does for its benchmarks): proposal i of a step is accepted with its conditional rate
(SpeculativeSpec.rates[i]) given that every one before it was, and the first rejection ends the step's run. A
decode that proposes k_i < k tokens (its last steps: engine.core.speculative.lookahead_slots) reads the first k_i.

Draws come from a generator of the replica's own, spawned from the run's seeded one only where the system
speculates (so a run without speculation draws exactly what it did), k uniforms a decode in batch order. They are
drawn DECODES_PER_BLOCK decodes at a time and turned into accepted runs at once (a numpy call a block, not a step):
the same uniforms, in the same order, as k a decode one step at a time.

Any AcceptanceSource may stand in for the draws: fidelity.replay.ReplayedAcceptance hands back the counts a real
engine run measured, so that the simulator replays that run exactly.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from engine.core.batch import Batch
from engine.core.speculative import SpeculativeSpec

DECODES_PER_BLOCK = 4096


class AcceptanceSource(Protocol):
    def accepted(self, batch: Batch) -> list[int]:
        """The accepted count of each decode of the batch (Batch.decode_proposed's order), each from 0 to its
        proposals; asked once per speculating step, in the order the steps run."""
        ...


class AcceptanceModel:
    """Draws each speculating decode's accepted count from `rng`."""

    def __init__(self, spec: SpeculativeSpec, rng: np.random.Generator, block: int = DECODES_PER_BLOCK):
        if spec.acceptance_table is not None:
            raise ValueError(f"acceptance table {spec.acceptance_table.table!r} not read: an experiment reads it "
                             "(sim/experiment/acceptance_table.py)")
        self.k = spec.num_speculative_tokens
        self.rates = np.asarray(spec.rates, dtype=float)
        self.rng, self.block = rng, block
        self._runs: list[int] = []  # each decode's run of accepted proposals, of k, drawn ahead
        self._at = 0

    def accepted(self, batch: Batch) -> list[int]:
        """The accepted count of each decode of the batch (Batch.decode_proposed's order)."""
        counts = self.ahead(batch, 0)
        self._at += len(counts)
        return counts

    def ahead(self, batch: Batch, offset: int) -> list[int]:
        """accepted() of the batch as it will be drawn once `offset` more decodes' have been handed out, without
        handing any out (a speculating stretch plans its iterations on them: sim.core.fast_forward); skip() then
        hands out those the stretch ran."""
        proposed = batch.decode_proposed
        n = len(proposed)
        if self._at + offset + n > len(self._runs):
            self._draw(offset + n)
        at = self._at + offset
        return [run if run < k else k for run, k in zip(self._runs[at:at + n], proposed)]

    def skip(self, num_decodes: int) -> None:
        """Hand out the next num_decodes decodes' runs, as accepted() would (ahead() has drawn them)."""
        self._at += num_decodes

    def _draw(self, n: int) -> None:
        """The next block of decodes' runs, after those not handed out yet (n of them at least)."""
        count = max(self.block, n)
        uniforms = self.rng.random(count * self.k).reshape(count, self.k)
        runs = (uniforms < self.rates).cumprod(axis=1).sum(axis=1).tolist()
        self._runs = self._runs[self._at:] + runs
        self._at = 0
