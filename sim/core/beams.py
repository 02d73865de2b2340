"""The simulated data plane's beam search: which beam each surviving candidate continues.

The simulator has no logits, so a seeded model stands in for the scores. It has one parameter,
`beam_continue` (workload.beam_continue): after each decode step of a beam search of width k, each
of the k surviving candidates continues its own beam (candidate i, beam i) with probability
beam_continue, and otherwise a beam drawn uniformly from the group's k (its own included). Beams
nobody continues die; a beam drawn by several candidates forks (engine.core.beam puts the
candidates into the group's slots, and the control plane shares or copies the parent's KV).
beam_continue = 1 never forks (the beams share only the prompt, like parallel samples); lower values
fork more often, so the beams share longer histories and save more memory under vLLM.

Its default, fitted to the paper's beam-search memory saving, is the workload's
(sim.workload.beams.DEFAULT_BEAM_CONTINUE).

Draws come from the run's one seeded numpy Generator, in batch order, so a run is deterministic. They are
taken from it a block at a time (UniformDraws) and handed out as one call per step would have drawn them;
settle() then leaves the Generator where those calls would have.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.core.batch import Batch
from engine.core.beam import beam_parents

DRAW_BLOCK = 4096  # uniform draws taken from the Generator at once
# bit generators whose advance(k) is k draws of random(): one 64-bit output per double
ADVANCES_BY_DRAW = ("PCG64", "PCG64DXSM")


class UniformDraws:
    """rng.random(n) for a stream of small n, drawn DRAW_BLOCK at a time: the same floats in the same order (a
    double is one 64-bit output, whichever call draws it), without a numpy call per decode step of a beam search.
    Each take(n) says where in `values` its n draws lie (until the next take), and the draws at or above `mark`
    are found by position (at_least) rather than by reading every draw: a beam search's step reads only the
    few candidates that leave their own beam.
    settle() puts the Generator's state where the calls one by one would have left it (the state before the
    first block, advanced by the draws handed out), so that whoever draws next draws what they would have.
    A bit generator that cannot be advanced so is drawn from call by call."""

    def __init__(self, rng: np.random.Generator, block: int = DRAW_BLOCK, mark: float = 1.0):
        """block: draws taken at once; 0 draws call by call. mark: the threshold at_least looks for."""
        self.rng = rng
        self.block = block
        self.mark = mark
        self.buffered = block > 0 and type(rng.bit_generator).__name__ in ADVANCES_BY_DRAW
        self.values: Any = np.empty(0)  # float64 draws; a take's lie at [its position, + n)
        self._marked: list[int] = []  # positions in values of the draws >= mark, ascending
        self._at = 0
        self._handed_out = 0
        self._state: Mapping[str, Any] | None = None  # the Generator's, before the first block since the last settle()

    def take(self, n: int) -> int:
        """Hand out the next n draws: their first position in `values`."""
        if not self.buffered:
            self._hold(self.rng.random(n))
            return 0
        if self._at + n > len(self.values):
            if self._state is None:
                self._state = self.rng.bit_generator.state
            self._hold(np.concatenate((self.values[self._at:], self.rng.random(max(self.block, n)))))
        at = self._at
        self._at += n
        self._handed_out += n
        return at

    def _hold(self, values: Any) -> None:
        self.values = values
        self._marked = np.flatnonzero(values >= self.mark).tolist()
        self._at = 0

    def at_least(self, start: int, stop: int) -> list[int]:
        """The positions in [start, stop) of `values` whose draws are >= mark, ascending."""
        marked = self._marked
        return marked[bisect.bisect_left(marked, start):bisect.bisect_left(marked, stop)]

    def value(self, position: int) -> float:
        return float(self.values[position])

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
        self.values, self._marked, self._at, self._handed_out, self._state = np.empty(0), [], 0, 0, None


class BeamParentModel:
    """Chooses parents for the beam searches a batch decoded; draws from `rng`."""

    def __init__(self, beam_continue: float, rng: np.random.Generator, draw_block: int = DRAW_BLOCK):
        """draw_block: UniformDraws' block (0: a numpy call per step)."""
        if not 0.0 <= beam_continue <= 1.0:
            raise ValueError(f"beam_continue must be a probability in [0, 1], got {beam_continue!r}")
        self.beam_continue = beam_continue
        self.rng = rng
        # a candidate whose first draw is >= beam_continue leaves its own beam
        self.draws = UniformDraws(rng, draw_block, mark=beam_continue)

    def parents(self, batch: Batch) -> dict[int, int]:
        """The batch's forks, {child seq id: parent seq id}; none after a prefill (every beam is the
        prompt then) and none for beams that continue themselves."""
        prefilled = set(batch.prefill_sample_ids) if batch.prefill_sample_ids else ()
        decoded = [ids for ids in batch.beam_groups if ids not in prefilled]
        if not decoded:
            return {}
        total = sum(map(len, decoded))
        # the step's candidates in batch order draw a u each (stay: u < beam_continue), then a u each again (the
        # beam a leaver continues); only the leavers are read, by their offsets among the candidates
        stays_at = self.draws.take(total)
        leavers = [p - stays_at for p in self.draws.at_least(stays_at, stays_at + total)]
        uniform_at = self.draws.take(total)
        return self._forks(decoded, leavers, uniform_at) if leavers else {}

    def _forks(self, decoded: list[tuple[int, ...]], leavers: list[int], uniform_at: int) -> dict[int, int]:
        """Each group with a leaver: its candidate j continues its own beam, or the beam int(u k) drawn
        uniformly among its k (the float u k and its floor are numpy's; in Python, as only a few leave)."""
        forks: dict[int, int] = {}
        k, start = 0, 0
        for ids in decoded:
            width = len(ids)
            end = start + width
            if leavers[k] < end:
                parents = list(ids)
                while k < len(leavers) and leavers[k] < end:
                    j = leavers[k] - start
                    parents[j] = ids[int(self.draws.value(uniform_at + start + j) * width)]
                    k += 1
                forks.update(beam_parents(ids, parents))
                if k == len(leavers):
                    break
            start = end
        return forks

    def settle(self) -> None:
        """The run's Generator as if every draw had been its own call (UniformDraws.settle): call once the
        simulation ends."""
        self.draws.settle()
