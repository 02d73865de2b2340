"""The simulated data plane's beam search: which beam each surviving candidate continues.

The simulator has no logits, so a seeded model stands in for the scores. It has one parameter,
`beam_continue` (workload.beam_continue): after each decode step of a beam search of width k, each
of the k surviving candidates continues its own beam (candidate i, beam i) with probability
beam_continue, and otherwise a beam drawn uniformly from the group's k (its own included). Beams
nobody continues die; a beam drawn by several candidates forks (engine.core.beam puts the
candidates into the group's slots, and the control plane shares or copies the parent's KV).
beam_continue = 1 never forks (the beams share only the prompt, like parallel samples); lower values
fork more often, so the beams share longer histories and save more memory under vLLM.

DEFAULT_BEAM_CONTINUE was fitted once, on Alpaca-shaped lengths (alpaca-standin), to the memory
saving the paper reports for beam search there (Fig. 15: 37.6% at width 2 to 55.2% at width 6):
0.93 gives 36.5%, 51.0% and 56.3% at widths 2, 4 and 6. It was not refitted for ShareGPT, which lands
at 46.2%, 67.5% and 75.0% (the paper: 44.3%-66.3%). benchmarks/beam_saving.py --fit refits and
reports both; benchmarks/results/beam_saving.md records the run.

Draws come from the run's one seeded numpy Generator, in batch order, so a run is deterministic. They are
taken from it a block at a time (UniformDraws) and handed out as one call per step would have drawn them;
settle() then leaves the Generator where those calls would have.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.core.batch import Batch
from engine.core.beam import beam_parents

DEFAULT_BEAM_CONTINUE = 0.93
DRAW_BLOCK = 4096  # uniform draws taken from the Generator at once
# bit generators whose advance(k) is k draws of random(): one 64-bit output per double
ADVANCES_BY_DRAW = ("PCG64", "PCG64DXSM")


class UniformDraws:
    """rng.random(n) for a stream of small n, drawn DRAW_BLOCK at a time: the same floats in the same order (a
    double is one 64-bit output, whichever call draws it), without a numpy call per decode step of a beam search.
    settle() puts the Generator's state where the calls one by one would have left it (the state before the
    first block, advanced by the draws handed out), so that whoever draws next draws what they would have.
    A bit generator that cannot be advanced so is drawn from call by call."""

    def __init__(self, rng: np.random.Generator, block: int = DRAW_BLOCK):
        """block: draws taken at once; 0 draws call by call."""
        self.rng = rng
        self.block = block
        self.buffered = block > 0 and type(rng.bit_generator).__name__ in ADVANCES_BY_DRAW
        self._values: list[float] = []
        self._at = 0
        self._handed_out = 0
        self._state: Mapping[str, Any] | None = None  # the Generator's, before the first block since the last settle()

    def take(self, n: int) -> list[float]:
        if not self.buffered:
            return self.rng.random(n).tolist()
        if self._at + n > len(self._values):
            if self._state is None:
                self._state = self.rng.bit_generator.state
            self._values = self._values[self._at:] + self.rng.random(max(self.block, n)).tolist()
            self._at = 0
        values = self._values[self._at:self._at + n]
        self._at += n
        self._handed_out += n
        return values

    def settle(self) -> None:
        """Give back the drawn values not handed out: the Generator as if each take(n) had been rng.random(n)."""
        before = self._state
        if before is None:
            return
        bit_generator: Any = self.rng.bit_generator  # a PCG64 (ADVANCES_BY_DRAW), which has advance()
        bit_generator.state = before
        bit_generator.advance(self._handed_out)
        state = dict(bit_generator.state)  # advance() drops a 32-bit half kept for the next draw; random() keeps it
        state["has_uint32"], state["uinteger"] = before["has_uint32"], before["uinteger"]
        bit_generator.state = state
        self._values, self._at, self._handed_out, self._state = [], 0, 0, None


class BeamParentModel:
    """Chooses parents for the beam searches a batch decoded; draws from `rng`."""

    def __init__(self, beam_continue: float, rng: np.random.Generator, draw_block: int = DRAW_BLOCK):
        """draw_block: UniformDraws' block (0: a numpy call per step)."""
        if not 0.0 <= beam_continue <= 1.0:
            raise ValueError(f"beam_continue must be a probability in [0, 1], got {beam_continue!r}")
        self.beam_continue = beam_continue
        self.rng = rng
        self.draws = UniformDraws(rng, draw_block)

    def parents(self, batch: Batch) -> dict[int, int]:
        """The batch's forks, {child seq id: parent seq id}; none after a prefill (every beam is the
        prompt then) and none for beams that continue themselves."""
        prefilled = set(batch.prefill_sample_ids) if batch.prefill_sample_ids else ()
        decoded = [ids for ids in batch.beam_groups if ids not in prefilled]
        if not decoded:
            return {}
        total = sum(map(len, decoded))
        beam_continue = self.beam_continue
        stays = [u < beam_continue for u in self.draws.take(total)]
        uniform = self.draws.take(total)
        # candidate j of a group of width k continues its own beam, or the beam int(u k) drawn uniformly (the
        # float u k and its floor are numpy's; in Python, as a batch holds only a few beams a step)
        forks: dict[int, int] = {}
        start = 0
        for ids in decoded:
            width = len(ids)
            if not all(stays[start:start + width]):  # else every candidate continues its own beam: no fork
                parents = [ids[j] if stays[start + j] else ids[int(uniform[start + j] * width)]
                           for j in range(width)]
                forks.update(beam_parents(ids, parents))
            start += width
        return forks

    def settle(self) -> None:
        """The run's Generator as if every draw had been its own call (UniformDraws.settle): call once the
        simulation ends."""
        self.draws.settle()
