"""Beam search in the control plane: which sequence slot each surviving candidate takes.

After a decode step of a beam group, the data plane (the engine from its scores, the simulator
from its model of parent choice) names, for each of the k surviving candidates, the beam it
continues. A parent may get several children and others none. The control plane keeps k
sequences per group, so the candidates are put into slots the paper-era way (cacheflow's
sampler): a beam that survives keeps its own slot for its first child, and the slots of beams
that died take the extra children. A parent is then never overwritten in the step that forks it,
and the scheduler applies the result as forks: the child's slot drops its blocks and takes the
parent's (vLLM: shared by reference count; Orca: copied into the child's reservation).
"""
from __future__ import annotations

from collections.abc import Sequence


def continue_beams(seq_ids: Sequence[int], parents: Sequence[int]) -> list[int]:
    """For each slot seq_ids[j], the index of the candidate it takes; candidate i continues the beam
    parents[i] (one of seq_ids). Raises ValueError unless there is one candidate per slot."""
    if len(parents) != len(seq_ids):
        raise ValueError(f"a beam group of {len(seq_ids)} sequences needs {len(seq_ids)} parent choices, "
                         f"got {len(parents)}")
    slot_of = {seq_id: j for j, seq_id in enumerate(seq_ids)}
    taken: list[int | None] = [None] * len(seq_ids)
    extra = []
    for i, parent in enumerate(parents):
        j = slot_of.get(parent)
        if j is None:
            raise ValueError(f"candidate {i} continues sequence {parent}, which is not a beam of its group "
                             f"{list(seq_ids)}")
        if taken[j] is None:
            taken[j] = i  # the parent survives: its first child continues it in place
        else:
            extra.append(i)
    extra.reverse()
    return [i if i is not None else extra.pop() for i in taken]


def beam_parents(seq_ids: Sequence[int], parents: Sequence[int]) -> dict[int, int]:
    """The forks that put the candidates into slots: {child seq id: parent seq id} for every slot
    whose beam died and now continues another (slots that continue themselves are left out)."""
    chosen = continue_beams(seq_ids, parents)
    return {seq_id: parents[i] for seq_id, i in zip(seq_ids, chosen) if parents[i] != seq_id}
