"""A scheduler names each object it holds once, what a step decided travels as one StepPlan, and each family is
one class on the shared skeleton.

A reader holds one name per thing: the KV memory is `allocator` (typed as what it is), its breakdown's tracker
`kv`; no attribute is another's alias. schedule() keeps its plan as the step in flight, complete() applies it.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.core.scheduler.base import Scheduler
from engine.core.scheduler.common import QueueScheduler
from engine.core.scheduler.plan import StepPlan
from engine.core.scheduler.reservation_scheduler import ReservationScheduler
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.sequence import SequenceCounter, make_group
from engine.core.system import PAPER_SYSTEMS
from tests.helpers.core_harness import scheduler_for

FAMILIES = ["vllm", "orca-oracle", "fastertransformer"]


def _busy(name: str):
    """A scheduler part way through serving: requests running, one waiting."""
    sched = scheduler_for(replace(PAPER_SYSTEMS[name], block_size=4), num_gpu_blocks=64)
    ids = SequenceCounter()
    for rid, (prompt, output, n) in enumerate([(5, 6, 1), (7, 5, 2), (3, 8, 1)]):
        sched.add_request(make_group(rid, 0.0, prompt, output, n, ids))
    sched.complete(sched.schedule(), 1.0)
    return sched


def _held(sched) -> dict[str, object]:
    """The scheduler's attributes that hold an object of their own (no numbers, strings, flags or methods)."""
    held = {}
    for name in dir(sched):
        if name.startswith("__"):
            continue
        value = getattr(sched, name)
        if value is None or isinstance(value, (bool, int, float, str)) or callable(value):
            continue
        held[name] = value
    return held


@pytest.mark.parametrize("name", FAMILIES)
def test_no_object_is_held_under_two_names(name):
    held = _held(_busy(name))
    by_id: dict[int, list[str]] = {}
    for attr, value in held.items():
        by_id.setdefault(id(value), []).append(attr)
    assert [names for names in by_id.values() if len(names) > 1] == []
    assert "allocator" in held and "kv" in held


@pytest.mark.parametrize("name", FAMILIES)
def test_the_step_in_flight_is_one_plan_from_schedule_to_complete(name):
    sched = _busy(name)
    assert sched.in_flight is None, "complete() applied the last plan"
    batch = sched.schedule()
    plan = sched.in_flight
    assert isinstance(plan, StepPlan)
    decoding = {seq_id for group in plan.decode_groups for seq_id in (s.seq_id for s in group.running_seqs())}
    assert decoding == set(batch.decode_seq_ids)
    sched.complete(batch, 2.0)
    assert sched.in_flight is None


def test_each_family_is_one_class_on_the_shared_skeleton():
    assert VLLMScheduler.__mro__[1:] == (QueueScheduler, Scheduler, object)
    for name in ("orca-oracle", "fastertransformer"):
        cls = type(scheduler_for(PAPER_SYSTEMS[name], 64))
        assert cls.__mro__[1:] == (ReservationScheduler, QueueScheduler, Scheduler, object)
