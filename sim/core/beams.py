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

Draws come from the run's one seeded numpy Generator, in batch order, so a run is deterministic.
"""
from __future__ import annotations

import numpy as np

from engine.core.batch import Batch
from engine.core.beam import beam_parents

DEFAULT_BEAM_CONTINUE = 0.93


class BeamParentModel:
    """Chooses parents for the beam searches a batch decoded; draws from `rng`."""

    def __init__(self, beam_continue: float, rng: np.random.Generator):
        if not 0.0 <= beam_continue <= 1.0:
            raise ValueError(f"beam_continue must be a probability in [0, 1], got {beam_continue!r}")
        self.beam_continue = beam_continue
        self.rng = rng

    def parents(self, batch: Batch) -> dict[int, int]:
        """The batch's forks, {child seq id: parent seq id}; none after a prefill (every beam is the
        prompt then) and none for beams that continue themselves."""
        prefilled = set(batch.prefill_sample_ids) if batch.prefill_sample_ids else ()
        decoded = [ids for ids in batch.beam_groups if ids not in prefilled]
        if not decoded:
            return {}
        total = sum(map(len, decoded))
        stays = (self.rng.random(total) < self.beam_continue).tolist()
        uniform = self.rng.random(total).tolist()
        # candidate j of a group of width k continues its own beam, or the beam int(u k) drawn uniformly (the
        # float u k and its floor are numpy's; in Python, as a batch holds only a few beams a step)
        forks: dict[int, int] = {}
        start = 0
        for ids in decoded:
            width = len(ids)
            parents = [ids[j] if stays[start + j] else ids[int(uniform[start + j] * width)] for j in range(width)]
            forks.update(beam_parents(ids, parents))
            start += width
        return forks
